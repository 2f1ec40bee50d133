package server

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// MaxWaitUpToMs is the longest a lease request may be held
// (POST lease?waitUpToMs=N, N ≤ 30000).
const MaxWaitUpToMs = 30000

// claimMargin is how long before the end of a held caller's claim the
// server asks again on its behalf, so the claim (and its queue place) is
// kept while it waits.
const claimMargin = 300 * time.Millisecond

// ParseWaitUpTo reads the waitUpToMs query parameter: "" is no wait.
func ParseWaitUpTo(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n > MaxWaitUpToMs || v[0] == '+' {
		return 0, &waitUpToError{v}
	}
	return time.Duration(n) * time.Millisecond, nil
}

type waitUpToError struct{ v string }

func (e *waitUpToError) Error() string {
	return "waitUpToMs must be a whole number of milliseconds from 0 to " + strconv.Itoa(MaxWaitUpToMs) + ", not " + strconv.Quote(e.v)
}

// CallWaiting is Call for an acquire that may be held up to waitUpTo
// (at most MaxWaitUpToMs): while the answer is lease_held, the server asks
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
		r = s.callHeld(ctx, k, body, waitUpTo)
	}
	return r.status, r.answer, nil
}

// heldAnswer is what the hold loop reads of a refusal.
type heldAnswer struct {
	Reason   string `json:"reason"`
	Stampede *struct {
		Admitted []string `json:"admitted"`
		WaitMs   int64    `json:"waitMs"`
	} `json:"stampede"`
}

var leaseHeldMark = []byte(`"reason":"lease_held"`)

func (s *Server) callHeld(ctx context.Context, k store.Key, body []byte, waitUpTo time.Duration) reply {
	waitUpTo = min(waitUpTo, MaxWaitUpToMs*time.Millisecond)
	deadline := s.cfg.Clock().Add(waitUpTo)
	c, err := kernel.DecodeRequest(kernel.OpAcquire, 0, body)
	if err != nil {
		return s.callAs(ctx, k, kernel.OpAcquire, body, time.Now()) // answers the refusal
	}
	ws, err := s.workspace(k.WorkspaceID)
	if err != nil {
		return s.callAs(ctx, k, kernel.OpAcquire, body, time.Now()) // answers 503
	}
	// The caller's own release of the resource ends the hold: a client
	// that gave up (exec interrupted) and dropped its wait must not be
	// made a waiter again by a request it abandoned.
	gaveUp := c.Resource + "\x00" + c.ActorDid
	h := &heldAsk{resource: c.Resource, actor: c.ActorDid, place: notAdmitted}
	ws.mu.Lock()
	ws.holding++
	released := ws.released[gaveUp]
	ws.addHeldLocked(h)
	ws.mu.Unlock()
	defer func() {
		ws.mu.Lock()
		if ws.holding--; ws.holding == 0 {
			clear(ws.released)
		}
		ws.removeHeldLocked(h)
		ws.mu.Unlock()
	}()
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
			r, changed = s.decideAsNotify(ctx, k, kernel.OpAcquire, body, h)
		}
		s.life.RUnlock()
		if h.again {
			continue
		}
		s.metrics.observe(kernel.OpAcquire, r.status, time.Since(start))
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
			continue
		}
		select {
		case <-changed:
		case <-timer:
		case <-s.draining:
		case <-ctx.Done():
		}
		stop()
		if ctx.Err() != nil || isClosed(s.draining) {
			return r
		}
		ws.mu.Lock()
		gone := ws.released[gaveUp] != released
		ws.mu.Unlock()
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
type heldAsk struct {
	resource, actor string
	asked           uint64
	held            bool
	place           int
	waitMs          int64
	// again is set when its ask found it was no longer its turn.
	again bool
}

// heldQueue is what a workspace keeps per resource with held requests:
// how many, and the wake whose head has asked.
type heldQueue struct {
	n    int
	gate uint64
}

func (ws *workspace) addHeldLocked(h *heldAsk) {
	if ws.held == nil {
		ws.held = map[*heldAsk]struct{}{}
		ws.heldQueues = map[string]*heldQueue{}
		ws.turn.L = &ws.mu
	}
	h.asked = ws.wakes
	ws.held[h] = struct{}{}
	q := ws.heldQueues[h.resource]
	if q == nil {
		q = &heldQueue{gate: ws.wakes}
		ws.heldQueues[h.resource] = q
	}
	q.n++
}

func (ws *workspace) removeHeldLocked(h *heldAsk) {
	delete(ws.held, h)
	q := ws.heldQueues[h.resource]
	if q.n--; q.n == 0 {
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
	for o := range ws.held {
		if o != h && o.resource == h.resource && o.place < h.place && o.asked < ws.wakes {
			return true
		}
	}
	return false
}

// askedLocked records h's ask and its answer res: its new place in the
// queue (ws.mu held).
func (ws *workspace) askedLocked(h *heldAsk, res kernel.Result) {
	if q := ws.heldQueues[h.resource]; !ws.aheadLocked(h) {
		q.gate = ws.wakes // h was the head: the rest need not wait
	}
	h.asked = ws.wakes
	h.held, h.place, h.waitMs = false, notAdmitted, 0
	if res.Status == 409 && bytes.Contains(res.Answer, leaseHeldMark) {
		var a heldAnswer
		if json.Unmarshal(res.Answer, &a) == nil && a.Reason == kernel.ReasonLeaseHeld {
			h.held = true
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
