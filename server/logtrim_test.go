package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// TestLogTrimmedBehindSnapshotAndLedger: the command log is trimmed only
// behind both the latest snapshot (keeping LogKeep commands before it) and
// the ledger's position. While the ledger cannot write, nothing is
// trimmed whatever the snapshots; once it has caught up, the log shrinks;
// a restart after the trim gives back the same state, and the ledger holds
// every event (none was trimmed away before it was appended).
func TestLogTrimmedBehindSnapshotAndLedger(t *testing.T) {
	const snapEvery, keep = 50, 20
	dir := t.TempDir()
	clock := servertest.NewClock()
	var ledgerDown atomic.Bool
	start := func() *Server {
		s := mustNew(t, Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc,
			SnapshotEvery: snapEvery, LogKeep: keep,
			faults: faults{ledger: func() error {
				if ledgerDown.Load() {
					return errors.New("test: the ledger's disk is failing")
				}
				return nil
			}}})
		return s
	}
	s := start()
	key := mustBootstrap(t, s, "default")
	ctx := context.Background()
	pairs := 0
	run := func(n int) {
		t.Helper()
		for range n {
			body := []byte(fmt.Sprintf(`{"resource":"lock:%d","actorDid":"did:example:a"}`, pairs))
			if st, b, _ := s.Call(ctx, key, kernel.OpAcquire, body); st != 200 {
				t.Fatalf("acquire: %d %s", st, b)
			}
			if st, b, _ := s.Call(ctx, key, kernel.OpRelease, body); st != 200 {
				t.Fatalf("release: %d %s", st, b)
			}
			pairs++
			clock.Advance(time.Millisecond)
		}
	}
	// logSpan is the first and last seq the log keeps, and how many rows.
	logSpan := func() (first, last int64, n int) {
		t.Helper()
		rows, err := s.store.LogEvents(ctx, 1, 0, 1<<20)
		if err != nil || len(rows) == 0 {
			t.Fatalf("log: %d rows, %v", len(rows), err)
		}
		return rows[0].Seq, rows[len(rows)-1].Seq, len(rows)
	}
	// snapSeq waits for a snapshot at or after seq (the snapshotter writes
	// them once their command has committed) and returns its seq.
	snapSeq := func(seq int64) int64 {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			_, got, _, err := s.store.Load(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got >= seq {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("no snapshot at or after command %d (the last is at %d)", seq, got)
			}
		}
	}
	state := func() string {
		t.Helper()
		return string(engineSnapshot(t, s, 1))
	}
	caughtUp := func() int64 {
		t.Helper()
		_, last, _ := logSpan()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			pos, _, err := s.store.LedgerPos(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			// Caught up means synced too: the log is trimmed only behind
			// what ledger.db has synced (the writer syncs once a second;
			// here at once).
			if pos.Seq == last {
				if err := s.Ledger().Sync(); err != nil {
					t.Fatal(err)
				}
				if s.Ledger().KeepAfter(1) == last {
					return pos.Size
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the ledger is at command %d of %d (synced to %d)", pos.Seq, last, s.Ledger().KeepAfter(1))
			}
		}
	}

	// The ledger cannot write: snapshots come, the log stays whole.
	ledgerDown.Store(true)
	run(150)
	_, last, _ := logSpan()
	snapSeq(last - snapEvery + 1)
	first, last, n := logSpan()
	if first != 1 || n != int(last) {
		t.Fatalf("with the ledger behind, the log kept commands %d to %d (%d rows), want all %d", first, last, n, last)
	}

	// The ledger heals and catches up; the next snapshot trims.
	ledgerDown.Store(false)
	caughtUp()
	run(60)
	_, last, _ = logSpan()
	sq := snapSeq(last - snapEvery + 1)
	first, last, n = logSpan()
	if first <= 1 || n >= int(last) {
		t.Fatalf("after the ledger caught up and a snapshot at %d, the log still holds commands %d to %d", sq, first, last)
	}
	if first > sq-keep+1 {
		t.Errorf("the log starts at command %d; the snapshot at %d should keep %d before it", first, sq, keep)
	}
	t.Logf("log trimmed to commands %d-%d (%d rows) behind the snapshot at %d", first, last, n, sq)

	_, want, _ := s.Call(ctx, key, kernel.OpWait, nil)
	wantSnap := state()
	// A crash, not a shutdown: no final snapshot, the replay starts from
	// the last periodic one and reads the trimmed log after it.
	s.commit.stop()
	s.snaps.stop()
	s.events.stop()
	if s.ledger != nil {
		s.ledger.Stop()
	}
	s.store.Close()
	s.unlock()

	s = start()
	defer s.Shutdown(ctx)
	if _, got, _ := s.Call(ctx, key, kernel.OpWait, nil); string(got) != string(want) {
		t.Fatalf("after the restart wait answers\n%s\nwant\n%s", got, want)
	}
	if got := state(); got != wantSnap {
		t.Fatalf("after the restart the state is\n%s\nwant\n%s", got, wantSnap)
	}
	// Every event is in the ledger: two per pair (grant, release).
	if size := caughtUp(); size != int64(2*pairs) {
		t.Fatalf("the ledger holds %d entries after the restart, want %d (two per pair)", size, 2*pairs)
	}
}
