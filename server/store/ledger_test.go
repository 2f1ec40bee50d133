package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// TestLedgerAppendOnce: an append moves the position only from where it
// started, so a repeated append writes nothing.
func TestLedgerAppendOnce(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx := context.Background()
	a := LedgerAppend{Workspace: 1, To: LedgerPos{Seq: 3, Size: 1},
		Entries:   []LedgerEntry{{Index: 0, Seq: 2, LeaseID: "lease_00000000000000a1", Data: []byte(`{"type":"coordination.lease"}`)}},
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
	if err != nil || len(es) != 1 || es[0].Seq != 2 || string(es[0].Data) != `{"type":"coordination.lease"}` {
		t.Fatalf("entries %+v %v", es, err)
	}
	if e, ok, err := s.LedgerLease(ctx, 1, "lease_00000000000000a1"); err != nil || !ok || e.Index != 0 {
		t.Fatalf("lease look-up %+v %v %v", e, ok, err)
	}
	if err := s.SaveCheckpoint(ctx, 1, 1, []byte("note")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM bodies`, `DELETE FROM hashes`, `DELETE FROM grant_index`, `DELETE FROM checkpoints`,
		`UPDATE bodies SET data = x'00'`, `UPDATE hashes SET hashes = x'00'`} {
		if _, err := s.ldb.Exec(q); err == nil {
			t.Errorf("%s: the ledger let it happen", q)
		}
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

// memHashes is a tlog.HashReader over a slice of stored hashes.
type memHashes []tlog.Hash

func (m memHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = m[x]
	}
	return out, nil
}

// TestLedgerMovesOldEntries: a ledger.db with one row per entry (the
// entries table of earlier builds) is moved into batch rows when the
// store opens it: the same entries, hashes and grants.
func TestLedgerMovesOldEntries(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	ctx := context.Background()
	if _, err := s.ldb.Exec(`CREATE TABLE entries(workspace_id INTEGER NOT NULL, idx INTEGER NOT NULL, seq INTEGER NOT NULL,
		lease_id TEXT, data BLOB NOT NULL, hashes BLOB NOT NULL, PRIMARY KEY(workspace_id, idx)) WITHOUT ROWID;
		CREATE INDEX entries_by_lease ON entries(workspace_id, lease_id) WHERE lease_id IS NOT NULL;
		CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries BEGIN SELECT RAISE(ABORT, 'no'); END;`); err != nil {
		t.Fatal(err)
	}
	var all memHashes
	const n = 9
	for i := range int64(n) {
		data := []byte(`{"type":"coordination.lease","n":` + string(rune('0'+i)) + `}`)
		hs, err := tlog.StoredHashes(i, data, all)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, hs...)
		var blob []byte
		for _, h := range hs {
			blob = append(blob, h[:]...)
		}
		var lease any
		if i%2 == 0 {
			lease = "lease_000000000000000" + string(rune('0'+i))
		}
		if _, err := s.ldb.Exec(`INSERT INTO entries VALUES(1, ?, ?, ?, ?, ?)`, i, 10+i, lease, data, blob); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ldb.Exec(`INSERT INTO position VALUES(1, 20, ?)`, n); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir, Options{})
	es, err := s.LedgerEntries(ctx, 1, 0, 100)
	if err != nil || len(es) != n {
		t.Fatalf("entries after the move: %d (%v)", len(es), err)
	}
	for i, e := range es {
		if e.Index != int64(i) || e.Seq != 10+int64(i) || !strings.Contains(string(e.Data), `"n":`+string(rune('0'+i))) {
			t.Errorf("entry %d after the move: %+v", i, e)
		}
	}
	idx := make([]int64, len(all))
	for i := range idx {
		idx[i] = int64(i)
	}
	hs, err := s.LedgerHashes(ctx, 1, idx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range hs {
		if hs[i] != [32]byte(all[i]) {
			t.Errorf("stored hash %d differs after the move", i)
		}
	}
	if e, ok, err := s.LedgerLease(ctx, 1, "lease_0000000000000004"); err != nil || !ok || e.Index != 4 {
		t.Errorf("grant of lease 4 after the move: %+v %v %v", e, ok, err)
	}
	if _, ok, _ := s.LedgerLease(ctx, 1, "lease_0000000000000003"); ok {
		t.Error("entry 3 was no grant, but a look-up finds it")
	}
	var left int
	s.ldb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'entries%'`).Scan(&left)
	if left != 0 {
		t.Errorf("%d of the old entries table's objects are left", left)
	}
}

// TestLedgerMovesOldGrants: a grants table without epochs (builds between)
// is moved into the grant index when the store opens.
func TestLedgerMovesOldGrants(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	ctx := context.Background()
	a := LedgerAppend{Workspace: 1, To: LedgerPos{Seq: 2, Size: 2},
		Entries: []LedgerEntry{{Index: 0, Seq: 1, Data: []byte(`{"a":1}`)}, {Index: 1, Seq: 2, Data: []byte(`{"b":2}`)}},
		Hashes:  make([][32]byte, storedHashCount(2))}
	if err := s.AppendLedger([]LedgerAppend{a}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ldb.Exec(`CREATE TABLE grants(workspace_id INTEGER NOT NULL, lease INTEGER NOT NULL, idx INTEGER NOT NULL,
		PRIMARY KEY(workspace_id, lease, idx)) WITHOUT ROWID; INSERT INTO grants VALUES(1, 255, 1)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir, Options{})
	if e, ok, err := s.LedgerLease(ctx, 1, "lease_00000000000000ff"); err != nil || !ok || e.Index != 1 || string(e.Data) != `{"b":2}` {
		t.Fatalf("grant after the move: %+v %v %v", e, ok, err)
	}
	var left int
	s.ldb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'grants%'`).Scan(&left)
	if left != 0 {
		t.Errorf("%d of the old grants table's objects are left", left)
	}
}

// TestLedgerGrantEpochs: a lease is found whichever epoch of the grant
// index holds it, the newest grant of a repeated id first.
func TestLedgerGrantEpochs(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx := context.Background()
	const n = 3<<epochBits + 5
	var es []LedgerEntry
	for i := range int64(n) {
		e := LedgerEntry{Index: i, Seq: i + 1, Data: []byte(`{}`)}
		switch i {
		case 7, 1<<epochBits + 3:
			e.LeaseID = "lease_0000000000000007" // an id that repeats
		case 2<<epochBits - 1:
			e.LeaseID = "lease_0000000000000009"
		}
		es = append(es, e)
	}
	a := LedgerAppend{Workspace: 1, To: LedgerPos{Seq: n, Size: n}, Entries: es, Hashes: make([][32]byte, storedHashCount(n))}
	if err := s.AppendLedger([]LedgerAppend{a}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"lease_0000000000000007": 1<<epochBits + 3, "lease_0000000000000009": 2<<epochBits - 1} {
		if e, ok, err := s.LedgerLease(ctx, 1, id); err != nil || !ok || e.Index != want {
			t.Errorf("%s: %+v %v %v, want index %d", id, e.Index, ok, err, want)
		}
	}
	if _, ok, err := s.LedgerLease(ctx, 1, "lease_0000000000000008"); ok || err != nil {
		t.Errorf("an unknown lease found: %v %v", ok, err)
	}
}

// TestDropLedgerBodies: retention drops whole rows, oldest first, only
// below the export mark and only those written before the cut; it stops
// at the first row that must stay, and a trigger refuses any other delete.
func TestDropLedgerBodies(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx := context.Background()
	var pos LedgerPos
	for _, a := range []struct {
		n       int
		written int64
	}{{2, 100}, {3, 200}, {1, 300}} {
		next := LedgerPos{Seq: pos.Seq + 1, Size: pos.Size + int64(a.n)}
		app := LedgerAppend{Workspace: 1, From: pos, To: next, HashStart: storedHashCount(pos.Size), WrittenMs: a.written,
			Hashes: make([][32]byte, storedHashCount(next.Size)-storedHashCount(pos.Size))}
		for i := range a.n {
			app.Entries = append(app.Entries, LedgerEntry{Index: pos.Size + int64(i), Seq: next.Seq, Data: []byte(`{}`)})
		}
		if err := s.AppendLedger([]LedgerAppend{app}); err != nil {
			t.Fatal(err)
		}
		pos = next
	}
	if got, err := s.DropLedgerBodies(ctx, 1, 1000); err != nil || got != 0 {
		t.Fatalf("drop before any export: %d %v, want 0", got, err)
	}
	for _, step := range []struct {
		mark, before, want int64
	}{
		{4, 1000, 2}, // the second row reaches past the mark
		{5, 150, 2},  // the second row is newer than the cut
		{5, 1000, 5},
		{6, 250, 5}, // the third row is newer than the cut
		{6, 1000, 6},
	} {
		if err := s.MarkExported(ctx, 1, step.mark); err != nil {
			t.Fatal(err)
		}
		if got, err := s.DropLedgerBodies(ctx, 1, step.before); err != nil || got != step.want {
			t.Fatalf("mark %d, cut %d: dropped below %d (%v), want %d", step.mark, step.before, got, err, step.want)
		}
		if _, err := s.LedgerEntries(ctx, 1, step.want-1, 1); step.want > 0 && !errors.Is(err, ErrGone) {
			t.Errorf("entry %d after the drop: %v, want ErrGone", step.want-1, err)
		}
		if es, err := s.LedgerEntries(ctx, 1, step.want, 10); step.want < 6 && (err != nil || len(es) != int(6-step.want)) {
			t.Errorf("entries from %d after the drop: %d %v", step.want, len(es), err)
		}
	}
	if err := s.MarkExported(ctx, 1, 3); err != nil { // the mark only rises
		t.Fatal(err)
	}
	if r, err := s.LedgerRetentionOf(ctx, 1); err != nil || r != (LedgerRetention{Exported: 6, Dropped: 6}) {
		t.Errorf("retention %+v %v", r, err)
	}
}

// TestBodiesKeptUntilExported: the trigger refuses to delete a body row
// that reaches past the export mark.
func TestBodiesKeptUntilExported(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	app := LedgerAppend{Workspace: 1, To: LedgerPos{Seq: 1, Size: 2}, Hashes: make([][32]byte, storedHashCount(2)),
		Entries: []LedgerEntry{{Index: 0, Seq: 1, Data: []byte(`{}`)}, {Index: 1, Seq: 1, Data: []byte(`{}`)}}}
	if err := s.AppendLedger([]LedgerAppend{app}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkExported(context.Background(), 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ldb.Exec(`DELETE FROM bodies`); err == nil {
		t.Error("a body row past the export mark was deleted")
	}
}
