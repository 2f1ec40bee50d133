package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/servertest"
)

type heldResult struct {
	status int
	body   []byte
}

// holdLease sends a held acquire in the background.
func (ts *testServer) holdLease(resource, actor, waitUpToMs string) <-chan heldResult {
	out := make(chan heldResult, 1)
	go func() {
		st, _, b := ts.do("POST", RouteLease+"?waitUpToMs="+waitUpToMs, ts.key, `{"resource":"`+resource+`","actorDid":"`+actor+`"}`)
		out <- heldResult{st, b}
	}()
	return out
}

// untilWaiter returns once actor shows as a waiter in the queues, that is
// once its held request has been refused and is being held.
func (ts *testServer) untilWaiter(actor string) {
	ts.t.Helper()
	for i := 0; !strings.Contains(string(ts.wait()), `"actorDid":"`+actor+`"`); i++ {
		if i > 10000 {
			ts.t.Fatalf("%s never became a waiter: %s", actor, ts.wait())
		}
		time.Sleep(time.Millisecond)
	}
}

// heldBehindHolder grants lock:a to did:example:holder, then holds
// did:example:waiter's request for it (waitUpToMs) until it waits.
func (ts *testServer) heldBehindHolder(waitUpToMs string) <-chan heldResult {
	ts.t.Helper()
	if st, b := ts.lease("lock:a", "did:example:holder"); st != 200 {
		ts.t.Fatalf("setup: %d %s", st, b)
	}
	res := ts.holdLease("lock:a", "did:example:waiter", waitUpToMs)
	ts.untilWaiter("did:example:waiter")
	return res
}

// A held request is answered the grant as soon as the holder releases,
// with no time passing on the server's clock.
func TestHeldRequestGrantedOnRelease(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	res := ts.heldBehindHolder("10000")
	select {
	case r := <-res:
		t.Fatalf("the held request was answered before the release: %d %s", r.status, r.body)
	default:
	}
	st, _, b := ts.do("POST", RouteRelease, ts.key, `{"resource":"lock:a","actorDid":"did:example:holder"}`)
	if st != 200 {
		t.Fatalf("release: %d %s", st, b)
	}
	r := <-res
	if r.status != 200 || field(t, r.body, "lease").(map[string]any)["holder"] != "did:example:waiter" {
		t.Fatalf("held request after the release: %d %s; want the grant", r.status, r.body)
	}
}

// Held requests are granted in queue order: after each release the
// waiter that has waited longest gets the lease, never one that happened
// to ask first. Ten waiters: the last two move up into the admitted eight
// as those ahead of them are granted.
func TestHeldRequestsGrantedInQueueOrder(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	holder := "did:example:holder"
	if st, b := ts.lease("lock:q", holder); st != 200 {
		t.Fatalf("setup: %d %s", st, b)
	}
	type granted struct {
		i int
		r heldResult
	}
	out := make(chan granted, 10)
	for i := range 10 {
		actor := fmt.Sprintf("did:example:waiter-%d", i)
		res := ts.holdLease("lock:q", actor, "30000")
		ts.untilWaiter(actor)
		go func() { out <- granted{i, <-res} }()
	}
	for i := range 10 {
		st, _, b := ts.do("POST", RouteRelease, ts.key, `{"resource":"lock:q","actorDid":"`+holder+`"}`)
		if st != 200 {
			t.Fatalf("release by %s: %d %s", holder, st, b)
		}
		g := <-out
		holder = fmt.Sprintf("did:example:waiter-%d", g.i)
		if g.r.status != 200 || g.i != i {
			t.Fatalf("after release %d: waiter %d answered %d %s; want waiter %d granted", i, g.i, g.r.status, g.r.body, i)
		}
	}
}

