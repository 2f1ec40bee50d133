package store

import (
	"context"
	"errors"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// TestLedgerAppendOnce: an append moves the position only from where it
// started, so a repeated append writes nothing.
func TestLedgerAppendOnce(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx := context.Background()
	a := LedgerAppend{Workspace: 1, To: LedgerPos{Seq: 3, Size: 1},
		Entries:   []LedgerEntry{{Index: 0, Seq: 2, LeaseID: "lease_1", Data: []byte(`{"type":"coordination.lease"}`)}},
		HashStart: 0, Hashes: [][32]byte{{1}}}
	if err := s.AppendLedger([]LedgerAppend{a}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendLedger([]LedgerAppend{a}); !errors.Is(err, ErrLedgerMoved) {
		t.Fatalf("the same append again: %v, want ErrLedgerMoved", err)
	}
	b := LedgerAppend{Workspace: 1, From: LedgerPos{Seq: 2, Size: 1}, To: LedgerPos{Seq: 4, Size: 1}}
	if err := s.AppendLedger([]LedgerAppend{b}); !errors.Is(err, ErrLedgerMoved) {
		t.Fatalf("an append from a stale position: %v", err)
	}
	pos, ok, err := s.LedgerPos(ctx, 1)
	if err != nil || !ok || pos != (LedgerPos{Seq: 3, Size: 1}) {
		t.Fatalf("position %+v %v %v", pos, ok, err)
	}
	es, err := s.LedgerEntries(ctx, 1, 0, 10)
	if err != nil || len(es) != 1 || es[0].LeaseID != "lease_1" {
		t.Fatalf("entries %+v %v", es, err)
	}
	if e, ok, err := s.LedgerLease(ctx, 1, "lease_1"); err != nil || !ok || e.Index != 0 {
		t.Fatalf("lease look-up %+v %v %v", e, ok, err)
	}
	if _, err := s.ldb.Exec(`DELETE FROM entries`); err == nil {
		t.Error("ledger entries could be deleted")
	}
}

// TestLogKeptBehindLedger: a snapshot trims the log only up to the
// ledger's position, and the log keeps each command's events.
func TestLogKeptBehindLedger(t *testing.T) {
	keep := int64(5)
	s := open(t, t.TempDir(), Options{LogKeepAfter: func(int64) int64 { return keep }})
	var recs []Record
	for i := int64(1); i <= LogKeep+100; i++ {
		recs = append(recs, Record{Workspace: 1, Seq: i, NowMs: i, Op: "acquire", Body: []byte("{}"), Status: 200, Events: []byte(`[{"n":1}]`)})
	}
	recs[len(recs)-1].Snapshot = []byte("{}")
	if err := s.Commit(recs); err != nil {
		t.Fatal(err)
	}
	rows, err := s.LogEvents(context.Background(), 1, 0, 10)
	if err != nil || len(rows) != 10 || rows[0].Seq != 6 || string(rows[0].Events) != `[{"n":1}]` || !rows[0].Known {
		t.Fatalf("log after the snapshot starts %+v (%v), want seq 6 with its events", rows[:min(1, len(rows))], err)
	}
}

// TestHashHome: the entry rows keep tlog's stored hashes where tlog
// numbers them.
func TestHashHome(t *testing.T) {
	x := int64(0)
	for n := int64(0); n < 3000; n++ {
		if got, want := storedHashCount(n), tlog.StoredHashCount(n); got != want {
			t.Fatalf("storedHashCount(%d) = %d, tlog says %d", n, got, want)
		}
		for k := range hashesOf(n) {
			if e, at := hashHome(x); e != n || at != k {
				t.Fatalf("hash %d: home (%d, %d), want (%d, %d)", x, e, at, n, k)
			}
			x++
		}
	}
}
