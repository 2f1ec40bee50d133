package ledger

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/store"
)

// TestKeepAfterDurable: the log may be trimmed only behind what ledger.db
// has synced, not behind what it merely wrote: KeepAfter stays where the
// last sync left it while the ledger grows, and moves to the position once
// a sync covers it.
func TestKeepAfterDurable(t *testing.T) {
	dir, st := openStore(t)
	commit := func(from, to int) {
		var recs []store.Record
		for i := from; i <= to; i++ {
			ev := `[{"type":"coordination.lease","atMs":` + strconv.Itoa(1000+i) + `,"resource":"lock:r` + strconv.Itoa(i) + `"}]`
			recs = append(recs, store.Record{Workspace: 1, Seq: int64(i), NowMs: int64(1000 + i), Op: "acquire", Body: []byte("{}"), Status: 200, Events: []byte(ev)})
		}
		if err := st.Commit(recs); err != nil {
			t.Fatal(err)
		}
	}
	commit(1, 10)
	l := startLedger(t, Config{Store: st, DataDir: dir, SyncEvery: time.Hour}, "sync")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := func() {
		if err := l.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	sync := func() {
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	keepAfter := func(want int64, when string) {
		if got := l.KeepAfter(1); got != want {
			t.Fatalf("KeepAfter %s: %d, want %d", when, got, want)
		}
	}
	wait()
	keepAfter(0, "before any sync")
	sync()
	keepAfter(10, "after a sync")
	commit(11, 20)
	l.Notify(1, 20, nil) // the writer reads 11..20 back from the log
	wait()
	keepAfter(10, "after unsynced writes (the last sync)")
	sync()
	keepAfter(20, "after the second sync")
}

// openStore opens a store in a new temporary folder, closed at the end of
// tb.
func openStore(tb testing.TB) (string, *store.Store) {
	tb.Helper()
	dir := tb.TempDir()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return dir, st
}

// startLedger starts a ledger with cfg, stopped at the end of tb, and opens
// workspace 1 in it as name.
func startLedger(tb testing.TB, cfg Config, name string) *Ledger {
	tb.Helper()
	l, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	l.Start()
	tb.Cleanup(l.Stop)
	if err := l.Workspace(1, name); err != nil {
		tb.Fatal(err)
	}
	return l
}
