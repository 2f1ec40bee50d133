package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// DefaultRenewEvery is how often Holder renews a held lease: a third of
// the lease lifetime, so two renewals can fail before the lease lapses.
const DefaultRenewEvery = 10 * time.Second

// Holder holds one lease around a piece of work, the way `etcdctl lock`
// and `consul lock` do: it waits for the lease in requests the plane holds
// until the resource is free (see Acquire), stops on deadlock or suspension, renews
// while the work runs, and releases when it ends.
//
// Now and Sleep are the clock; tests replace them to drive renewal without
// real waits.
type Holder struct {
	Client *Client
	// Req names the resource, the agent and the mode.
	Req AcquireRequest
	// Timeout bounds the wait for the lease; zero waits without limit.
	Timeout time.Duration
	// RenewEvery is the renewal period; zero means DefaultRenewEvery.
	RenewEvery time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Sleep waits d or until ctx ends (nil: a real timer).
	Sleep func(ctx context.Context, d time.Duration) error
	// Logf, when set, gets progress lines for people (waiting, renewals
	// that failed).
	Logf func(format string, args ...any)

	mu    sync.Mutex
	lease *Lease // the newest lease granted
}

// RefusedError is a refusal that ends the wait: deadlock, suspended, or any
// other reason that retrying cannot fix (unauthorized, invalid_request,
// actor_mismatch).
type RefusedError struct {
	Op     kernel.Op
	Answer *Answer
}

func (e *RefusedError) Error() string {
	a := e.Answer
	switch a.Reason {
	case kernel.ReasonDeadlock:
		return fmt.Sprintf("deadlock: %s holds %s and waits on %s, so waiting would never end (cycle %v); release what you hold and retry",
			a.Holder, e.resource(), a.WaitingOn, a.Cycle)
	case kernel.ReasonSuspended:
		s := "suspended: the operator has suspended this agent"
		if a.Error != "" {
			s += " (" + a.Error + ")"
		}
		return s
	}
	return fmt.Sprintf("%s refused: %s", e.Op, a.Refusal())
}

func (e *RefusedError) resource() string {
	// The cycle reads agent, resource, agent, resource...: the resource
	// after the holder is the one the holder holds that the asker wants.
	for i := 0; i+1 < len(e.Answer.Cycle); i++ {
		if e.Answer.Cycle[i] != e.Answer.Holder {
			continue
		}
		if i > 0 {
			return e.Answer.Cycle[i-1]
		}
		return e.Answer.Cycle[len(e.Answer.Cycle)-1]
	}
	return "the resource"
}

// Reason is the refusal's reason, such as "deadlock".
func (e *RefusedError) Reason() string { return e.Answer.Reason }

// TimeoutError is a wait for the lease that ran out of time.
type TimeoutError struct {
	Resource string
	Waited   time.Duration
	Holder   string // the holder at the last refusal
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for %s (held by %s)", e.Waited.Round(time.Millisecond), e.Resource, e.Holder)
}

// LostError says the lease was lost while the work ran: a renewal was
// refused, the lease lapsed and was granted again under a new fence, or the
// plane could not be reached before the lease's lifetime ran out.
type LostError struct {
	Resource string
	Why      string
}

func (e *LostError) Error() string { return "lost the lease on " + e.Resource + ": " + e.Why }

