package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// The keys of the data folders in testdata/upgrade-0.1.0 (test data only).
const (
	upgradeWorkspaceKey = "lp_a86ef08704db_pZ7SAVmeFubkCOMHvooqg1Dm495IZeU1skivUV7Waa4"
	upgradeAt           = 1796054451000 // just after the last command of the clean folder
)

// startOn copies a data folder of testdata/upgrade-0.1.0 and starts the
// current server on the copy, its clock stopped at at.
func startOn(t *testing.T, folder string, at int64) *Server {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"leaseplane.db", "events.db"} {
		b, err := os.ReadFile(filepath.Join("testdata", "upgrade-0.1.0", folder, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return startStopped(t, dir, at, "the 0.1.0 folder "+folder)
}

// startStopped starts the current server on the data folder dir, its
// clock stopped at at; what names the folder in a failure.
func startStopped(t *testing.T, dir string, at int64, what string) *Server {
	t.Helper()
	now := time.UnixMilli(at)
	s, err := New(Config{
		DataDir:   dir,
		Engine:    kernel.Native,
		Clock:     func() time.Time { return now },
		AfterFunc: func(time.Duration, func()) func() bool { return func() bool { return true } },
	})
	if err != nil {
		t.Fatalf("start on %s: %v", what, err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s
}

type upgradeQueues struct {
	Queues []struct {
		Resource string
		Holders  []struct {
			ID, Holder, Mode string
			Fence            int64
		}
		Waiters []struct{ ActorDid string }
	}
}

// TestUpgradeFromRelease010 starts the current server on a data folder
// that leaseplane 0.1.0 wrote and stopped cleanly (its snapshot, version 1,
// covers the whole log): every lease is still held with its id and fence,
// the waiter still waits, the suspended agent is still suspended, trust is
// kept, and new grants take fences above every fence 0.1.0 gave (it kept
// one counter per resource; the workspace's one counter starts above them
// all).
func TestUpgradeFromRelease010(t *testing.T) {
	checkUpgraded(t, startOn(t, "clean", upgradeAt))
}

// TestUpgradeFromRelease010Crash starts the current server on a folder that
// 0.1.0 left by a crash, with no snapshot: its log, written before the log
// recorded semantics, is replayed under semantics 1, as 0.1.0 decided it,
// so the state is the same as after a clean stop: the same lease ids and
// fences. Commands logged from then on record semantics 2 and the rules.
func TestUpgradeFromRelease010Crash(t *testing.T) {
	s := startOn(t, "crash", 1796054453000)
	checkUpgraded(t, s)
	_, _, recs, err := s.Store().Load(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var sems []int
	for _, r := range recs {
		sems = append(sems, r.Semantics)
	}
	n := len(recs)
	if n < 13 || sems[0] != 1 || sems[10] != 1 || sems[n-1] != kernel.Semantics {
		t.Fatalf("semantics of the logged commands: %v", sems)
	}
	if recs[10].Rules != nil || string(recs[11].Rules) != `{"readShared":["file:"],"limits":{"leases":100000,"waiters":100000,"agents":1000000,"asks":1000,"asksPerAgent":16}}` || recs[12].Rules != nil {
		t.Errorf("rules logged: 0.1's %q, the first new command's %q, the next %q", recs[10].Rules, recs[11].Rules, recs[12].Rules)
	}
}

func checkUpgraded(t *testing.T, s *Server) {
	t.Helper()
	ctx := context.Background()
	st, b, err := s.Call(ctx, upgradeWorkspaceKey, kernel.OpWait, nil)
	if err != nil || st != 200 {
		t.Fatalf("wait: %d %s %v", st, b, err)
	}
	var w upgradeQueues
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, q := range w.Queues {
		var parts []string
		for _, h := range q.Holders {
			parts = append(parts, h.Holder+" "+h.Mode+" "+h.ID)
		}
		for _, wt := range q.Waiters {
			parts = append(parts, "waiting "+wt.ActorDid)
		}
		got[q.Resource] = strings.Join(parts, "; ")
	}
	const a = "did:web:acme.example:agent:"
	want := map[string]string{
		// The ids 0.1.0 answered (server/testdata/upgrade-0.1.0/make.sh).
		"lock:deploy/production": a + "release write lease_33b2fe543d3785fd; waiting " + a + "cost",
		"file:q3.csv":            a + "release read lease_87904872997c5e4a",
		"lock:a":                 a + "export write lease_6ce8b3a1a64aea91",
	}
	if len(got) != len(want) {
		t.Errorf("queues after the upgrade: %s", b)
	}
	for res, wq := range want {
		if got[res] != wq {
			t.Errorf("%s after the upgrade: %q, want %q", res, got[res], wq)
		}
	}
	// A holder releases with the leaseId 0.1.0 gave it.
	st, b, _ = s.Call(ctx, upgradeWorkspaceKey, kernel.OpRelease,
		[]byte(`{"resource":"lock:a","actorDid":"`+a+`export","leaseId":"lease_6ce8b3a1a64aea91"}`))
	if st != 200 || !strings.Contains(string(b), `"released":true`) {
		t.Errorf("release with the 0.1.0 lease id: %d %s", st, b)
	}
	// New grants rise above every fence 0.1.0 answered (2 on lock:a and on file:q3.csv).
	st, b, _ = s.Call(ctx, upgradeWorkspaceKey, kernel.OpAcquire, []byte(`{"resource":"lock:a","actorDid":"`+a+`cost"}`))
	var g struct{ Lease struct{ Fence int64 } }
	json.Unmarshal(b, &g)
	if st != 200 || g.Lease.Fence != 3 {
		t.Errorf("grant after the upgrade: %d %s; want fence 3", st, b)
	}
	if st, b, _ := s.Call(ctx, upgradeWorkspaceKey, kernel.OpAcquire, []byte(`{"resource":"lock:b","actorDid":"`+a+`rogue"}`)); st != 403 {
		t.Errorf("the agent 0.1.0 suspended: %d %s", st, b)
	}
}
