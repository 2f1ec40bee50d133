package server

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/store"
)

// claimMargin is how long before the end of a held caller's claim the
// server asks again on its behalf, so the claim (and its queue place) is
// kept while it waits.
const claimMargin = 300 * time.Millisecond

// CallWaiting is Call for an acquire that may be held up to waitUpTo
// (at most api.MaxWaitUpToMs): while the answer is lease_held, the server asks
// again on the caller's behalf at the plane's own moments — when something
// in the workspace may have freed (a release, a lapse or revocation, a
// claim ending: any alarm tick or command at or after the next alarm, a
// renewal that may have changed its mode, an operator's act) and shortly
// before the caller's own claim would end — and answers the grant or any
// other refusal at once, or the last lease_held when the time is up, the
// request's context ends or the server shuts down. It never polls on a
// timer of its own.
func (s *Server) CallWaiting(ctx context.Context, key string, body []byte, waitUpTo time.Duration) (status int, answer []byte, err error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	k, r, ok := s.authenticateLive(ctx, key)
	if ok {
		var done func()
		var hctx context.Context
		if hctx, done, r, ok = s.hold(ctx, k); ok {
			r = s.afterHeld(hctx, k, s.callHeld(hctx, k, body, waitUpTo))
			done()
		}
	}
	return r.status, r.answer, nil
}

// heldAnswer is what the hold loop reads of a refusal.
type heldAnswer struct {
	Reason   string          `json:"reason"`
	Holder   json.RawMessage `json:"holder"`
	Stampede *struct {
		Admitted []string `json:"admitted"`
		WaitMs   int64    `json:"waitMs"`
	} `json:"stampede"`
}

var leaseHeldMark = []byte(`"reason":"lease_held"`)

