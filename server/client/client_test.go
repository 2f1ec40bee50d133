package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// fakePlane is an httptest stand-in for the server: the real native kernel
// behind the three routes, one key, a clock the test moves.
type fakePlane struct {
	mu     sync.Mutex
	m      *kernel.Machine
	nowMs  int64
	key    string
	seen   []string // "METHOD PATH" of each request
	bodies []string
}

func newFakePlane(t *testing.T, key string) (*fakePlane, *httptest.Server) {
	t.Helper()
	f := &fakePlane{m: kernel.New(kernel.Rules{}), nowMs: 1_000_000, key: key}
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	return f, ts
}

func (f *fakePlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	f.seen = append(f.seen, r.Method+" "+r.URL.Path)
	f.bodies = append(f.bodies, string(body))
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"ok":false,"reason":"unauthorized","error":"no or bad Bearer key"}`)
		return
	}
	var op kernel.Op
	switch r.Method + " " + r.URL.Path {
	case "POST " + PathLease:
		op = kernel.OpAcquire
	case "POST " + PathRelease:
		op = kernel.OpRelease
	case "GET " + PathWait:
		op, body = kernel.OpWait, []byte("{}")
	default:
		http.NotFound(w, r)
		return
	}
	res := f.m.ApplyJSON(op, f.nowMs, body)
	if res.RetryAfterSec > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(res.RetryAfterSec))
	}
	w.WriteHeader(res.Status)
	w.Write(res.Answer)
}

func TestCallRoutes(t *testing.T) {
	f, ts := newFakePlane(t, "k1")
	c := New(ts.URL+"/", "k1", nil)
	ctx := context.Background()
	tests := []struct {
		op         kernel.Op
		body       string
		wantStatus int
		wantRoute  string
		wantPrefix string
	}{
		{kernel.OpAcquire, `{"resource":"r","actorDid":"did:a:1"}`, 200, "POST " + PathLease, `{"ok":true,"lease":{`},
		{kernel.OpAcquire, `{"resource":"r","actorDid":"did:a:2"}`, 409, "POST " + PathLease, `{"ok":false,"reason":"lease_held"`},
		{kernel.OpAcquire, `{"resource":"","actorDid":"did:a:2"}`, 400, "POST " + PathLease, `{"ok":false,"reason":"invalid_request"`},
		{kernel.OpRelease, `{"resource":"r","actorDid":"did:a:1","leaseId":"nope"}`, 409, "POST " + PathRelease, `{"ok":false,"reason":"stale_lease"`},
		{kernel.OpRelease, `{"resource":"r","actorDid":"did:a:1"}`, 200, "POST " + PathRelease, `{"ok":true,"released":true`},
		{kernel.OpWait, `ignored`, 200, "GET " + PathWait, `{"ok":true,"nowMs":`},
	}
	for i, tc := range tests {
		status, ans, err := c.Call(ctx, tc.op, []byte(tc.body))
		if err != nil {
			t.Fatalf("%d %s: err %v", i, tc.op, err)
		}
		if status != tc.wantStatus || !strings.HasPrefix(string(ans), tc.wantPrefix) {
			t.Errorf("%d %s: got %d %s, want %d %s...", i, tc.op, status, ans, tc.wantStatus, tc.wantPrefix)
		}
		if got := f.seen[len(f.seen)-1]; got != tc.wantRoute {
			t.Errorf("%d %s: route %q, want %q", i, tc.op, got, tc.wantRoute)
		}
	}
	if f.bodies[len(f.bodies)-1] != "" {
		t.Errorf("wait sent a body %q", f.bodies[len(f.bodies)-1])
	}
}

func TestCallErrors(t *testing.T) {
	_, ts := newFakePlane(t, "k1")
	ctx := context.Background()

	// A bad key is an answer, not an error.
	status, ans, err := New(ts.URL, "wrong", nil).Call(ctx, kernel.OpWait, nil)
	if err != nil || status != 401 || !strings.Contains(string(ans), `"unauthorized"`) {
		t.Errorf("bad key: %d %s %v", status, ans, err)
	}
	// An op without a route is an error naming it.
	if _, _, err := New(ts.URL, "k1", nil).Call(ctx, kernel.OpTick, nil); err == nil || !strings.Contains(err.Error(), `"tick"`) {
		t.Errorf("tick: err %v, want one naming tick", err)
	}
	// A closed port is a transport error.
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	if _, _, err := New(url, "k1", nil).Call(ctx, kernel.OpWait, nil); err == nil {
		t.Error("closed port: no error")
	}
	// A cancelled context is a transport error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := New(ts.URL, "k1", nil).Call(cctx, kernel.OpWait, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v", err)
	}
}

func TestTypedHelpers(t *testing.T) {
	f, ts := newFakePlane(t, "k1")
	c := New(ts.URL, "k1", &http.Client{Timeout: 5 * time.Second})
	ctx := context.Background()

	a, err := c.Acquire(ctx, AcquireRequest{Resource: "r1", ActorDid: "did:a:1", Mode: "read"})
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK || a.Status != 200 || a.Lease == nil || a.Lease.Fence != 1 || a.Lease.Mode != "read" ||
		a.Lease.Holder != "did:a:1" || a.Lease.ExpiresAtMs != f.nowMs+kernel.LeaseTTLMs || a.Lease.ID == "" {
		t.Fatalf("grant: %+v lease %+v", a, a.Lease)
	}
	if !strings.Contains(f.bodies[0], `"mode":"read"`) {
		t.Errorf("mode not sent: %s", f.bodies[0])
	}
	first := a.Lease.ID

	if _, err := c.Acquire(ctx, AcquireRequest{Resource: "r2", ActorDid: "did:a:2"}); err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(ctx, AcquireRequest{Resource: "r1", ActorDid: "did:a:2"})
	if err != nil {
		t.Fatal(err)
	}
	if held.OK || held.Reason != kernel.ReasonLeaseHeld || held.Status != 409 || held.Holder != "did:a:1" ||
		held.Stampede == nil || held.Stampede.WaitMs != 50 || len(held.Stampede.Admitted) != 1 || held.RetryAfter <= 0 {
		t.Fatalf("lease_held: %+v", held)
	}
	if r := held.Refusal(); !strings.HasPrefix(r, "lease_held (HTTP 409): ") {
		t.Errorf("Refusal() = %q", r)
	}
	dl, err := c.Acquire(ctx, AcquireRequest{Resource: "r2", ActorDid: "did:a:1"})
	if err != nil {
		t.Fatal(err)
	}
	if dl.OK || dl.Reason != kernel.ReasonDeadlock || dl.Holder != "did:a:2" || dl.WaitingOn != "r1" || len(dl.Cycle) != 4 {
		t.Fatalf("deadlock: %+v", dl)
	}

	w, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !w.OK || w.NowMs != f.nowMs || len(w.Queues) != 2 || len(w.Deadlocks) != 1 || w.Deadlocks[0].WaitingOn != "r1" {
		t.Fatalf("wait: %+v", w)
	}
	if q := w.Queues[0]; q.Resource != "r1" || len(q.Holders) != 1 || len(q.Waiters) != 1 || q.Waiters[0].ActorDid != "did:a:2" || !q.Waiters[0].Admitted {
		t.Errorf("queue r1: %+v", q)
	}

	stale, err := c.Release(ctx, ReleaseRequest{Resource: "r1", ActorDid: "did:a:1", LeaseID: "lease_x"})
	if err != nil {
		t.Fatal(err)
	}
	if stale.OK || stale.Reason != kernel.ReasonStaleLease || stale.LeaseID != "lease_x" {
		t.Errorf("stale: %+v", stale)
	}
	rel, err := c.Release(ctx, ReleaseRequest{Resource: "r1", ActorDid: "did:a:1", LeaseID: first})
	if err != nil {
		t.Fatal(err)
	}
	if !rel.OK || !rel.Released || len(rel.ReleasedIDs) != 1 || rel.ReleasedIDs[0] != first {
		t.Errorf("release: %+v", rel)
	}
	if rel.Refusal() != "" {
		t.Errorf("Refusal of a grant = %q", rel.Refusal())
	}
}

func TestNotJSONAnswer(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html>bad gateway</html>")
	}))
	defer ts.Close()
	c := New(ts.URL, "", nil)
	_, err := c.Acquire(context.Background(), AcquireRequest{Resource: "r", ActorDid: "did:a:1"})
	if !errors.Is(err, ErrNotJSON) || !strings.Contains(err.Error(), "502") {
		t.Errorf("err %v, want ErrNotJSON naming 502", err)
	}
	// Call still gives the raw answer.
	status, ans, err := c.Call(context.Background(), kernel.OpWait, nil)
	if err != nil || status != 502 || string(ans) != "<html>bad gateway</html>" {
		t.Errorf("Call: %d %q %v", status, ans, err)
	}
}

func TestNoKeyNoHeader(t *testing.T) {
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		io.WriteString(w, `{"ok":true}`)
	}))
	defer ts.Close()
	New(ts.URL, "", nil).Call(context.Background(), kernel.OpWait, nil)
	New(ts.URL, "abc", nil).Call(context.Background(), kernel.OpWait, nil)
	if len(got) != 2 || got[0] != "" || got[1] != "Bearer abc" {
		t.Errorf("Authorization headers %q", got)
	}
}
