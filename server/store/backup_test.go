package store

import (
	"testing"
	"time"
)

// TestLogTrimHold: while a backup holds trimming, a snapshot trims
// nothing; once the hold is released, or has lapsed, it trims again.
func TestLogTrimHold(t *testing.T) {
	s := open(t, t.TempDir(), Options{LogKeep: 10})
	commit := func(from, to int64) {
		// A commit a command, so that the log trims to the command (a
		// group's run goes whole: TestLogTrimKeepsRunsWhole).
		for i := from; i <= to; i++ {
			r := Record{Workspace: 1, Seq: i, NowMs: i, Op: "acquire", Body: []byte("{}"), Status: 200}
			if i == to {
				r.Snapshot = []byte("{}")
			}
			if err := s.Commit([]Record{r}); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := func() int64 {
		t.Helper()
		var n int64
		if err := s.db.QueryRow(`SELECT min(seq) FROM log_runs WHERE workspace_id = 1`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	release, err := s.HoldLogTrim(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	release2, err := s.HoldLogTrim(time.Hour) // a second backup at once
	if err != nil {
		t.Fatal(err)
	}
	if held, err := s.LogTrimHeld(); err != nil || !held {
		t.Fatalf("held %v %v", held, err)
	}
	commit(1, 100)
	if f := first(); f != 1 {
		t.Fatalf("the log starts at %d while a backup holds trimming", f)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	commit(101, 150)
	if f := first(); f != 1 {
		t.Fatalf("the log starts at %d while the second backup still holds trimming", f)
	}
	if err := release2(); err != nil {
		t.Fatal(err)
	}
	commit(151, 200)
	if f := first(); f != 191 {
		t.Fatalf("after both releases the log starts at %d, want 191 (10 kept behind the snapshot at 200)", f)
	}
	if _, err := s.HoldLogTrim(-time.Second); err != nil { // a hold that has lapsed
		t.Fatal(err)
	}
	if held, _ := s.LogTrimHeld(); held {
		t.Fatal("a lapsed hold still holds")
	}
	commit(201, 300)
	if f := first(); f != 291 {
		t.Fatalf("with a lapsed hold the log starts at %d, want 291", f)
	}
}

// TestFenceRaiseAccumulates: a folder restored from a backup of a
// restored folder raises by both raises and to the higher floor, again for
// every workspace.
func TestFenceRaiseAccumulates(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx := t.Context()
	if _, ok, err := s.PendingFenceRaise(ctx, 1); err != nil || ok {
		t.Fatalf("a folder never restored has a pending raise: %v %v", ok, err)
	}
	if _, err := s.SetFenceRaise(FenceRaise{Raise: 100, Floor: 5000}); err != nil {
		t.Fatal(err)
	}
	if err := s.FenceRaised(1, 3, 5000, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.PendingFenceRaise(ctx, 1); ok {
		t.Fatal("a workspace raised once is raised again")
	}
	if r, ok, _ := s.PendingFenceRaise(ctx, 2); !ok || r != (FenceRaise{100, 5000}) {
		t.Fatalf("workspace 2, not loaded yet: %+v %v", r, ok)
	}
	if r, err := s.SetFenceRaise(FenceRaise{Raise: 40, Floor: 10}); err != nil || r != (FenceRaise{140, 5000}) {
		t.Fatalf("the second raise recorded %+v %v, want 140 and floor 5000", r, err)
	}
	for ws := int64(1); ws <= 2; ws++ {
		if r, ok, _ := s.PendingFenceRaise(ctx, ws); !ok || r != (FenceRaise{140, 5000}) {
			t.Errorf("workspace %d after the second restore: %+v %v, want raise 140 and floor 5000", ws, r, ok)
		}
	}
	if _, err := s.SetFenceRaise(FenceRaise{Raise: -1}); err == nil {
		t.Error("a negative raise was recorded")
	}
}
