package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// LedgerFileName is the ledger's database inside the data directory.
const LedgerFileName = "ledger.db"

// ledgerSchema is the ledger's: a file of its own, so that its writes never
// add to a command's commit. Entries are append-only (triggers refuse
// UPDATE and DELETE); each row keeps, beside the entry's bytes, the tree
// hashes stored when it was appended (tlog's StoredHashes: one to
// 1+log2(n), concatenated), so an append is one row per entry. A
// workspace's position (the last logged command whose events are entries,
// and the tree size) moves in the same transaction as the entries it
// covers.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS position(
	workspace_id INTEGER PRIMARY KEY,
	seq INTEGER NOT NULL,
	size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS entries(
	workspace_id INTEGER NOT NULL,
	idx INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	lease_id TEXT,
	data BLOB NOT NULL,
	hashes BLOB NOT NULL,
	PRIMARY KEY(workspace_id, idx)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_lease ON entries(workspace_id, lease_id) WHERE lease_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS checkpoints(
	workspace_id INTEGER NOT NULL,
	size INTEGER NOT NULL,
	note BLOB NOT NULL,
	PRIMARY KEY(workspace_id, size)) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
	BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
	BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
`

// LedgerPos is how far a workspace's ledger has come: Seq is the last
// logged command whose events are all entries, Size the number of entries.
type LedgerPos struct {
	Seq, Size int64
}

// LedgerEntry is one entry of a workspace's ledger.
type LedgerEntry struct {
	Index   int64
	Seq     int64  // the logged command that emitted it
	LeaseID string // for a grant (coordination.lease), its lease id
	Data    []byte // the event's bytes, exactly as the kernel emitted them
}

// LedgerAppend moves one workspace's ledger from From to To, adding
// Entries (indexes From.Size...) and Hashes (the stored hashes from index
// HashStart on, in tlog's order: each entry's, then the next one's).
type LedgerAppend struct {
	Workspace int64
	From, To  LedgerPos
	Entries   []LedgerEntry
	HashStart int64
	Hashes    [][32]byte
}

// ErrLedgerMoved is returned when a ledger is not where an append expected
// it: nothing was written.
var ErrLedgerMoved = errors.New("the ledger's position is not the one the append started from")

// LedgerPos reads a workspace's ledger position (zero when it has none).
func (s *Store) LedgerPos(ctx context.Context, ws int64) (LedgerPos, bool, error) {
	var p LedgerPos
	err := s.ldb.QueryRowContext(ctx, `SELECT seq, size FROM position WHERE workspace_id = ?`, ws).Scan(&p.Seq, &p.Size)
	if errors.Is(err, sql.ErrNoRows) {
		return LedgerPos{}, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("store: read ledger position of workspace %d: %w", ws, err)
	}
	return p, true, nil
}

// AppendLedger writes appends in one transaction of the ledger database:
// all or nothing. Each append's position must still be its From
// (ErrLedgerMoved otherwise), so an entry is never written twice.
func (s *Store) AppendLedger(appends []LedgerAppend) error {
	tx, err := s.ldb.Begin()
	if err != nil {
		return fmt.Errorf("store: begin ledger append: %w", err)
	}
	defer tx.Rollback()
	if s.opts.LedgerFault != nil {
		if err := s.opts.LedgerFault(); err != nil {
			return fmt.Errorf("store: ledger append: %w", err)
		}
	}
	for _, a := range appends {
		var res sql.Result
		if a.From == (LedgerPos{}) {
			res, err = tx.Exec(`INSERT INTO position(workspace_id, seq, size) VALUES(?, ?, ?)
				ON CONFLICT(workspace_id) DO UPDATE SET seq = excluded.seq, size = excluded.size
				WHERE position.seq = 0 AND position.size = 0`, a.Workspace, a.To.Seq, a.To.Size)
		} else {
			res, err = tx.Exec(`UPDATE position SET seq = ?, size = ? WHERE workspace_id = ? AND seq = ? AND size = ?`,
				a.To.Seq, a.To.Size, a.Workspace, a.From.Seq, a.From.Size)
		}
		if err != nil {
			return fmt.Errorf("store: move ledger of workspace %d: %w", a.Workspace, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("store: ledger of workspace %d: %w", a.Workspace, ErrLedgerMoved)
		}
		if a.From.Size+int64(len(a.Entries)) != a.To.Size {
			return fmt.Errorf("store: ledger of workspace %d: %d entries do not take size %d to %d", a.Workspace, len(a.Entries), a.From.Size, a.To.Size)
		}
		if a.HashStart != storedHashCount(a.From.Size) || int64(len(a.Hashes)) != storedHashCount(a.To.Size)-a.HashStart {
			return fmt.Errorf("store: ledger of workspace %d: %d hashes from %d do not fit entries %d to %d", a.Workspace, len(a.Hashes), a.HashStart, a.From.Size, a.To.Size)
		}
		h := 0
		for start := 0; start < len(a.Entries); start += rowsPerInsert {
			chunk := a.Entries[start:min(start+rowsPerInsert, len(a.Entries))]
			args := make([]any, 0, 6*len(chunk))
			for i, e := range chunk {
				if e.Index != a.From.Size+int64(start+i) {
					return fmt.Errorf("store: ledger of workspace %d: entry %d out of place", a.Workspace, e.Index)
				}
				var lease any
				if e.LeaseID != "" {
					lease = e.LeaseID
				}
				n := hashesOf(e.Index)
				blob := make([]byte, 0, 32*n)
				for _, x := range a.Hashes[h : h+n] {
					blob = append(blob, x[:]...)
				}
				h += n
				args = append(args, a.Workspace, e.Index, e.Seq, lease, e.Data, blob)
			}
			q := `INSERT INTO entries(workspace_id, idx, seq, lease_id, data, hashes) VALUES ` +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?), ", len(chunk)), ", ")
			st, err := s.stmt(s.ldb, &s.entryStmts, q, len(chunk))
			if err != nil {
				return err
			}
			if _, err := tx.Stmt(st).Exec(args...); err != nil {
				return fmt.Errorf("store: write ledger entries of workspace %d: %w", a.Workspace, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit ledger append: %w", err)
	}
	return nil
}

// storedHashCount is how many tree hashes n entries store (tlog's
// StoredHashCount): 2n minus the ones in n.
func storedHashCount(n int64) int64 { return 2*n - int64(bits.OnesCount64(uint64(n))) }

// hashesOf is how many tree hashes appending entry n stores: one, and one
// more for each subtree it completes.
func hashesOf(n int64) int { return 1 + bits.TrailingZeros64(^uint64(n)) }

// hashHome is the entry whose row keeps stored hash x, and its place there.
func hashHome(x int64) (entry int64, at int) {
	lo, hi := int64(0), x // storedHashCount(entry) <= x < storedHashCount(entry+1)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if storedHashCount(mid) <= x {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, int(x - storedHashCount(lo))
}

// LedgerHashes reads stored hashes of a workspace's tree by their tlog
// index.
func (s *Store) LedgerHashes(ctx context.Context, ws int64, indexes []int64) ([][32]byte, error) {
	out := make([][32]byte, len(indexes))
	if len(indexes) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(indexes)+1)
	args = append(args, ws)
	for _, x := range indexes {
		e, _ := hashHome(x)
		args = append(args, e)
	}
	rows, err := s.ldb.QueryContext(ctx, `SELECT idx, hashes FROM entries WHERE workspace_id = ? AND idx IN (`+
		strings.TrimSuffix(strings.Repeat("?, ", len(indexes)), ", ")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
	}
	defer rows.Close()
	got := make(map[int64][]byte, len(indexes))
	for rows.Next() {
		var e int64
		var h []byte
		if err := rows.Scan(&e, &h); err != nil {
			return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
		}
		got[e] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
	}
	for i, x := range indexes {
		e, at := hashHome(x)
		h, ok := got[e]
		if !ok || len(h) < 32*(at+1) {
			return nil, fmt.Errorf("store: ledger of workspace %d has no stored hash %d", ws, x)
		}
		out[i] = [32]byte(h[32*at : 32*at+32])
	}
	return out, nil
}

// LedgerEntries reads up to count entries of a workspace's ledger from
// index start, in order.
func (s *Store) LedgerEntries(ctx context.Context, ws, start int64, count int) ([]LedgerEntry, error) {
	rows, err := s.ldb.QueryContext(ctx, `SELECT idx, seq, coalesce(lease_id, ''), data FROM entries
		WHERE workspace_id = ? AND idx >= ? ORDER BY idx LIMIT ?`, ws, start, count)
	if err != nil {
		return nil, fmt.Errorf("store: read ledger entries of workspace %d: %w", ws, err)
	}
	defer rows.Close()
	var out []LedgerEntry
	for rows.Next() {
		var e LedgerEntry
		if err := rows.Scan(&e.Index, &e.Seq, &e.LeaseID, &e.Data); err != nil {
			return nil, fmt.Errorf("store: read ledger entries of workspace %d: %w", ws, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// LedgerLease finds the grant entry of a lease (the latest, should an id
// repeat); ok is false when there is none.
func (s *Store) LedgerLease(ctx context.Context, ws int64, leaseID string) (e LedgerEntry, ok bool, err error) {
	// INDEXED BY: without statistics the planner would walk the table
	// backwards for ORDER BY idx DESC.
	err = s.ldb.QueryRowContext(ctx, `SELECT idx, seq, lease_id, data FROM entries INDEXED BY entries_by_lease
		WHERE workspace_id = ? AND lease_id = ? ORDER BY idx DESC LIMIT 1`, ws, leaseID).Scan(&e.Index, &e.Seq, &e.LeaseID, &e.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, fmt.Errorf("store: find the grant of lease %s in workspace %d: %w", leaseID, ws, err)
	}
	return e, true, nil
}

// SaveCheckpoint keeps a signed checkpoint of a workspace's tree of size
// size (once: a second one of the same size is ignored).
func (s *Store) SaveCheckpoint(ctx context.Context, ws, size int64, note []byte) error {
	if _, err := s.ldb.ExecContext(ctx, `INSERT OR IGNORE INTO checkpoints(workspace_id, size, note) VALUES(?, ?, ?)`,
		ws, size, note); err != nil {
		return fmt.Errorf("store: save checkpoint %d of workspace %d: %w", size, ws, err)
	}
	return nil
}

// LatestCheckpoint reads the signed checkpoint of the largest tree of a
// workspace; ok is false when none was signed yet.
func (s *Store) LatestCheckpoint(ctx context.Context, ws int64) (size int64, note []byte, ok bool, err error) {
	err = s.ldb.QueryRowContext(ctx, `SELECT size, note FROM checkpoints WHERE workspace_id = ? ORDER BY size DESC LIMIT 1`, ws).Scan(&size, &note)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("store: read the latest checkpoint of workspace %d: %w", ws, err)
	}
	return size, note, true, nil
}

// LoggedEvents are the events one logged command emitted.
type LoggedEvents struct {
	Seq    int64
	Events []byte // the kernel's JSON array; empty when none
	Known  bool   // false for a row written before the log kept events
}

// LogEvents reads the events of a workspace's logged commands after seq
// afterSeq, in order, at most limit commands.
func (s *Store) LogEvents(ctx context.Context, ws, afterSeq int64, limit int) ([]LoggedEvents, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, events FROM log WHERE workspace_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
		ws, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("store: read the logged events of workspace %d: %w", ws, err)
	}
	defer rows.Close()
	var out []LoggedEvents
	for rows.Next() {
		var e LoggedEvents
		var ev []byte
		if err := rows.Scan(&e.Seq, &ev); err != nil {
			return nil, fmt.Errorf("store: read the logged events of workspace %d: %w", ws, err)
		}
		e.Events, e.Known = ev, ev != nil
		out = append(out, e)
	}
	return out, rows.Err()
}

// LastSeq is the last logged command of a workspace (0 when none is logged,
// or the snapshot's seq when the log was trimmed to it).
func (s *Store) LastSeq(ctx context.Context, ws int64) (int64, error) {
	var seq sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT max(seq) FROM log WHERE workspace_id = ?`, ws).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store: read the last seq of workspace %d: %w", ws, err)
	}
	if seq.Valid {
		return seq.Int64, nil
	}
	var snap sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT seq FROM snapshots WHERE workspace_id = ?`, ws).Scan(&snap)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: read the snapshot seq of workspace %d: %w", ws, err)
	}
	return snap.Int64, nil
}