// A held request wakes when its own resource may have freed (a release
// there), not at a release of another resource; of the writers held on
// the resource the one nearest the head wakes alone, readers all wake;
// an alarm tick wakes everyone.
func TestHeldRequestWakesForItsResource(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	ctx := context.Background()
	const holder = "did:example:holder"
	for _, r := range []string{"lock:a", "lock:b"} {
		if st, b := ts.lease(r, holder); st != 200 {
			t.Fatalf("setup %s: %d %s", r, st, b)
		}
	}
	k, _, ok := ts.s.authenticate(ctx, ts.key)
	if !ok {
		t.Fatal("the test key does not authenticate")
	}
	ws, err := ts.s.workspace(k.WorkspaceID)
	if err != nil {
		t.Fatal(err)
	}
	var changed <-chan struct{}
	hold := func(actor, mode string) *heldAsk {
		t.Helper()
		h := &heldAsk{resource: "lock:a", actor: actor, place: notAdmitted, reader: mode == "read"}
		ws.mu.Lock()
		ws.holding++
		ws.addHeldLocked(h) // as callHeld does
		ws.mu.Unlock()
		body := `{"resource":"lock:a","actorDid":"` + actor + `"`
		if mode != "" {
			body += `,"mode":"` + mode + `"`
		}
		var r reply
		r, changed = ts.s.decide(ctx, k, kernel.OpAcquire, []byte(body+"}"), h)
		if r.status != 409 || !h.held || !h.waiting {
			t.Fatalf("%s's acquire: %d %s; want lease_held, held", actor, r.status, r.answer)
		}
		return h
	}
	first, second, reader := hold("did:example:w1", ""), hold("did:example:w2", "write"), hold("did:example:r", "read")
	release := func(res string) {
		t.Helper()
		if st, _, b := ts.do("POST", RouteRelease, ts.key, `{"resource":"`+res+`","actorDid":"`+holder+`"}`); st != 200 {
			t.Fatalf("release %s: %d %s", res, st, b)
		}
	}
	release("lock:b")
	if isClosed(changed) || isClosed(first.wake) || isClosed(second.wake) || isClosed(reader.wake) {
		t.Fatal("a release of lock:b woke a request held on lock:a")
	}
	release("lock:a")
	if !isClosed(first.wake) || !isClosed(reader.wake) {
		t.Fatalf("a release of lock:a woke the first writer %v and the reader %v; want both", isClosed(first.wake), isClosed(reader.wake))
	}
	if isClosed(second.wake) || isClosed(changed) {
		t.Fatalf("a release of lock:a woke the second writer %v, everyone %v; want neither", isClosed(second.wake), isClosed(changed))
	}
	// The first writer could not use the wake: it passes it to the next.
	ws.mu.Lock()
	ws.wakeWriterLocked("lock:a")
	ws.mu.Unlock()
	if !isClosed(second.wake) {
		t.Fatal("the wake passed on did not reach the second writer")
	}
	// A claim ends (no event; the grace is 2000 ms): the alarm's tick
	// wakes everyone.
	ts.clock.Advance(3 * time.Second)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the alarm tick at the claim's end did not wake the held requests")
	}
}

// A lease that lapses (an alarm tick) wakes the held request.
func TestHeldRequestGrantedOnLapse(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	if st, b := ts.lease("lock:a", "did:example:holder"); st != 200 {
		t.Fatalf("setup: %d %s", st, b)
	}
	ts.clock.Advance(20 * time.Second)
	res := ts.holdLease("lock:a", "did:example:waiter", "30000")
	ts.untilWaiter("did:example:waiter")
	ts.clock.Advance(10 * time.Second) // the holder's lease lapses
	r := <-res
	if r.status != 200 || field(t, r.body, "lease").(map[string]any)["holder"] != "did:example:waiter" {
		t.Fatalf("held request after the lapse: %d %s; want the grant", r.status, r.body)
	}
}

