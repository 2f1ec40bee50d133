package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/leaseplane/leaseplane/kernel/ledger/rows"
)

// The schema's triggers spell the row size as 32: this fails to compile if
// rows.Size ever differs.
const _ = uint(rows.Size-32) + uint(32-rows.Size)

// A Packer keeps a compressor's state (about a megabyte): one for the
// process, kept, not pooled; a pool lost it at each collection, and the
// ledger's writer, which packs once every write, made a new one about as
// often. Packing is the writer's (and retention's), so one is enough.
// Readers are smaller and read from many routes at once: pooled.
var (
	packer struct {
		sync.Mutex
		p rows.Packer
	}
	readers = sync.Pool{New: func() any { return new(rows.Reader) }}
)

func unpack(data []byte) ([]rows.Entry, error) {
	r := readers.Get().(*rows.Reader)
	defer readers.Put(r)
	return r.Unpack(data, nil)
}

func pack(es []rows.Entry) ([]byte, error) {
	packer.Lock()
	defer packer.Unlock()
	return packer.p.Pack(es)
}

// rowOf is the row of entry i: rows lie on multiples of rows.Size.
func rowOf(i int64) int64 { return i / rows.Size }

// putEntries writes entries (consecutive, from entries[0].Index on) of
// workspace ws: the last row grows until it is full, the others are new
// rows, each ending where a multiple of rows.Size does; and for each row
// the entries complete, the hashes its last entry stored from the row's
// subtree up (hashes are the stored hashes from tlog index hashStart on).
func (s *Store) putEntries(tx *sql.Tx, ws int64, entries []LedgerEntry, hashStart int64, hashes [][32]byte, writtenMs int64) error {
	if len(entries) == 0 {
		return nil
	}
	first := entries[0].Index
	start := first
	var all []rows.Entry
	grow := false
	if first%rows.Size != 0 {
		// The last row is not full: these entries go on in it.
		var f, c int64
		var data []byte
		st, err := s.ledgerRead(qLastRow)
		if err != nil {
			return err
		}
		err = tx.Stmt(st).QueryRow(ws, first, first-first%rows.Size).Scan(&f, &c, &data)
		switch {
		case err == nil && f+c == first:
			old, err := unpack(data)
			if err != nil || int64(len(old)) != c {
				return fmt.Errorf("store: ledger of workspace %d: the row of entries %d to %d is damaged", ws, f, f+c-1)
			}
			all, start, grow = old, f, true
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("store: read the last ledger row of workspace %d: %w", ws, err)
		}
	}
	for _, e := range entries {
		all = append(all, rows.Entry{Seq: e.Seq, Time: writtenMs, Data: e.Data})
	}
	var bodyArgs []any
	for off := int64(0); off < int64(len(all)); {
		at := start + off
		end := min((rowOf(at)+1)*rows.Size, start+int64(len(all)))
		seg := all[off : end-start]
		data, err := pack(seg)
		if err != nil {
			return fmt.Errorf("store: pack the ledger row of entry %d of workspace %d: %w", at, ws, err)
		}
		if off == 0 && grow {
			st, err := s.ledgerRead(qGrowRow)
			if err != nil {
				return err
			}
			if _, err := tx.Stmt(st).Exec(len(seg), data, ws, at); err != nil {
				return fmt.Errorf("store: grow the ledger row of entry %d of workspace %d: %w", at, ws, err)
			}
		} else {
			bodyArgs = append(bodyArgs, ws, at, len(seg), data)
		}
		off = end - start
	}
	var hashArgs []any
	for _, e := range entries {
		if (e.Index+1)%rows.Size != 0 {
			continue
		}
		lo, hi := storedHashCount(e.Index)+rows.Height-hashStart, storedHashCount(e.Index+1)-hashStart
		if lo < 0 || hi > int64(len(hashes)) || lo >= hi {
			return fmt.Errorf("store: ledger of workspace %d: the hashes of entry %d are not in the append", ws, e.Index)
		}
		blob := make([]byte, 0, 32*(hi-lo))
		for _, h := range hashes[lo:hi] {
			blob = append(blob, h[:]...)
		}
		hashArgs = append(hashArgs, ws, rowOf(e.Index), blob)
	}
	if err := s.insertRows(tx, "body_rows(workspace_id, first, count, data)", 4, bodyArgs); err != nil {
		return fmt.Errorf("store: write the ledger of workspace %d: %w", ws, err)
	}
	if err := s.insertRows(tx, "row_hashes(workspace_id, row, hashes)", 3, hashArgs); err != nil {
		return fmt.Errorf("store: write the ledger hashes of workspace %d: %w", ws, err)
	}
	return nil
}

