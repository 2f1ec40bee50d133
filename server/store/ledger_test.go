package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
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
	for _, q := range []string{`DELETE FROM body_rows`, `DELETE FROM grant_index`, `DELETE FROM checkpoints`,
		`UPDATE body_rows SET data = x'00'`, `UPDATE body_rows SET first = first + 1`} {
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
	// Groups of 5: the ledger's position ends one, so the trim reaches it.
	for i := 0; i < len(recs); i += 5 {
		if err := s.Commit(recs[i:min(i+5, len(recs))]); err != nil {
			t.Fatal(err)
		}
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

// realLedger appends entries with their real tree hashes, as the ledger's
// writer does, and keeps every stored hash to compare with what the store
// reads back.
type realLedger struct {
	s   *Store
	ws  int64
	pos LedgerPos
	all memHashes
}

func (l *realLedger) append(t *testing.T, n int, written int64) {
	t.Helper()
	next := LedgerPos{Seq: l.pos.Seq + 1, Size: l.pos.Size + int64(n)}
	app := LedgerAppend{Workspace: l.ws, From: l.pos, To: next, HashStart: storedHashCount(l.pos.Size), WrittenMs: written}
	for i := range int64(n) {
		idx := l.pos.Size + i
		data := []byte(`{"type":"coordination.lease","atMs":` + strconv.FormatInt(1000+idx, 10) + `,"leaseId":"lease_` + fmt.Sprintf("%016x", idx+1) + `"}`)
		hs, err := tlog.StoredHashes(idx, data, l.all)
		if err != nil {
			t.Fatal(err)
		}
		l.all = append(l.all, hs...)
		for _, h := range hs {
			app.Hashes = append(app.Hashes, h)
		}
		app.Entries = append(app.Entries, LedgerEntry{Index: idx, Seq: next.Seq, LeaseID: fmt.Sprintf("lease_%016x", idx+1), Data: data})
	}
	if err := l.s.AppendLedger([]LedgerAppend{app}); err != nil {
		t.Fatal(err)
	}
	l.pos = next
}

// check reads back every stored hash, and every entry from kept on.
func (l *realLedger) check(t *testing.T, kept int64) {
	t.Helper()
	ctx := context.Background()
	idx := make([]int64, len(l.all))
	for i := range idx {
		idx[i] = int64(i)
	}
	hs, err := l.s.LedgerHashes(ctx, l.ws, idx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range hs {
		if hs[i] != [32]byte(l.all[i]) {
			t.Fatalf("stored hash %d read back differs", i)
		}
	}
	root, err := tlog.TreeHash(l.pos.Size, tlog.HashReaderFunc(func(x []int64) ([]tlog.Hash, error) {
		hs, err := l.s.LedgerHashes(ctx, l.ws, x)
		out := make([]tlog.Hash, len(hs))
		for i := range hs {
			out[i] = hs[i]
		}
		return out, err
	}))
	if want, _ := tlog.TreeHash(l.pos.Size, l.all); err != nil || root != want {
		t.Fatalf("tree hash from the store %x (%v), want %x", root, err, want)
	}
	es, err := l.s.LedgerEntries(ctx, l.ws, kept, int(l.pos.Size))
	if err != nil || int64(len(es)) != l.pos.Size-kept {
		t.Fatalf("entries from %d: %d (%v), want %d", kept, len(es), err, l.pos.Size-kept)
	}
	for k, e := range es {
		if e.Index != kept+int64(k) || tlog.RecordHash(e.Data) != l.all[tlog.StoredHashIndex(0, e.Index)] {
			t.Fatalf("entry %d read back differs", e.Index)
		}
	}
}

// TestLedgerRows: appends of any size land in rows laid on multiples of
// 32 (the last one growing), store only the hashes of full rows and above,
// and read back every stored hash, the tree hash and every entry, byte for
// byte.
func TestLedgerRows(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	l := &realLedger{s: s, ws: 1}
	for _, n := range []int{1, 2, 29, 1, 32, 64, 3, 100, 31, 1} {
		l.append(t, n, 100)
		l.check(t, 0)
	}
	var rowsN, fullRows, hashRows, hashBytes int64
	s.ldb.QueryRow(`SELECT count(*), count(*) FILTER (WHERE count = 32) FROM body_rows`).Scan(&rowsN, &fullRows)
	s.ldb.QueryRow(`SELECT count(*), sum(length(hashes)) FROM row_hashes`).Scan(&hashRows, &hashBytes)
	if n := l.pos.Size; rowsN != (n+31)/32 || fullRows != n/32 || hashRows != n/32 {
		t.Errorf("%d entries in %d rows (%d full) with %d rows of hashes, want %d, %d full, %d", n, rowsN, fullRows, hashRows, (n+31)/32, n/32, n/32)
	}
	if hashBytes > 32*3*hashRows {
		t.Errorf("%d bytes of hashes for %d full rows", hashBytes, hashRows)
	}
}

// TestDropLedgerBodies: retention drops entries oldest first, only below
// the export mark and only those written before the cut (whole rows, and
// the first part of a row); it stops at the first entry that must stay,
// keeps the dropped entries' leaf hashes (every stored hash still reads
// back), and a trigger refuses any other delete or change.
func TestDropLedgerBodies(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx := context.Background()
	l := &realLedger{s: s, ws: 1}
	// Entries 0-39 written at 100, 40-69 at 200, 70-99 at 300, in rows
	// 0-31, 32-63, 64-95 and 96-99 (not full).
	for _, a := range []struct {
		n       int
		written int64
	}{{40, 100}, {30, 200}, {30, 300}} {
		l.append(t, a.n, a.written)
	}
	if got, err := s.DropLedgerBodies(ctx, 1, 1000); err != nil || got != 0 {
		t.Fatalf("drop before any export: %d %v, want 0", got, err)
	}
	for _, step := range []struct {
		mark, before, want int64
	}{
		{40, 1000, 40}, // a row and the first part of the next, up to the mark
		{64, 150, 40},  // entry 40 is newer than the cut
		{64, 1000, 64},
		{100, 250, 70},   // entry 70 is newer than the cut
		{100, 1000, 100}, // the last row too, not full
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
		l.check(t, step.want)
	}
	if err := s.MarkExported(ctx, 1, 3); err != nil { // the mark only rises
		t.Fatal(err)
	}
	if r, err := s.LedgerRetentionOf(ctx, 1); err != nil || r != (LedgerRetention{Exported: 100, Dropped: 100}) {
		t.Errorf("retention %+v %v", r, err)
	}
	l.append(t, 5, 400) // a row after the drop, then growing to its end
	l.check(t, 100)
	l.append(t, 60, 500)
	l.check(t, 100)
	for _, q := range []string{`DELETE FROM leaf_hashes`, `UPDATE leaf_hashes SET hashes = x'00'`, `DELETE FROM row_hashes`,
		`UPDATE row_hashes SET hashes = x'00'`, `DELETE FROM body_rows`,
		// A full row never changes; only the last one, not full, grows.
		`UPDATE body_rows SET count = count + 1, data = x'00' WHERE count = 32`} {
		if _, err := s.ldb.Exec(q); err == nil {
			t.Errorf("%s: the ledger let it happen", q)
		}
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
	if _, err := s.ldb.Exec(`DELETE FROM body_rows`); err == nil {
		t.Error("a body row past the export mark was deleted")
	}
}

// TestLedgerPacksUnpackedRows: a ledger.db of the builds before packed rows
// (tables hashes and bodies: rows of up to 32 entries wherever a write
// began, bodies length-prefixed, every stored hash kept, bodies below the
// retention mark dropped) is packed when the store opens it: every stored
// hash and kept entry reads back the same, the dropped ones stay gone, the
// old tables go, and appends go on from there.
func TestLedgerPacksUnpackedRows(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	if _, err := s.ldb.Exec(`CREATE TABLE hashes(workspace_id INTEGER NOT NULL, first INTEGER NOT NULL, count INTEGER NOT NULL,
			hashes BLOB NOT NULL, PRIMARY KEY(workspace_id, first));
		CREATE TABLE bodies(workspace_id INTEGER NOT NULL, first INTEGER NOT NULL, count INTEGER NOT NULL,
			written_ms INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(workspace_id, first));
		CREATE TRIGGER hashes_no_delete BEFORE DELETE ON hashes BEGIN SELECT RAISE(ABORT, 'no'); END;
		CREATE TRIGGER bodies_no_update BEFORE UPDATE ON bodies BEGIN SELECT RAISE(ABORT, 'no'); END;`); err != nil {
		t.Fatal(err)
	}
	l := &realLedger{s: s, ws: 3}
	var ents []LedgerEntry
	for i := range int64(100) {
		data := []byte(`{"type":"coordination.renew","atMs":` + strconv.FormatInt(5000+i, 10) + `}`)
		hs, err := tlog.StoredHashes(i, data, l.all)
		if err != nil {
			t.Fatal(err)
		}
		l.all = append(l.all, hs...)
		ents = append(ents, LedgerEntry{Index: i, Seq: 7 + i/3, Data: data})
	}
	const dropped = 12 // the first two old rows
	first := int64(0)
	for _, n := range []int64{5, 7, 32, 1, 20, 32, 3} {
		var body, hashes []byte
		for _, e := range ents[first : first+n] {
			body = binary.AppendUvarint(body, uint64(e.Seq))
			body = binary.AppendUvarint(body, uint64(len(e.Data)))
			body = append(body, e.Data...)
		}
		for _, h := range l.all[storedHashCount(first):storedHashCount(first+n)] {
			hashes = append(hashes, h[:]...)
		}
		if _, err := s.ldb.Exec(`INSERT INTO hashes VALUES(3, ?, ?, ?)`, first, n, hashes); err != nil {
			t.Fatal(err)
		}
		if first >= dropped {
			if _, err := s.ldb.Exec(`INSERT INTO bodies VALUES(3, ?, ?, 100, ?)`, first, n, body); err != nil {
				t.Fatal(err)
			}
		}
		first += n
	}
	if _, err := s.ldb.Exec(`INSERT INTO position VALUES(3, 40, 100); INSERT INTO retention VALUES(3, 50, ?)`, dropped); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir, Options{})
	l.s, l.pos = s, LedgerPos{Seq: 40, Size: 100}
	l.check(t, dropped)
	if _, err := s.LedgerEntries(context.Background(), 3, dropped-1, 1); !errors.Is(err, ErrGone) {
		t.Errorf("a dropped entry after the move: %v, want ErrGone", err)
	}
	es, _ := s.LedgerEntries(context.Background(), 3, dropped, 1)
	if len(es) != 1 || es[0].Seq != ents[dropped].Seq {
		t.Errorf("entry %d after the move: %+v, want seq %d", dropped, es, ents[dropped].Seq)
	}
	var left int
	s.ldb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('hashes', 'bodies') OR name LIKE 'hashes_%' OR name LIKE 'bodies_%'`).Scan(&left)
	if left != 0 {
		t.Errorf("%d of the old tables' objects are left", left)
	}
	l.append(t, 40, 200)
	l.check(t, dropped)
	if got, err := s.DropLedgerBodies(context.Background(), 3, 1000); err != nil || got != 50 {
		t.Errorf("a drop after the move: below %d (%v), want 50 (the mark)", got, err)
	}
	l.check(t, 50)
}