func (h *Holder) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Holder) sleep(ctx context.Context, d time.Duration) error {
	if h.Sleep != nil {
		return h.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Holder) logf(format string, args ...any) {
	if h.Logf != nil {
		h.Logf(format, args...)
	}
}

// Lease is the newest lease granted, nil before the first grant.
func (h *Holder) Lease() *Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// unavailableWait is the pause after a 503 without Retry-After.
const unavailableWait = time.Second

// Acquire waits for the lease. It returns a *RefusedError on deadlock,
// suspension and refusals that retrying cannot fix, a *TimeoutError when
// Timeout runs out, ctx's error when ctx ends, and a transport error when
// the plane cannot be reached.
//
// Each request asks the plane to hold it (waitUpToMs) for what is left of
// Timeout, at most MaxWaitUpTo: the plane answers when the resource is
// free for this agent, so a wait costs one request per 30 s instead of one
// per back-off step. A lease_held answered before its hold ran out (a
// plane that does not hold requests, or one shutting down) is followed by
// the advised back-off instead.
func (h *Holder) Acquire(ctx context.Context) (*Lease, error) {
	start := h.now()
	lastHolder := ""
	loggedClaims := false
	for {
		hold := MaxWaitUpTo
		if h.Timeout > 0 {
			hold = min(hold, h.Timeout-h.now().Sub(start))
		}
		sent := h.now()
		a, err := h.Client.AcquireWaiting(ctx, h.Req, hold)
		if err != nil {
			return nil, err
		}
		held := hold > 0 && h.now().Sub(sent) >= hold
		var wait time.Duration
		switch {
		case a.OK && a.Lease != nil:
			h.mu.Lock()
			h.lease = a.Lease
			h.mu.Unlock()
			return a.Lease, nil
		case a.Reason == kernel.ReasonLeaseHeld:
			wait = 50 * time.Millisecond
			if a.Stampede != nil && a.Stampede.WaitMs > 0 {
				wait = time.Duration(a.Stampede.WaitMs) * time.Millisecond
			}
			if a.Holder != lastHolder || lastHolder == "" && !loggedClaims {
				if a.Holder != "" {
					h.logf("%s is held by %s; waiting", h.Req.Resource, a.Holder)
				} else {
					h.logf("%s is not held, but waiters ahead have claims on it (%s); waiting", h.Req.Resource, strings.Join(a.Claimants, ", "))
					loggedClaims = true
				}
				lastHolder = a.Holder
			}
			if held {
				wait = 0 // the plane held the request to its end: ask again at once
			}
		case a.Status == 503:
			wait = unavailableWait
			if a.RetryAfter > 0 {
				wait = a.RetryAfter
			}
			h.logf("the plane is unavailable (%s); retry in %s", a.Refusal(), wait)
		default:
			return nil, &RefusedError{Op: kernel.OpAcquire, Answer: a}
		}
		if h.Timeout > 0 {
			left := h.Timeout - h.now().Sub(start)
			if left <= 0 {
				return nil, &TimeoutError{Resource: h.Req.Resource, Waited: h.now().Sub(start), Holder: lastHolder}
			}
			wait = min(wait, left)
		}
		if wait == 0 {
			continue
		}
		if err := h.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// Release gives back the newest lease granted (by its id); with none it
// drops the agent as a waiter on the resource. It uses its own short
// deadline, so it works after ctx has ended.
func (h *Holder) Release(ctx context.Context) (*Answer, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req := ReleaseRequest{Resource: h.Req.Resource, ActorDid: h.Req.ActorDid}
	if l := h.Lease(); l != nil {
		req.LeaseID = l.ID
	}
	return h.Client.Release(rctx, req)
}

// Run acquires the lease, calls work while renewing it every RenewEvery,
// and releases it when work returns. work's context is cancelled with a
// *LostError cause (see context.Cause) when the lease is lost; work should
// then stop. Run returns the acquisition's error (after dropping the
// agent's wait), else work's error, else the *LostError if the lease was
// lost, else a release error.
//
// A loss is noticed without waiting for the next renewal: before it asks
// for the lease, Run opens the plane's events stream for its agent and
// resource, and the event that ends the lease (revoked by an operator's
// suspend, expired, released elsewhere) cancels work at once. A plane
// without the stream is watched by renewals alone; a plane that cannot be
// reached is taken to have lost the lease when its lifetime, counted from
// the last renewal sent, runs out.
func (h *Holder) Run(ctx context.Context, work func(ctx context.Context, l *Lease) error) error {
	wctx, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	w := &watcher{h: h, ended: map[string]string{}, lost: func(e *LostError) { cancelWork(e) }}
	sctx, stopWatch := context.WithCancel(wctx)
	watched := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(watched)
		w.run(sctx, ready)
	}()
	select {
	case <-ready:
	case <-watched:
	}
	l, err := h.Acquire(ctx)
	if err != nil {
		stopWatch()
		<-watched
		// Stop being a waiter; a failure here changes nothing for the caller.
		h.Release(ctx)
		return err
	}
	w.watch(l.ID)
	rctx, stopRenew := context.WithCancel(wctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lost := h.renew(rctx, l); lost != nil {
			cancelWork(lost)
		}
	}()
	var werr error
	if wctx.Err() == nil {
		werr = work(wctx, l)
	}
	stopRenew()
	stopWatch()
	<-done
	<-watched
	lost := context.Cause(wctx)
	var lostErr *LostError
	if !errors.As(lost, &lostErr) {
		lostErr = nil
	}
	a, rerr := h.Release(ctx)
	switch {
	case werr != nil:
		return werr
	case lostErr != nil:
		return lostErr
	case rerr != nil:
		return fmt.Errorf("releasing %s: %w", h.Req.Resource, rerr)
	case !a.OK:
		return &RefusedError{Op: kernel.OpRelease, Answer: a}
	}
	return nil
}

// watcher follows the events stream for a Holder and reports the event
// that ends its lease.
type watcher struct {
	h     *Holder
	lost  func(*LostError)
	mu    sync.Mutex
	lease string            // the lease watched, once granted
	ended map[string]string // leases of this agent and resource that ended before, and why
}

// watch starts watching lease id (events about it may have come first).
func (w *watcher) watch(id string) {
	w.mu.Lock()
	w.lease = id
	why, ended := w.ended[id]
	w.mu.Unlock()
	if ended {
		w.lost(&LostError{Resource: w.h.Req.Resource, Why: why})
	}
}

func (w *watcher) seen(e Event) {
	if e.Resource != w.h.Req.Resource || !e.Ends() {
		return
	}
	var why string
	switch e.Type {
	case "coordination.revoke":
		why = "the plane revoked it (an operator suspended " + e.ActorDid + ")"
	case "coordination.expire":
		why = "it expired: no renewal reached the plane in time"
	default:
		why = "it was released by another client of " + e.ActorDid
	}
	w.mu.Lock()
	mine := w.lease != "" && e.LeaseID == w.lease
	if !mine && len(w.ended) < 64 {
		w.ended[e.LeaseID] = why
	}
	w.mu.Unlock()
	if mine {
		w.lost(&LostError{Resource: w.h.Req.Resource, Why: why})
	}
}

// run reads the stream until ctx ends, resuming after a cut; ready closes
// once the stream is live (or has failed for the first time). A plane that
// refuses the stream (one without it, a key that may not read it) leaves
// the lease to the renewals.
func (w *watcher) run(ctx context.Context, ready chan struct{}) {
	var once sync.Once
	live := func() { once.Do(func() { close(ready) }) }
	defer live()
	after := int64(-1)
	for ctx.Err() == nil {
		err := w.h.Client.Events(ctx, EventsRequest{ActorDid: w.h.Req.ActorDid, Prefix: w.h.Req.Resource, After: after},
			func(next int64) {
				if after < 0 {
					after = next - 1
				}
				live()
			},
			func(e Event) error {
				after = e.ID
				w.seen(e)
				return nil
			})
		live()
		if ctx.Err() != nil {
			return
		}
		var se *StreamError
		if errors.As(err, &se) && se.Status != 0 && se.Status != 503 {
			if se.Status == 410 {
				after = -1 // behind retention: renewals tell what was missed
				continue
			}
			w.h.logf("the plane's events stream is not available (%s); a lost lease is noticed at the next renewal", se.Answer.Refusal())
			return
		}
		t := time.NewTimer(streamRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// streamRetry is the pause before the events stream is opened again after
// it was cut.
const streamRetry = 500 * time.Millisecond

// renew renews l until ctx ends; it returns a *LostError when the lease is
// lost, nil when ctx ends first.
func (h *Holder) renew(ctx context.Context, l *Lease) *LostError {
	every := h.RenewEvery
	if every <= 0 {
		every = DefaultRenewEvery
	}
	retry := min(every, time.Second)
	// expires is the local time by which the lease surely lapses: the
	// lifetime counted from when the last successful renewal was sent
	// (the grant is answered after it is asked for, so this is early).
	expires := h.now().Add(kernel.LeaseTTLMs * time.Millisecond)
	wait := every
	for {
		if err := h.sleep(ctx, wait); err != nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		sent := h.now()
		a, err := h.Client.Acquire(ctx, h.Req)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil || a.Status == 503:
			why := "unavailable"
			if err != nil {
				why = err.Error()
			}
			if !h.now().Before(expires) {
				return &LostError{Resource: l.Resource, Why: "could not renew before the lease lapsed: " + why}
			}
			h.logf("renewing %s failed (%s); retry in %s", l.Resource, why, retry)
			wait = retry
		case !a.OK || a.Lease == nil:
			// The refusal may have made the agent a waiter; the final
			// release then goes without a lease id, to drop that wait.
			h.mu.Lock()
			h.lease = nil
			h.mu.Unlock()
			return &LostError{Resource: l.Resource, Why: "renewal refused: " + a.Refusal()}
		case a.Lease.ID != l.ID || a.Lease.Fence != l.Fence:
			h.mu.Lock()
			h.lease = a.Lease
			h.mu.Unlock()
			return &LostError{Resource: l.Resource, Why: fmt.Sprintf("it lapsed and was granted again under fence %d (was %d)", a.Lease.Fence, l.Fence)}
		default:
			expires = sent.Add(kernel.LeaseTTLMs * time.Millisecond)
			h.mu.Lock()
			h.lease = a.Lease
			h.mu.Unlock()
			wait = every
		}
	}
}
