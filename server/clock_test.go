package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/servertest"
)

type leaseAnswer struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
	Holder string `json:"holder"`
	Lease  struct {
		Holder      string `json:"holder"`
		GrantedAtMs int64  `json:"grantedAtMs"`
		ExpiresAtMs int64  `json:"expiresAtMs"`
	} `json:"lease"`
}

func acquireAs(t *testing.T, s *Server, key, resource, actor string) (int, leaseAnswer) {
	t.Helper()
	st, b, err := s.Call(context.Background(), key, kernel.OpAcquire, []byte(`{"resource":"`+resource+`","actorDid":"`+actor+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var a leaseAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	return st, a
}

// TestWallClockStepsMoveNoLease steps the wall clock an hour forward and
// two hours back under a live lease: the plane's time follows only the
// time that passed, so the lease neither lapses early nor lives longer,
// and a restart with the wall clock still behind starts no lower than the
// last stamp on disk.
func TestWallClockStepsMoveNoLease(t *testing.T) {
	dir := t.TempDir()
	clock := servertest.NewClock()
	cfg := Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, Monotonic: clock.Monotonic, AfterFunc: clock.AfterFunc}
	s := mustNew(t, cfg)
	key := mustBootstrap(t, s, "default")
	const a, b = "did:example:a", "did:example:b"
	st, got := acquireAs(t, s, key, "r", a)
	if st != 200 {
		t.Fatalf("first grant: %d %+v", st, got)
	}
	t0 := got.Lease.GrantedAtMs
	if t0 != servertest.Start.UnixMilli() {
		t.Fatalf("granted at %d, want the wall clock at start %d", t0, servertest.Start.UnixMilli())
	}

	clock.StepWall(time.Hour) // the wall clock jumps an hour ahead
	if st, got := acquireAs(t, s, key, "r", b); st != 409 || got.Holder != a {
		t.Fatalf("after a +1 h step of the wall clock, b was answered %d %+v; want 409 lease_held by a", st, got)
	}

	clock.Advance(20 * time.Second)
	clock.StepWall(-2 * time.Hour) // and an hour behind
	st, got = acquireAs(t, s, key, "r", a)
	if st != 200 || got.Lease.ExpiresAtMs != t0+20_000+kernel.LeaseTTLMs {
		t.Fatalf("renewal 20 s later with the wall clock 1 h behind: %d expires %d, want 200 expiring at %d",
			st, got.Lease.ExpiresAtMs, t0+20_000+kernel.LeaseTTLMs)
	}
	clock.Advance(29 * time.Second)
	if st, got := acquireAs(t, s, key, "r", b); st != 409 {
		t.Fatalf("29 s after the renewal, b was answered %d %+v; want 409", st, got)
	}
	clock.Advance(time.Second) // 30 s after the renewal: the alarm lapses it
	st, got = acquireAs(t, s, key, "r", b)
	if st != 200 || got.Lease.GrantedAtMs != t0+50_000 {
		t.Fatalf("30 s after the renewal, b was answered %d %+v; want a grant at %d", st, got, t0+50_000)
	}
	last := got.Lease.GrantedAtMs
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A restart while the wall clock is still an hour behind the plane.
	s2 := mustNew(t, cfg)
	defer s2.Shutdown(context.Background())
	if st, got := acquireAs(t, s2, key, "q", a); st != 200 || got.Lease.GrantedAtMs < last {
		t.Fatalf("after a restart with the wall clock 1 h behind: %d granted at %d, below the last stamp %d", st, got.Lease.GrantedAtMs, last)
	}
}
