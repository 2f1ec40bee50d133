package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// stepClock is a fake clock shared by the Holder and the fake plane: Sleep
// records the duration and moves both clocks forward at once.
type stepClock struct {
	mu    sync.Mutex
	t     time.Time
	plane *fakePlane
	slept []time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	c.plane.mu.Lock()
	c.plane.nowMs += d.Milliseconds()
	c.plane.mu.Unlock()
}

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	c.advance(d)
	return nil
}

func (f *fakePlane) apply(t *testing.T, op kernel.Op, body string) []byte {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.ApplyJSON(op, f.nowMs, []byte(body)).Answer
}

func TestHolderWaitsAsAdvised(t *testing.T) {
	f, ts := newFakePlane(t, "k")
	clk := &stepClock{t: time.Unix(1000, 0), plane: f}
	f.apply(t, kernel.OpAcquire, `{"resource":"r","actorDid":"did:a:other"}`)
	var logs []string
	h := &Holder{
		Client: New(ts.URL, "k", nil),
		Req:    AcquireRequest{Resource: "r", ActorDid: "did:a:me"},
		Now:    clk.Now, Sleep: clk.Sleep,
		Logf: func(format string, args ...any) { logs = append(logs, format) },
	}
	// The other agent holds r for 30 s from now; the holder waits in 50 ms
	// steps (it is the only waiter) and gets it once that lease lapses.
	l, err := h.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "did:a:me" || l.Fence != 2 {
		t.Errorf("lease %+v, want did:a:me under fence 2", l)
	}
	if len(clk.slept) != 600 {
		t.Errorf("slept %d times, want 600 (30 s in 50 ms steps)", len(clk.slept))
	}
	for _, d := range clk.slept {
		if d != 50*time.Millisecond {
			t.Fatalf("slept %s, want the plane's waitMs 50ms", d)
		}
	}
	if len(logs) != 1 {
		t.Errorf("logged %d lines, want one per holder: %q", len(logs), logs)
	}
}

