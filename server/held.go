package server

import (
	"context"
	"errors"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/store"
)

// Held requests: an acquire with waitUpToMs is one kernel command. When
// its Ready names an ask (AskID), the request parks on that askId in its
// workspace (ws.parked); the step that ends the ask, whichever command it
// is, hands the answer to the parked request (deliverLocked), which writes
// it once that step is durable. The server decides nothing about who asks
// next: the kernel re-decides its asks in queue order (SPEC, "Held asks").
// A request that can no longer be answered (its client went away, its key
// was revoked, the plane shuts down) cancels its ask; a grant it got but
// cannot deliver is released.

// parked is one held request waiting for its ask's answer.
type parked struct {
	resource, actor string
	ch              chan heldAnswer // the one answer; buffered, so a step never blocks
}

// heldAnswer is what a parked request gets: its ask's answer, the lease of
// a grant (from the step's typed events), and the commit to wait for
// before writing it; or err when the workspace was reloaded from disk.
type heldAnswer struct {
	ans     kernel.AskAnswer
	leaseID string
	ticket  *ticket
	err     error
}

// heldGrant is a lease a held request was granted: released when the
// grant cannot be delivered.
type heldGrant struct {
	ws                       *workspace
	resource, actor, leaseID string
}

// errReloaded ends the held requests of a workspace rebuilt from disk.
var errReloaded = errors.New("the workspace was rebuilt from disk after a failed write; ask again")

// deliverLocked hands the answers of the asks that ended in the step rd to
// the requests parked on them (ws.mu held); t is the step's commit. An ask
// with no request parked is one made on a machine that a failed commit
// made stale: that machine's steps are never committed, and its reload
// ends every ask.
func (s *Server) deliverLocked(ws *workspace, rd kernel.Ready, t *ticket) {
	for _, a := range rd.Answers {
		p := ws.parked[a.AskID]
		if p == nil {
			continue
		}
		delete(ws.parked, a.AskID)
		h := heldAnswer{ans: a, ticket: t}
		if a.Status == 200 {
			h.leaseID = grantedLease(rd.Events, p.resource, p.actor)
		}
		s.metrics.asksAnswered.Add(1)
		p.ch <- h
	}
}

// grantedLease is the lease id of the grant (or renewal) of resource to
// actor among a step's events; "" when there is none.
func grantedLease(events []kernel.Event, resource, actor string) string {
	for _, e := range events {
		if (e.Type == "coordination.lease" || e.Type == "coordination.renew") && e.Resource == resource && e.ActorDid == actor {
			return e.LeaseID
		}
	}
	return ""
}

// unparkAll ends every request parked on ws (ws.mu held): its machine is
// being rebuilt from disk, which ends their asks.
func (ws *workspace) unparkAll() {
	for id, p := range ws.parked {
		p.ch <- heldAnswer{err: errReloaded}
		delete(ws.parked, id)
	}
}

// runHeld runs a held acquire (c.WaitUpToMs > 0, c decoded) for k: within
// the caps on open held requests (heldcap.go), one command; parked on its
// ask until the kernel answers it, the request's context ends or the plane
// shuts down. It returns the answer to write and, for a grant, the lease
// to release if that write fails.
func (s *Server) runHeld(ctx context.Context, k store.Key, c kernel.Command, body []byte) (rep reply, _ *heldGrant) {
	start := time.Now()
	hctx, done, refused, ok := s.hold(ctx, k)
	if !ok {
		return refused, nil
	}
	defer done()
	ws, err := s.workspace(k.WorkspaceID)
	if err != nil {
		s.log.Error("workspace unavailable", "workspace", k.Workspace, "err", err)
		return unavailable(err), nil
	}
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return unavailable(errShutdown), nil
	}
	ws.mu.Lock()
	a := s.applyLocked(ws, c, body)
	var p *parked
	askID := a.rd.AskID
	if a.err == nil && askID != "" {
		p = &parked{resource: c.Resource, actor: c.ActorDid, ch: make(chan heldAnswer, 1)}
		if ws.parked == nil {
			ws.parked = map[string]*parked{}
		}
		ws.parked[askID] = p
	}
	ws.mu.Unlock()
	s.life.RUnlock()
	if p == nil {
		return s.heldAnsweredAt(start, hctx, ws, c, a)
	}
	// The ask's own step answers nothing: its commit is waited for beside
	// the answer, not before it (the step that answers the ask commits
	// after it, so that answer's commit covers it too), and a failure of
	// it ends the request.
	var h heldAnswer
	var own <-chan struct{} // nil: no commit of its own to wait for
	if a.ticket != nil {
		own = a.ticket.done
	}
	stepped := time.Duration(-1)
	defer func() {
		if stepped < 0 {
			stepped = time.Since(start)
		}
		// Counted once, with the status of its answer and the time to its
		// own step's durable answer.
		s.metrics.observe(kernel.OpAcquire, rep.status, stepped)
	}()