func (s *Server) callHeld(ctx context.Context, k store.Key, body []byte, waitUpTo time.Duration) reply {
	waitUpTo = min(waitUpTo, api.MaxWaitUpToMs*time.Millisecond)
	deadline := s.cfg.Clock().Add(waitUpTo)
	c, err := kernel.DecodeRequest(kernel.OpAcquire, 0, body)
	if err != nil {
		return s.run(ctx, k, kernel.OpAcquire, body) // answers the refusal
	}
	ws, err := s.workspace(k.WorkspaceID)
	if err != nil {
		return s.run(ctx, k, kernel.OpAcquire, body) // answers 503
	}
	// The caller's own release of the resource ends the hold: a client
	// that gave up (exec interrupted) and dropped its wait must not be
	// made a waiter again by a request it abandoned.
	gaveUp := c.Resource + "\x00" + c.ActorDid
	h := &heldAsk{resource: c.Resource, actor: c.ActorDid, place: notAdmitted, reader: c.Mode == "read"}
	ws.mu.Lock()
	released := ws.released[gaveUp]
	ws.addHeldLocked(h)
	ws.mu.Unlock()
	defer func() {
		ws.mu.Lock()
		ws.removeHeldLocked(h)
		ws.mu.Unlock()
	}()
	// pass hands the wake of h's resource that h holds (baton) to the next
	// writer held there, when h cannot use it.
	baton := false
	pass := func() {
		if baton {
			baton = false
			ws.mu.Lock()
			ws.wakeWriterLocked(h.resource)
			ws.mu.Unlock()
		}
	}
	defer pass()
	for {
		// Outside s.life: a shutdown waiting for the write lock must not
		// stop those ahead from asking (and leaving).
		ws.mu.Lock()
		ws.awaitTurnLocked(h)
		ws.mu.Unlock()
		h.again = false
		start := time.Now()
		var r reply
		var changed <-chan struct{}
		s.life.RLock()
		if s.closed {
			r = unavailable(errShutdown)
		} else {
			r, changed = s.decide(ctx, k, kernel.OpAcquire, body, h)
		}
		s.life.RUnlock()
		if h.again {
			continue
		}
		s.metrics.observe(kernel.OpAcquire, r.status, time.Since(start))
		if baton && (r.status == 200 || h.held && h.holder) {
			// Granted, the new lease excludes every other writer; refused
			// for a live lease, that lease stands in every writer's way:
			// the wake is used up either way.
			baton = false
		}
		pass() // else claims stood in its way, or it could not ask: the next one may
		if r.status != 409 || !bytes.Contains(r.answer, leaseHeldMark) {
			return r
		}
		now := s.cfg.Clock()
		left := deadline.Sub(now)
		if left <= 0 || changed == nil {
			return r
		}
		if !h.held {
			return r
		}
		wake := left
		if h.place != notAdmitted {
			// An admitted waiter's claim lasts waitMs + 1000 ms from this
			// answer: ask again just before it ends.
			claim := time.Duration(h.waitMs)*time.Millisecond + time.Second - claimMargin
			wake = min(wake, claim)
		}
		timer := make(chan struct{})
		stop := s.cfg.AfterFunc(wake, func() { close(timer) })
		if s.cfg.Clock().Sub(now) >= time.Millisecond {
			// The clock moved while the timer was being armed (a stepped
			// test clock, a stalled goroutine): the timer is late by that
			// much, so ask again now rather than trust it.
			stop()
			ws.mu.Lock()
			baton, h.woken, h.waiting = h.woken && !h.reader, false, false
			ws.mu.Unlock()
			continue
		}
		select {
		case <-changed:
		case <-h.wake:
		case <-timer:
		case <-s.draining:
		case <-ctx.Done():
		}
		stop()
		ws.mu.Lock()
		baton, h.woken, h.waiting = h.woken && !h.reader, false, false
		gone := ws.released[gaveUp] != released
		ws.mu.Unlock()
		if ctx.Err() != nil || isClosed(s.draining) {
			return r
		}
		if gone {
			return r
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// notifyLocked wakes the requests held on ws (ws.mu held).
func (ws *workspace) notifyLocked() {
	if ws.changed != nil {
		close(ws.changed)
		ws.changed = nil
		ws.wakes++
	}
}

// notAdmitted is the place of a held request that is not among its
// resource's admitted waiters.
const notAdmitted = 1 << 30

// heldAsk is one held request as its workspace sees it: its resource,
// what its last ask was answered (lease_held, its place among the
// resource's admitted waiters, the waitMs advised) and the workspace's
// wakes at that ask. Only its own request writes it, with ws.mu held.
//
// The kernel lets the first claimant to ask after a resource frees have
// it; if every held request woken by a release raced to ask, the winner
// would be whichever goroutine ran first, and an admitted waiter could
// lose that race many times in a row. So after a wake, the held requests
// on a resource wait for the one nearest the head of its queue to ask
// first (a strict order of places: the wait always ends); once it has,
// the gate is open for the rest of that wake, whose order no longer
// decides who holds the resource. Held requests are granted in queue
// order.
//
// A release or a renewal frees its own resource only: it wakes the
// readers held there and one writer, the one nearest the head (then the
// first held; notifyResourceLocked). Waking every writer would only have
// all but one refused again, each refusal a command applied and logged
// (under --engine wasm, also a call into the WebAssembly kernel): with 64
// clients on 4 resources that was about 17 commands per granted pair
// instead of 3. The writer woken passes the wake to the next one when
// claims stand in its way, or when it cannot ask; a grant, or a refusal
// for a live lease (which stands in every writer's way), uses it up.
// Every held request still asks again before its claim ends, at every
// alarm tick and lapse (notifyLocked wakes everyone) and when its time is
// up.
type heldAsk struct {
	resource, actor string
	reader          bool   // it asks mode read: woken at every change of its resource
	seq             uint64 // the order in which the held requests began
	asked           uint64
	held            bool
	holder          bool // its last refusal named a live lease's holder
	place           int
	waitMs          int64
	// again is set when its ask found it was no longer its turn.
	again bool
	// wake is closed when a change of its resource wakes it (woken set);
	// waiting is set from its refusal until it wakes.
	wake           chan struct{}
	woken, waiting bool
	tried          uint64 // the round of its resource at its last ask
}

// heldQueue is what a workspace keeps per resource with held requests:
// the requests, the wake whose head has asked, and the changes of the
// resource alone so far (a writer is woken at most once per change).
type heldQueue struct {
	members map[*heldAsk]struct{}
	gate    uint64
	round   uint64
}

func (ws *workspace) addHeldLocked(h *heldAsk) {
	if ws.heldQueues == nil {
		ws.heldQueues = map[string]*heldQueue{}
		ws.turn.L = &ws.mu
	}
	ws.holding++
	h.asked = ws.wakes
	ws.heldSeq++
	h.seq = ws.heldSeq
	q := ws.heldQueues[h.resource]
	if q == nil {
		q = &heldQueue{members: map[*heldAsk]struct{}{}, gate: ws.wakes}
		ws.heldQueues[h.resource] = q
	}
	q.members[h] = struct{}{}
}

func (ws *workspace) removeHeldLocked(h *heldAsk) {
	if ws.holding--; ws.holding == 0 {
		clear(ws.released)
	}
	q := ws.heldQueues[h.resource]
	if delete(q.members, h); len(q.members) == 0 {
		delete(ws.heldQueues, h.resource)
	}
	ws.turn.Broadcast()
}

// awaitTurnLocked returns once h may ask: its resource's gate is open
// for the last wake, or no held request ahead of h there has yet to ask
// since it (ws.mu held; released while it waits).
func (ws *workspace) awaitTurnLocked(h *heldAsk) {
	for !ws.mayAskLocked(h) {
		ws.turn.Wait()
	}
}

func (ws *workspace) mayAskLocked(h *heldAsk) bool {
	return ws.heldQueues[h.resource].gate >= ws.wakes || !ws.aheadLocked(h)
}

func (ws *workspace) aheadLocked(h *heldAsk) bool {
	for o := range ws.heldQueues[h.resource].members {
		if o != h && o.place < h.place && o.asked < ws.wakes {
			return true
		}
	}
	return false
}

// askedLocked records h's ask and its answer res: its new place in the
// queue (ws.mu held).
func (ws *workspace) askedLocked(h *heldAsk, res kernel.Result) {
	q := ws.heldQueues[h.resource]
	if !ws.aheadLocked(h) {
		q.gate = ws.wakes // h was the head: the rest need not wait
	}
	h.asked, h.tried = ws.wakes, q.round
	h.held, h.holder, h.place, h.waitMs = false, false, notAdmitted, 0
	if res.Status == 409 && bytes.Contains(res.Answer, leaseHeldMark) {
		var a heldAnswer
		if json.Unmarshal(res.Answer, &a) == nil && a.Reason == kernel.ReasonLeaseHeld {
			h.held, h.holder = true, len(a.Holder) > 0 && string(a.Holder) != "null"
			h.wake, h.woken, h.waiting = make(chan struct{}), false, true
			if a.Stampede != nil {
				h.waitMs = a.Stampede.WaitMs
				if i := slices.Index(a.Stampede.Admitted, h.actor); i >= 0 {
					h.place = i
				}
			}
		}
	}
	ws.turn.Broadcast()
}

// notifyResourceLocked wakes the requests held on resource r that a
// change freeing r alone concerns: its readers and its first writer
// (ws.mu held).
func (ws *workspace) notifyResourceLocked(r string) {
	q := ws.heldQueues[r]
	if q == nil {
		return
	}
	q.round++
	for h := range q.members {
		if h.reader && h.waiting {
			h.waiting, h.woken = false, true
			close(h.wake)
		}
	}
	ws.wakeWriterLocked(r)
}

// wakeWriterLocked wakes the writer held on r nearest the head of its
// queue, then the one held first, among those waiting that have not asked
// since r last changed (ws.mu held).
func (ws *workspace) wakeWriterLocked(r string) {
	q := ws.heldQueues[r]
	if q == nil {
		return
	}
	var next *heldAsk
	for h := range q.members {
		if h.reader || !h.waiting || h.tried >= q.round {
			continue
		}
		if next == nil || h.place < next.place || h.place == next.place && h.seq < next.seq {
			next = h
		}
	}
	if next != nil {
		next.waiting, next.woken = false, true
		close(next.wake)
	}
}

// freesOnly is the one resource that a command's change may free, when
// it can free no other: a release's (it drops a lease and a waiter there
// only) and a renewal's (its mode may have become shared); "" when the
// change may free any resource (an alarm, a lapse, an operator's act) or
// the command's resource is not known (resource "").
func freesOnly(op kernel.Op, res kernel.Result, resource string, lapses bool) string {
	if lapses || resource == "" {
		return ""
	}
	switch op {
	case kernel.OpRelease:
		return resource
	case kernel.OpAcquire:
		for _, e := range res.Events {
			if e.Type != "coordination.renew" && e.Type != "coordination.lease" {
				return "" // an expiry: what lapsed may be anywhere
			}
		}
		return resource
	}
	return ""
}

// changedLocked is closed at ws's next change that may free a resource
// (ws.mu held).
func (ws *workspace) changedLocked() <-chan struct{} {
	if ws.changed == nil {
		ws.changed = make(chan struct{})
	}
	return ws.changed
}

// mayFree says whether a command's outcome may let a held request in: any
// change other than an acquire's, an acquire's renewal (its mode may have
// become shared) or the lapses it caused, and every alarm tick (a claim may
// have ended without an event).
func mayFree(op kernel.Op, res kernel.Result) bool {
	switch {
	case op == kernel.OpTick:
		return true
	case !res.Changed:
		return false
	case op == kernel.OpAcquire:
		for _, e := range res.Events {
			if e.Type == "coordination.renew" || e.Type == "coordination.expire" {
				return true
			}
		}
		return false
	}
	return true
}