// insertRows inserts args (cols values a row) into table, many rows a
// statement, each statement prepared once.
func (s *Store) insertRows(tx *sql.Tx, table string, cols int, args []any) error {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + "), "
	for len(args) > 0 {
		part := args[:cols*perInsert(len(args)/cols)]
		args = args[len(part):]
		st, err := s.ledgerRead(`INSERT INTO ` + table + ` VALUES ` + strings.TrimSuffix(strings.Repeat(row, len(part)/cols), ", "))
		if err != nil {
			return err
		}
		if _, err := tx.Stmt(st).Exec(part...); err != nil {
			return err
		}
	}
	return nil
}

// unpackEntries appends the entries of a body row from index first on
// (those from index from, at most max of them) to out.
func unpackEntries(out []LedgerEntry, ws, first, from int64, max int, data []byte) ([]LedgerEntry, error) {
	es, err := unpack(data)
	if err != nil {
		return out, fmt.Errorf("store: the ledger row of entry %d of workspace %d is damaged", first, ws)
	}
	for i, e := range es {
		if len(out) >= max {
			break
		}
		if idx := first + int64(i); idx >= from {
			out = append(out, LedgerEntry{Index: idx, Seq: e.Seq, Data: e.Data})
		}
	}
	return out, nil
}

// hashChunk is how many rows one read of row hashes asks for (the query
// is prepared once, the missing ones padded with -1).
const hashChunk = 16