wait:
	for {
		select {
		case <-own:
			own, stepped = nil, time.Since(start)
			if err := a.ticket.err; err != nil {
				ws.mu.Lock()
				if ws.parked[askID] == p {
					delete(ws.parked, askID) // the machine is stale: its reload ends the ask
				}
				ws.mu.Unlock()
				return unavailable(err), nil
			}
		case h = <-p.ch:
			if stepped < 0 {
				stepped = time.Since(start)
			}
			break wait
		case <-hctx.Done():
			h, ok = s.abandon(ws, askID, p)
			if !ok {
				return s.gone(hctx), nil
			}
			break wait
		case <-s.draining:
			if h, ok = s.abandon(ws, askID, p); !ok {
				return unavailable(errShutdown), nil
			}
			break wait
		}
	}
	if h.err != nil {
		return unavailable(h.err), nil
	}
	if err := (applied{ticket: h.ticket}).wait(); err != nil {
		return unavailable(err), nil
	}
	return s.deliverHeld(hctx, ws, c, h)
}

// deliverHeld is the reply of a held acquire answered h, durable now,
// and for a grant the lease to release if writing it fails.
func (s *Server) deliverHeld(hctx context.Context, ws *workspace, c kernel.Command, h heldAnswer) (reply, *heldGrant) {
	var g *heldGrant
	if h.leaseID != "" {
		g = &heldGrant{ws: ws, resource: c.Resource, actor: c.ActorDid, leaseID: h.leaseID}
	}
	if s.heldAnswered != nil {
		s.heldAnswered(hctx)
	}
	if hctx.Err() != nil {
		// Answered, but there is no one to answer: a grant is given back.
		s.releaseUndelivered(g)
		return s.gone(hctx), nil
	}
	return reply{status: h.ans.Status, retryAfter: h.ans.RetryAfterSec, answer: h.ans.Answer}, g
}

// heldAnsweredAt is a held acquire whose own step answered it (a grant,
// a refusal other than lease_held, or a failure): its answer once durable.
func (s *Server) heldAnsweredAt(start time.Time, hctx context.Context, ws *workspace, c kernel.Command, a applied) (rep reply, _ *heldGrant) {
	err := a.wait()
	stepped := time.Since(start)
	defer func() { s.metrics.observe(kernel.OpAcquire, rep.status, stepped) }()
	if err != nil {
		return unavailable(err), nil
	}
	h := heldAnswer{ans: kernel.AskAnswer{Status: a.rd.Status, RetryAfterSec: a.rd.RetryAfterSec, Answer: a.rd.Answer}}
	if a.rd.Status == 200 {
		h.leaseID = grantedLease(a.rd.Events, c.Resource, c.ActorDid)
	}
	return s.deliverHeld(hctx, ws, c, h)
}

// gone is the answer to a held request whose context ended: 401 when its
// key was revoked (SPEC: answered to a client still there), else an answer
// no one reads (the client went away).
func (s *Server) gone(hctx context.Context) reply {
	if context.Cause(hctx) == errKeyRevoked {
		return refusal(401, api.ReasonUnauthorized, errKeyRevoked.Error())
	}
	return unavailable(context.Cause(hctx))
}

// abandon ends the wait of the request parked on askID: while it is still
// parked, its ask is cancelled (a logged cancel {askId}) and ok is false;
// when a step answered it meanwhile, that answer is returned.
func (s *Server) abandon(ws *workspace, askID string, p *parked) (h heldAnswer, ok bool) {
	s.life.RLock()
	ws.mu.Lock()
	if ws.parked[askID] != p {
		ws.mu.Unlock()
		s.life.RUnlock()
		return <-p.ch, true
	}
	delete(ws.parked, askID)
	var a applied
	if !s.closed { // else the next start cancels it
		a = s.applyLocked(ws, kernel.Command{Op: kernel.OpCancel, AskID: askID, HasAskID: true}, nil)
	}
	ws.mu.Unlock()
	s.life.RUnlock()
	if err := a.wait(); err != nil {
		s.log.Warn("cancelling a held ask failed; the workspace's reload ends it", "workspace", ws.name, "askId", askID, "err", err)
	}
	return heldAnswer{}, false
}

// releaseUndelivered releases the lease of a grant its client did not get
// (nil: nothing to release): a logged release with the lease id.
func (s *Server) releaseUndelivered(g *heldGrant) {
	if g == nil {
		return
	}
	c := kernel.Command{Op: kernel.OpRelease, Resource: g.resource, ActorDid: g.actor, LeaseID: g.leaseID, HasLeaseID: true}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return
	}
	g.ws.mu.Lock()
	a := s.applyLocked(g.ws, c, nil)
	g.ws.mu.Unlock()
	if err := a.wait(); err != nil || a.rd.Status != 200 {
		s.log.Warn("releasing a grant that could not be delivered failed", "workspace", g.ws.name, "leaseId", g.leaseID,
			"status", a.rd.Status, "err", err)
		return
	}
	s.metrics.undelivered.Add(1)
}