func TestHolderStops(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fakePlane, t *testing.T)
		timeout time.Duration
		check   func(t *testing.T, err error)
	}{
		{"deadlock", func(f *fakePlane, t *testing.T) {
			// other holds r and waits on mine, which me holds: asking r closes the loop.
			f.apply(t, kernel.OpAcquire, `{"resource":"r","actorDid":"did:a:other"}`)
			f.apply(t, kernel.OpAcquire, `{"resource":"mine","actorDid":"did:a:me"}`)
			f.apply(t, kernel.OpAcquire, `{"resource":"mine","actorDid":"did:a:other"}`)
		}, 0, func(t *testing.T, err error) {
			var re *RefusedError
			if !errors.As(err, &re) || re.Reason() != kernel.ReasonDeadlock || re.Answer.WaitingOn != "mine" {
				t.Fatalf("err %v, want a deadlock refusal waiting on mine", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "did:a:other holds r and waits on mine") {
				t.Errorf("message %q does not name holder and waitingOn", msg)
			}
		}},
		{"suspended", func(f *fakePlane, t *testing.T) {
			f.apply(t, kernel.OpSuspend, `{"actorDid":"did:a:me"}`)
		}, 0, func(t *testing.T, err error) {
			var re *RefusedError
			if !errors.As(err, &re) || re.Reason() != kernel.ReasonSuspended || !strings.HasPrefix(err.Error(), "suspended") {
				t.Fatalf("err %v, want suspended", err)
			}
		}},
		{"timeout", func(f *fakePlane, t *testing.T) {
			f.apply(t, kernel.OpAcquire, `{"resource":"r","actorDid":"did:a:other"}`)
		}, 2 * time.Second, func(t *testing.T, err error) {
			var te *TimeoutError
			if !errors.As(err, &te) || te.Holder != "did:a:other" || te.Waited != 2*time.Second {
				t.Fatalf("err %v, want a 2s timeout naming did:a:other", err)
			}
		}},
		{"invalid", func(f *fakePlane, t *testing.T) {}, 0, func(t *testing.T, err error) {
			var re *RefusedError
			if !errors.As(err, &re) || re.Reason() != kernel.ReasonInvalid || re.Answer.Status != 400 {
				t.Fatalf("err %v, want invalid_request", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, ts := newFakePlane(t, "k")
			clk := &stepClock{t: time.Unix(1000, 0), plane: f}
			tc.setup(f, t)
			req := AcquireRequest{Resource: "r", ActorDid: "did:a:me"}
			if tc.name == "invalid" {
				req.Mode = "scribble"
			}
			h := &Holder{Client: New(ts.URL, "k", nil), Req: req, Timeout: tc.timeout, Now: clk.Now, Sleep: clk.Sleep}
			ran := false
			err := h.Run(context.Background(), func(context.Context, *Lease) error { ran = true; return nil })
			if ran {
				t.Error("work ran without the lease")
			}
			tc.check(t, err)
			// Run dropped the wait: me is nobody's waiter.
			w := string(f.apply(t, kernel.OpWait, `{}`))
			if strings.Contains(w, `"waiters":[{"actorDid":"did:a:me"`) {
				t.Errorf("still a waiter after giving up: %s", w)
			}
		})
	}
}

// gateClock lets the test run each renewal: Sleep announces the duration
// on asked and returns when the test sends on wake (or ctx ends).
type gateClock struct {
	stepClock
	*servertest.Gate
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error { return c.Gate.Sleep(ctx, d) }

func TestHolderRenewsWhileWorking(t *testing.T) {
	f, ts := newFakePlane(t, "k")
	clk := &gateClock{stepClock: stepClock{t: time.Unix(1000, 0), plane: f}, Gate: servertest.NewGate()}
	h := &Holder{Client: New(ts.URL, "k", nil), Req: AcquireRequest{Resource: "r", ActorDid: "did:a:me"}, Now: clk.Now, Sleep: clk.Sleep}
	var got *Lease
	err := h.Run(context.Background(), func(ctx context.Context, l *Lease) error {
		got = l
		// Three renewal periods of 25 s each: 75 s, far past one lifetime.
		for i := range 3 {
			if d := <-clk.Asked; d != DefaultRenewEvery {
				t.Errorf("renewal %d slept %s, want %s", i, d, DefaultRenewEvery)
			}
			clk.advance(25 * time.Second)
			clk.Wake <- struct{}{}
		}
		<-clk.Asked // the third renewal is done once the next sleep begins
		w := string(f.apply(t, kernel.OpWait, `{}`))
		if !strings.Contains(w, `"holders":[{"id":"`+l.ID+`"`) {
			t.Errorf("lease not held after 75 s of renewals: %s", w)
		}
		if !strings.Contains(w, `"fence":1,"grantedAtMs":1000000,"expiresAtMs":1105000}`) {
			t.Errorf("lease not renewed to 30 s past the last renewal: %s", w)
		}
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if hl := h.Lease(); hl.ID != got.ID || hl.ExpiresAtMs != got.ExpiresAtMs+75000 {
		t.Errorf("newest lease %+v, want %s renewed to %d", hl, got.ID, got.ExpiresAtMs+75000)
	}
	w := string(f.apply(t, kernel.OpWait, `{}`))
	if strings.Contains(w, `"holders":[{`) {
		t.Errorf("lease not released after work: %s", w)
	}
}

func TestHolderLosesLease(t *testing.T) {
	tests := []struct {
		name    string
		between func(f *fakePlane, t *testing.T)
		want    string
	}{
		{"taken by another", func(f *fakePlane, t *testing.T) {
			f.apply(t, kernel.OpAcquire, `{"resource":"r","actorDid":"did:a:other"}`)
		}, "renewal refused: lease_held"},
		{"regranted", func(f *fakePlane, t *testing.T) {}, "granted again under fence 2 (was 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, ts := newFakePlane(t, "k")
			clk := &gateClock{stepClock: stepClock{t: time.Unix(1000, 0), plane: f}, Gate: servertest.NewGate()}
			h := &Holder{Client: New(ts.URL, "k", nil), Req: AcquireRequest{Resource: "r", ActorDid: "did:a:me"}, Now: clk.Now, Sleep: clk.Sleep}
			var cause error
			err := h.Run(context.Background(), func(ctx context.Context, l *Lease) error {
				<-clk.Asked
				clk.advance(31 * time.Second) // the lease lapses
				tc.between(f, t)
				clk.Wake <- struct{}{}
				<-ctx.Done()
				cause = context.Cause(ctx)
				return nil
			})
			var lost *LostError
			if !errors.As(err, &lost) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a LostError with %q", err, tc.want)
			}
			if !errors.As(cause, &lost) {
				t.Errorf("work's context cause %v, want the LostError", cause)
			}
			// Nothing of me is left held.
			if w := string(f.apply(t, kernel.OpWait, `{}`)); strings.Contains(w, `"holder":"did:a:me"`) || strings.Contains(w, `"actorDid":"did:a:me"`) {
				t.Errorf("me still holds or waits on r: %s", w)
			}
		})
	}
}