// LedgerHashes reads stored hashes of a workspace's tree by their tlog
// index: a row's subtree hash and those above it from row_hashes, the
// hashes inside a row recomputed from its leaves (its bodies, or the leaf
// hashes kept when retention dropped them).
func (s *Store) LedgerHashes(ctx context.Context, ws int64, indexes []int64) ([][32]byte, error) {
	out := make([][32]byte, len(indexes))
	var upper, inner []int64
	for _, x := range indexes {
		e, at := hashHome(x)
		if at >= rows.Height {
			upper = append(upper, rowOf(e))
		} else {
			inner = append(inner, rowOf(e))
		}
	}
	slices.Sort(upper)
	upper = slices.Compact(upper)
	slices.Sort(inner)
	inner = slices.Compact(inner)
	above := map[int64][]byte{}
	if len(upper) > 0 {
		st, err := s.ledgerRead(`SELECT row, hashes FROM row_hashes WHERE workspace_id = ? AND row IN (` +
			strings.TrimSuffix(strings.Repeat("?, ", hashChunk), ", ") + `)`)
		if err != nil {
			return nil, err
		}
		for len(upper) > 0 {
			part := upper[:min(len(upper), hashChunk)]
			upper = upper[len(part):]
			args := []any{ws}
			for i := range hashChunk {
				if i < len(part) {
					args = append(args, part[i])
				} else {
					args = append(args, -1)
				}
			}
			rs, err := st.QueryContext(ctx, args...)
			if err != nil {
				return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
			}
			for rs.Next() {
				var r int64
				var h []byte
				if err := rs.Scan(&r, &h); err != nil {
					rs.Close()
					return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
				}
				above[r] = h
			}
			rs.Close()
			if err := rs.Err(); err != nil {
				return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
			}
		}
	}
	leaves := map[int64]*rowLeaves{}
	for _, r := range inner {
		l, err := s.rowLeaves(ctx, ws, r)
		if err != nil {
			return nil, err
		}
		leaves[r] = l
	}
	var scratch [rows.Size][32]byte
	for i, x := range indexes {
		e, at := hashHome(x)
		r := rowOf(e)
		if at >= rows.Height {
			h, k := above[r], at-rows.Height
			if len(h) < 32*(k+1) {
				return nil, fmt.Errorf("store: ledger of workspace %d has no stored hash %d", ws, x)
			}
			out[i] = [32]byte(h[32*k : 32*k+32])
			continue
		}
		lo, hi := e+1-int64(1)<<at, e+1
		l := leaves[r]
		for j := lo; j < hi; j++ {
			if !l.have[j%rows.Size] {
				return nil, fmt.Errorf("store: ledger of workspace %d has neither the body nor the leaf hash of entry %d", ws, j)
			}
		}
		n := copy(scratch[:], l.hash[lo%rows.Size:lo%rows.Size+(hi-lo)])
		h, err := rows.Subtree(scratch[:n])
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// rowLeaves are the leaf hashes of one row's entries, where known.
type rowLeaves struct {
	hash [rows.Size][32]byte
	have [rows.Size]bool
}

// rowLeaves reads the leaf hashes of row r: from its bodies, or from the
// leaf hashes kept when retention dropped them.
func (s *Store) rowLeaves(ctx context.Context, ws, r int64) (*rowLeaves, error) {
	l := &rowLeaves{}
	lo, hi := r*rows.Size, (r+1)*rows.Size
	for _, q := range []string{
		`SELECT first, count, data FROM body_rows WHERE workspace_id = ? AND first >= ? AND first < ?`,
		`SELECT first, count, hashes FROM leaf_hashes WHERE workspace_id = ? AND first >= ? AND first < ?`,
	} {
		st, err := s.ledgerRead(q)
		if err != nil {
			return nil, err
		}
		rs, err := st.QueryContext(ctx, ws, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("store: read the leaves of ledger row %d of workspace %d: %w", r, ws, err)
		}
		bodies := strings.Contains(q, "body_rows")
		for rs.Next() {
			var first, count int64
			var data []byte
			if err := rs.Scan(&first, &count, &data); err != nil {
				rs.Close()
				return nil, fmt.Errorf("store: read the leaves of ledger row %d of workspace %d: %w", r, ws, err)
			}
			if first+count > hi {
				rs.Close()
				return nil, fmt.Errorf("store: ledger of workspace %d: the row of entries %d to %d crosses a row's end", ws, first, first+count-1)
			}
			if bodies {
				es, err := unpack(data)
				if err != nil || int64(len(es)) != count {
					rs.Close()
					return nil, fmt.Errorf("store: the ledger row of entry %d of workspace %d is damaged", first, ws)
				}
				for i, e := range es {
					k := (first + int64(i)) % rows.Size
					l.hash[k], l.have[k] = rows.Leaf(e.Data), true
				}
				continue
			}
			if int64(len(data)) != 32*count {
				rs.Close()
				return nil, fmt.Errorf("store: the leaf hashes of entry %d of workspace %d are damaged", first, ws)
			}
			for i := range count {
				k := (first + i) % rows.Size
				l.hash[k], l.have[k] = [32]byte(data[32*i:32*i+32]), true
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("store: read the leaves of ledger row %d of workspace %d: %w", r, ws, err)
		}
	}
	return l, nil
}

// dropRows bounds the body rows one DropLedgerBodies drops.
const dropRows = 512

// DropLedgerBodies drops the entry bodies of a workspace that were written
// before beforeMs and are below its export mark, oldest first, stopping at
// the first entry that may not go (so that what is dropped is always a
// prefix of the ledger): whole rows, and the first part of the row where it
// stops. It returns the index below which bodies are now gone. The dropped
// entries' leaf hashes are kept in the same transaction; tree hashes, the
// grant index and checkpoints stay.
func (s *Store) DropLedgerBodies(ctx context.Context, ws, beforeMs int64) (int64, error) {
	tx, err := s.ldb.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("store: begin dropping ledger bodies of workspace %d: %w", ws, err)
	}
	defer tx.Rollback()
	var r LedgerRetention
	err = tx.QueryRowContext(ctx, `SELECT exported, dropped FROM retention WHERE workspace_id = ?`, ws).Scan(&r.Exported, &r.Dropped)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // never exported: nothing may go
	}
	if err != nil {
		return 0, fmt.Errorf("store: read the ledger retention of workspace %d: %w", ws, err)
	}
	rs, err := tx.QueryContext(ctx, `SELECT first, count, data FROM body_rows WHERE workspace_id = ? AND first >= ? ORDER BY first LIMIT `+
		strconv.Itoa(dropRows), ws, r.Dropped)
	if err != nil {
		return 0, fmt.Errorf("store: read ledger bodies of workspace %d: %w", ws, err)
	}
	upTo := r.Dropped
	var leafArgs []any
	var trimFirst int64 = -1 // the row that loses only its first entries
	var rest []rows.Entry
	for rs.Next() {
		var first, count int64
		var data []byte
		if err := rs.Scan(&first, &count, &data); err != nil {
			rs.Close()
			return 0, fmt.Errorf("store: read ledger bodies of workspace %d: %w", ws, err)
		}
		if first != upTo {
			break
		}
		es, err := unpack(data)
		if err != nil || int64(len(es)) != count {
			rs.Close()
			return 0, fmt.Errorf("store: the ledger row of entry %d of workspace %d is damaged", first, ws)
		}
		k := 0
		for k < len(es) && first+int64(k) < r.Exported && es[k].Time < beforeMs {
			k++
		}
		if k == 0 {
			break
		}
		blob := make([]byte, 0, 32*k)
		for _, e := range es[:k] {
			h := rows.Leaf(e.Data)
			blob = append(blob, h[:]...)
		}
		leafArgs = append(leafArgs, ws, first, k, blob)
		upTo = first + int64(k)
		if k < len(es) {
			trimFirst, rest = first, es[k:]
			break
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("store: read ledger bodies of workspace %d: %w", ws, err)
	}
	if upTo == r.Dropped {
		return r.Dropped, nil
	}
	if err := s.insertRows(tx, "leaf_hashes(workspace_id, first, count, hashes)", 4, leafArgs); err != nil {
		return 0, fmt.Errorf("store: keep the leaf hashes of dropped ledger bodies of workspace %d: %w", ws, err)
	}
	wholeTo := upTo
	if trimFirst >= 0 {
		wholeTo = trimFirst
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM body_rows WHERE workspace_id = ? AND first >= ? AND first < ?`, ws, r.Dropped, wholeTo); err != nil {
		return 0, fmt.Errorf("store: drop ledger bodies of workspace %d: %w", ws, err)
	}
	if trimFirst >= 0 {
		data, err := pack(rest)
		if err != nil {
			return 0, fmt.Errorf("store: pack what is kept of the ledger row of entry %d of workspace %d: %w", trimFirst, ws, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE body_rows SET first = ?, count = ?, data = ? WHERE workspace_id = ? AND first = ?`,
			upTo, len(rest), data, ws, trimFirst); err != nil {
			return 0, fmt.Errorf("store: drop the first entries of the ledger row of entry %d of workspace %d: %w", trimFirst, ws, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE retention SET dropped = ? WHERE workspace_id = ?`, upTo, ws); err != nil {
		return 0, fmt.Errorf("store: drop ledger bodies of workspace %d: %w", ws, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("store: commit dropping ledger bodies of workspace %d: %w", ws, err)
	}
	return upTo, nil
}

// LedgerUsage is what a workspace's ledger keeps: its entries, the index
// below which retention dropped the bodies, the export mark and the bytes
// of its rows.
type LedgerUsage struct {
	Entries, BodiesFrom, Exported int64
	// Bytes are the bytes of the workspace's stored values (packed bodies,
	// hashes, grant look-ups), without SQLite's own page overhead.
	Bytes int64
}

// LedgerUsageOf reads a workspace's ledger usage. It reads every row's
// size (SQLite's length() of a blob reads no content): cheap, but once per
// scrape, not per request.
func (s *Store) LedgerUsageOf(ctx context.Context, ws int64) (LedgerUsage, error) {
	var u LedgerUsage
	err := s.ldb.QueryRowContext(ctx, `SELECT
		coalesce((SELECT size FROM position WHERE workspace_id = ?1), 0),
		coalesce((SELECT dropped FROM retention WHERE workspace_id = ?1), 0),
		coalesce((SELECT exported FROM retention WHERE workspace_id = ?1), 0),
		coalesce((SELECT sum(length(data) + 16) FROM body_rows WHERE workspace_id = ?1), 0) +
		coalesce((SELECT sum(length(hashes) + 8) FROM row_hashes WHERE workspace_id = ?1), 0) +
		coalesce((SELECT sum(length(hashes) + 8) FROM leaf_hashes WHERE workspace_id = ?1), 0) +
		16 * (SELECT count(*) FROM grant_index WHERE workspace_id = ?1)`, ws).Scan(&u.Entries, &u.BodiesFrom, &u.Exported, &u.Bytes)
	if err != nil {
		return u, fmt.Errorf("store: read the ledger usage of workspace %d: %w", ws, err)
	}
	return u, nil
}

// LedgerOldestBody is the index of the oldest entry body a workspace's
// ledger keeps and the time it was written; ok is false when none is kept.
func (s *Store) LedgerOldestBody(ctx context.Context, ws int64) (index, writtenMs int64, ok bool, err error) {
	var data []byte
	err = s.ldb.QueryRowContext(ctx, `SELECT first, data FROM body_rows WHERE workspace_id = ? ORDER BY first LIMIT 1`, ws).Scan(&index, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("store: read the oldest ledger body of workspace %d: %w", ws, err)
	}
	es, err := unpack(data)
	if err != nil || len(es) == 0 {
		return 0, 0, false, fmt.Errorf("store: the ledger row of entry %d of workspace %d is damaged", index, ws)
	}
	return index, es[0].Time, true, nil
}

// migrateLedger brings a ledger.db of an earlier layout to this one, each
// in one transaction: a grants table (a look-up without epochs) into the
// grant index; and the entries of one row per entry (an entries table) or
// of the uncompressed rows of builds before rows were packed (tables
// hashes and bodies) into packed rows, keeping of their hashes what this
// layout stores (entries whose bodies retention dropped keep their leaf
// hashes). The old tables go, and the file is vacuumed once.
func (s *Store) migrateLedger() error {
	has := func(name string) (bool, error) {
		var n int
		err := s.ldb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
		if err != nil {
			return false, fmt.Errorf("store: look for the ledger's old %s table: %w", name, err)
		}
		return n > 0, nil
	}
	if g, err := has("grants"); err != nil {
		return err
	} else if g {
		if err := s.inTx("move the ledger's old grants table", func(tx *sql.Tx) error {
			for _, q := range []string{
				`INSERT OR IGNORE INTO grant_index(workspace_id, epoch, lease, idx) SELECT workspace_id, idx >> ` +
					strconv.Itoa(epochBits) + `, lease, idx FROM grants`,
				`DROP TRIGGER IF EXISTS grants_no_update`, `DROP TRIGGER IF EXISTS grants_no_delete`, `DROP TABLE grants`,
			} {
				if _, err := tx.Exec(q); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	moved := false
	for _, old := range []struct {
		table, what string
		move        func(*sql.Tx) error
	}{
		{"entries", "move the ledger's entries into packed rows", s.moveEntriesTable},
		{"bodies", "pack the ledger's rows", s.moveUnpackedRows},
	} {
		if ok, err := has(old.table); err != nil {
			return err
		} else if ok {
			if err := s.inTx(old.what, old.move); err != nil {
				return err
			}
			moved = true
		}
	}
	if moved {
		if _, err := s.ldb.Exec(`VACUUM`); err != nil {
			return fmt.Errorf("store: vacuum the ledger after moving its rows: %w", err)
		}
	}
	return nil
}

func (s *Store) inTx(what string, f func(tx *sql.Tx) error) error {
	tx, err := s.ldb.Begin()
	if err != nil {
		return fmt.Errorf("store: begin to %s: %w", what, err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: %s: commit: %w", what, err)
	}
	return nil
}

// oldEntry is one entry of an earlier layout, on its way to packed rows.
type oldEntry struct {
	idx, seq int64
	data     []byte     // nil when retention dropped it
	written  int64      // when it was written (0 when the layout did not say)
	hashes   [][32]byte // the stored hashes of its append, in tlog's order
}

// rowMover gathers one workspace's old entries, in order, into packed
// rows: one body row of the kept entries of each row (and a row of leaf
// hashes for the dropped ones), and the row hashes of each full row.
type rowMover struct {
	s    *Store
	tx   *sql.Tx
	ws   int64
	cur  []oldEntry // of one row, in order
	next int64
}

func (m *rowMover) add(e oldEntry) error {
	if e.idx != m.next || len(e.hashes) != hashesOf(e.idx) {
		return fmt.Errorf("entry %d of workspace %d is out of place", e.idx, m.ws)
	}
	if len(m.cur) > 0 && rowOf(m.cur[0].idx) != rowOf(e.idx) {
		if err := m.flush(); err != nil {
			return err
		}
	}
	m.cur = append(m.cur, e)
	m.next++
	return nil
}

func (m *rowMover) flush() error {
	if len(m.cur) == 0 {
		return nil
	}
	var leaves []byte
	var kept []rows.Entry
	keptFrom := int64(-1)
	for _, e := range m.cur {
		if e.data == nil {
			if keptFrom >= 0 {
				return fmt.Errorf("entry %d of workspace %d has no body, but entry %d before it has", e.idx, m.ws, keptFrom)
			}
			leaves = append(leaves, e.hashes[0][:]...)
			continue
		}
		if keptFrom < 0 {
			keptFrom = e.idx
		}
		kept = append(kept, rows.Entry{Seq: e.seq, Time: e.written, Data: e.data})
	}
	first := m.cur[0].idx
	if len(leaves) > 0 {
		if err := m.s.insertRows(m.tx, "leaf_hashes(workspace_id, first, count, hashes)", 4,
			[]any{m.ws, first, len(leaves) / 32, leaves}); err != nil {
			return err
		}
	}
	if len(kept) > 0 {
		data, err := pack(kept)
		if err != nil {
			return err
		}
		if err := m.s.insertRows(m.tx, "body_rows(workspace_id, first, count, data)", 4,
			[]any{m.ws, keptFrom, len(kept), data}); err != nil {
			return err
		}
	}
	if last := m.cur[len(m.cur)-1]; (last.idx+1)%rows.Size == 0 {
		var blob []byte
		for _, h := range last.hashes[rows.Height:] {
			blob = append(blob, h[:]...)
		}
		if err := m.s.insertRows(m.tx, "row_hashes(workspace_id, row, hashes)", 3, []any{m.ws, rowOf(last.idx), blob}); err != nil {
			return err
		}
	}
	m.cur = m.cur[:0]
	return nil
}

func splitHashes(blob []byte) [][32]byte {
	var hs [][32]byte
	for i := 0; i+32 <= len(blob); i += 32 {
		hs = append(hs, [32]byte(blob[i:i+32]))
	}
	return hs
}

// eachRow runs query in tx and calls row for each row it returns.
func eachRow(tx *sql.Tx, row func(*sql.Rows) error, query string, args ...any) error {
	rs, err := tx.Query(query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := row(rs); err != nil {
			return err
		}
	}
	return rs.Err()
}

// workspacesIn lists, in order, the workspaces with rows in table.
func workspacesIn(tx *sql.Tx, table string) ([]int64, error) {
	var ws []int64
	err := eachRow(tx, func(rs *sql.Rows) error {
		var w int64
		if err := rs.Scan(&w); err != nil {
			return err
		}
		ws = append(ws, w)
		return nil
	}, `SELECT DISTINCT workspace_id FROM `+table+` ORDER BY workspace_id`)
	return ws, err
}

// moveRows moves the rows of each workspace with rows in table, with move
// and a rowMover of its own (flushed after), then runs drop (the SQL that
// drops the old tables).
func (s *Store) moveRows(tx *sql.Tx, table string, move func(*sql.Tx, *rowMover) error, drop string) error {
	ws, err := workspacesIn(tx, table)
	if err != nil {
		return err
	}
	for _, w := range ws {
		m := &rowMover{s: s, tx: tx, ws: w}
		if err := move(tx, m); err != nil {
			return err
		}
		if err := m.flush(); err != nil {
			return err
		}
	}
	_, err = tx.Exec(drop)
	return err
}

// moveEntriesTable packs the entries table of the first ledger builds (one
// row per entry, with its hashes and lease id) and drops it.
func (s *Store) moveEntriesTable(tx *sql.Tx) error {
	return s.moveRows(tx, "entries", moveEntries, `DROP TRIGGER IF EXISTS entries_no_update; DROP TRIGGER IF EXISTS entries_no_delete;
		DROP INDEX IF EXISTS entries_by_lease; DROP TABLE entries`)
}

// moveEntries moves one workspace's rows of the entries table.
func moveEntries(tx *sql.Tx, m *rowMover) error {
	w := m.ws
	for from := int64(0); ; {
		var batch []oldEntry
		var grants []any
		err := eachRow(tx, func(rs *sql.Rows) error {
			var e oldEntry
			var lease string
			var hashes []byte
			if err := rs.Scan(&e.idx, &e.seq, &lease, &e.data, &hashes); err != nil {
				return err
			}
			if e.data == nil {
				e.data = []byte{}
			}
			e.hashes = splitHashes(hashes)
			batch = append(batch, e)
			if id, ok := leaseKey(lease); ok {
				grants = append(grants, w, e.idx>>epochBits, id, e.idx)
			}
			return nil
		}, `SELECT idx, seq, coalesce(lease_id, ''), data, hashes FROM entries WHERE workspace_id = ? AND idx >= ? ORDER BY idx LIMIT 4096`, w, from)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := m.add(e); err != nil {
				return err
			}
		}
		for len(grants) > 0 {
			g := grants[:4]
			grants = grants[4:]
			if _, err := tx.Exec(`INSERT OR IGNORE INTO grant_index(workspace_id, epoch, lease, idx) VALUES(?, ?, ?, ?)`, g...); err != nil {
				return err
			}
		}
		if len(batch) < 4096 {
			break
		}
		from = batch[len(batch)-1].idx + 1
	}
	return nil
}

// moveUnpackedRows packs the rows of builds before packing (tables hashes
// and bodies, at most 32 entries a row, not laid on multiples of 32; bodies
// length-prefixed with their seqs) and drops them. Below a workspace's
// retention mark the bodies are gone: their leaf hashes are kept.
func (s *Store) moveUnpackedRows(tx *sql.Tx) error {
	return s.moveRows(tx, "hashes", moveUnpacked, `DROP TRIGGER IF EXISTS hashes_no_update; DROP TRIGGER IF EXISTS hashes_no_delete;
		DROP TRIGGER IF EXISTS bodies_no_update; DROP TRIGGER IF EXISTS bodies_kept_until_exported;
		DROP TABLE hashes; DROP TABLE bodies`)
}

// moveUnpacked moves one workspace's rows of the hashes and bodies tables.
func moveUnpacked(tx *sql.Tx, m *rowMover) error {
	w := m.ws
	var pending []oldEntry // bodies read ahead of the hashes, in order
	bodiesFrom := int64(0)
	bodiesDone := false
	for hashesFrom := int64(0); ; {
		type hrow struct {
			first, count int64
			hashes       []byte
		}
		var hrows []hrow
		err := eachRow(tx, func(rs *sql.Rows) error {
			var r hrow
			if err := rs.Scan(&r.first, &r.count, &r.hashes); err != nil {
				return err
			}
			hrows = append(hrows, r)
			return nil
		}, `SELECT first, count, hashes FROM hashes WHERE workspace_id = ? AND first >= ? ORDER BY first LIMIT 512`, w, hashesFrom)
		if err != nil {
			return err
		}
		for _, r := range hrows {
			all := splitHashes(r.hashes)
			for i := r.first; i < r.first+r.count; i++ {
				a, b := storedHashCount(i)-storedHashCount(r.first), storedHashCount(i+1)-storedHashCount(r.first)
				if b > int64(len(all)) {
					return fmt.Errorf("the hashes of entry %d of workspace %d are cut short", i, w)
				}
				e := oldEntry{idx: i, hashes: all[a:b]}
				// The body of entry i, if kept: read the bodies rows
				// ahead as far as i.
				for !bodiesDone && (len(pending) == 0 || pending[len(pending)-1].idx < i) {
					got, next, err := readUnpackedBodies(tx, w, bodiesFrom)
					if err != nil {
						return err
					}
					if len(got) == 0 {
						bodiesDone = true
						break
					}
					pending = append(pending, got...)
					bodiesFrom = next
				}
				for len(pending) > 0 && pending[0].idx < i {
					pending = pending[1:] // a body without hashes: cannot be
				}
				if len(pending) > 0 && pending[0].idx == i {
					e.seq, e.data, e.written = pending[0].seq, pending[0].data, pending[0].written
					pending = pending[1:]
				}
				if err := m.add(e); err != nil {
					return err
				}
			}
		}
		if len(hrows) < 512 {
			break
		}
		hashesFrom = hrows[len(hrows)-1].first + 1
	}
	return nil
}

// readUnpackedBodies reads the entries of up to 256 unpacked bodies rows
// of workspace ws from index from on, and where the next read starts.
func readUnpackedBodies(tx *sql.Tx, ws, from int64) ([]oldEntry, int64, error) {
	rs, err := tx.Query(`SELECT first, written_ms, data FROM bodies WHERE workspace_id = ? AND first >= ? ORDER BY first LIMIT 256`, ws, from)
	if err != nil {
		return nil, 0, err
	}
	defer rs.Close()
	var out []oldEntry
	next := from
	for rs.Next() {
		var first, written int64
		var data []byte
		if err := rs.Scan(&first, &written, &data); err != nil {
			return nil, 0, err
		}
		for i := first; len(data) > 0; i++ {
			seq, n := binary.Uvarint(data)
			if n <= 0 {
				return nil, 0, fmt.Errorf("the old ledger entry %d of workspace %d is damaged", i, ws)
			}
			data = data[n:]
			l, n := binary.Uvarint(data)
			if n <= 0 || uint64(len(data)-n) < l {
				return nil, 0, fmt.Errorf("the old ledger entry %d of workspace %d is damaged", i, ws)
			}
			out = append(out, oldEntry{idx: i, seq: int64(seq), data: data[n : n+int(l) : n+int(l)], written: written})
			data = data[n+int(l):]
		}
		next = first + 1
	}
	return out, next, rs.Err()
}