// When the time is up the last lease_held is answered; a deadlock is
// answered at once; shutting down answers what is held 503.
func TestHeldRequestEnds(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	for _, l := range [][2]string{{"lock:a", "did:example:a"}, {"lock:b", "did:example:b"}} {
		if st, b := ts.lease(l[0], l[1]); st != 200 {
			t.Fatalf("setup: %d %s", st, b)
		}
	}
	res := ts.holdLease("lock:a", "did:example:c", "5000")
	ts.untilWaiter("did:example:c")
	ts.clock.Advance(5 * time.Second)
	if r := <-res; r.status != 409 || field(t, r.body, "reason") != kernel.ReasonLeaseHeld {
		t.Fatalf("held request at its deadline: %d %s; want 409 lease_held", r.status, r.body)
	}

	// b waits on a; a asking for b (held) would close the cycle.
	if st, b := ts.lease("lock:a", "did:example:b"); st != 409 {
		t.Fatalf("b waits on a: %d %s", st, b)
	}
	if r := <-ts.holdLease("lock:b", "did:example:a", "30000"); r.status != 409 || field(t, r.body, "reason") != kernel.ReasonDeadlock {
		t.Fatalf("held request closing a cycle: %d %s; want 409 deadlock at once", r.status, r.body)
	}

	res = ts.holdLease("lock:b", "did:example:d", "30000")
	ts.untilWaiter("did:example:d")
	if err := ts.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.status != 503 || field(t, r.body, "reason") != ReasonUnavailable {
		t.Fatalf("held request at shutdown: %d %s; want 503 unavailable", r.status, r.body)
	}
}

func TestHeldRequestBadWait(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	st, _, b := ts.do("POST", RouteLease+"?waitUpToMs=30001", ts.key, `{"resource":"lock:a","actorDid":"did:example:a"}`)
	if st != 400 || field(t, b, "reason") != kernel.ReasonInvalid || !strings.Contains(string(b), "waitUpToMs") {
		t.Fatalf("waitUpToMs=30001: %d %s; want 400 invalid_request naming waitUpToMs", st, b)
	}
}

// The caller's own release of the resource ends its hold, and the
// abandoned request does not make it a waiter again.
func TestHeldRequestEndsOnOwnRelease(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	res := ts.heldBehindHolder("30000")
	if st, _, b := ts.do("POST", RouteRelease, ts.key, `{"resource":"lock:a","actorDid":"did:example:waiter"}`); st != 200 {
		t.Fatalf("the waiter's release: %d %s", st, b)
	}
	if r := <-res; r.status != 409 || field(t, r.body, "reason") != kernel.ReasonLeaseHeld {
		t.Fatalf("held request after its own release: %d %s; want its last lease_held", r.status, r.body)
	}
	if w := ts.wait(); strings.Contains(string(w), `"actorDid":"did:example:waiter"`) {
		t.Errorf("the waiter waits again after giving up: %s", w)
	}
}

// BenchmarkHeldGrantAfterRelease measures, over real HTTP on loopback with
// the real clock, the time from sending the holder's release to receiving
// the grant of a request held on the same resource (waitUpToMs=30000): the
// latency a waiting agent sees, docs/BENCHMARKS.md "Waiting".
func BenchmarkHeldGrantAfterRelease(b *testing.B) {
	s, key := benchServer(b, Config{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", hs.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, raw := servertest.Send(b, req)
		return resp.StatusCode, string(raw)
	}
	waiting := func(actor string) bool {
		req, _ := http.NewRequest("GET", hs.URL+RouteWait, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		_, raw := servertest.Send(b, req)
		return strings.Contains(string(raw), `"actorDid":"`+actor+`"`)
	}
	holder, waiter := "did:example:holder", "did:example:waiter"
	var total time.Duration
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		if st, body := post(RouteLease, `{"resource":"lock:bench","actorDid":"`+holder+`"}`); st != 200 {
			b.Fatalf("holder: %d %s", st, body)
		}
		got := make(chan time.Time, 1)
		go func() {
			st, body := post(RouteLease+"?waitUpToMs=30000", `{"resource":"lock:bench","actorDid":"`+waiter+`"}`)
			if st != 200 {
				b.Errorf("held request: %d %s", st, body)
			}
			got <- time.Now()
		}()
		for !waiting(waiter) {
			time.Sleep(100 * time.Microsecond)
		}
		sent := time.Now()
		post(RouteRelease, `{"resource":"lock:bench","actorDid":"`+holder+`"}`)
		total += (<-got).Sub(sent)
		post(RouteRelease, `{"resource":"lock:bench","actorDid":"`+waiter+`"}`)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-release-to-grant")
}
