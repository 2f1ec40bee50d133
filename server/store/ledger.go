package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// LedgerFileName is the ledger's database inside the data directory.
const LedgerFileName = "ledger.db"

// ledgerSchema is the ledger's: a file of its own, so that its writes never
// add to a command's commit. Entries and hashes are append-only (triggers
// refuse UPDATE and DELETE); a workspace's position (the last logged
// command whose events are entries, and the tree size) moves in the same
// transaction as the entries it covers.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS ledger_state(
	workspace_id INTEGER PRIMARY KEY,
	seq INTEGER NOT NULL,
	size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_entries(
	workspace_id INTEGER NOT NULL,
	idx INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	lease_id TEXT,
	data BLOB NOT NULL,
	PRIMARY KEY(workspace_id, idx)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ledger_entries_lease ON ledger_entries(workspace_id, lease_id) WHERE lease_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS ledger_hashes(
	workspace_id INTEGER NOT NULL,
	hidx INTEGER NOT NULL,
	hash BLOB NOT NULL,
	PRIMARY KEY(workspace_id, hidx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledger_checkpoints(
	workspace_id INTEGER NOT NULL,
	size INTEGER NOT NULL,
	note BLOB NOT NULL,
	PRIMARY KEY(workspace_id, size)) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS ledger_entries_no_update BEFORE UPDATE ON ledger_entries
	BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_entries_no_delete BEFORE DELETE ON ledger_entries
	BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_hashes_no_update BEFORE UPDATE ON ledger_hashes
	BEGIN SELECT RAISE(ABORT, 'ledger hashes are append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_hashes_no_delete BEFORE DELETE ON ledger_hashes
	BEGIN SELECT RAISE(ABORT, 'ledger hashes are append-only'); END;
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
// Entries (indexes From.Size...) and Hashes (stored hash indexes HashStart...).
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
	err := s.ldb.QueryRowContext(ctx, `SELECT seq, size FROM ledger_state WHERE workspace_id = ?`, ws).Scan(&p.Seq, &p.Size)
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
			res, err = tx.Exec(`INSERT INTO ledger_state(workspace_id, seq, size) VALUES(?, ?, ?)
				ON CONFLICT(workspace_id) DO UPDATE SET seq = excluded.seq, size = excluded.size
				WHERE ledger_state.seq = 0 AND ledger_state.size = 0`, a.Workspace, a.To.Seq, a.To.Size)
		} else {
			res, err = tx.Exec(`UPDATE ledger_state SET seq = ?, size = ? WHERE workspace_id = ? AND seq = ? AND size = ?`,
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
		for start := 0; start < len(a.Entries); start += rowsPerInsert {
			chunk := a.Entries[start:min(start+rowsPerInsert, len(a.Entries))]
			args := make([]any, 0, 5*len(chunk))
			for i, e := range chunk {
				if e.Index != a.From.Size+int64(start+i) {
					return fmt.Errorf("store: ledger of workspace %d: entry %d out of place", a.Workspace, e.Index)
				}
				var lease any
				if e.LeaseID != "" {
					lease = e.LeaseID
				}
				args = append(args, a.Workspace, e.Index, e.Seq, lease, e.Data)
			}
			q := `INSERT INTO ledger_entries(workspace_id, idx, seq, lease_id, data) VALUES ` +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", len(chunk)), ", ")
			if _, err := tx.Exec(q, args...); err != nil {
				return fmt.Errorf("store: write ledger entries of workspace %d: %w", a.Workspace, err)
			}
		}
		for start := 0; start < len(a.Hashes); start += rowsPerInsert {
			chunk := a.Hashes[start:min(start+rowsPerInsert, len(a.Hashes))]
			args := make([]any, 0, 3*len(chunk))
			for i, h := range chunk {
				args = append(args, a.Workspace, a.HashStart+int64(start+i), h[:])
			}
			q := `INSERT INTO ledger_hashes(workspace_id, hidx, hash) VALUES ` +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(chunk)), ", ")
			if _, err := tx.Exec(q, args...); err != nil {
				return fmt.Errorf("store: write ledger hashes of workspace %d: %w", a.Workspace, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit ledger append: %w", err)
	}
	return nil
}

// LedgerHashes reads stored hashes of a workspace's tree by index.
func (s *Store) LedgerHashes(ctx context.Context, ws int64, indexes []int64) ([][32]byte, error) {
	out := make([][32]byte, len(indexes))
	if len(indexes) == 0 {
		return out, nil
	}
	args := make([]any, 0, len(indexes)+1)
	args = append(args, ws)
	for _, x := range indexes {
		args = append(args, x)
	}
	rows, err := s.ldb.QueryContext(ctx, `SELECT hidx, hash FROM ledger_hashes WHERE workspace_id = ? AND hidx IN (`+
		strings.TrimSuffix(strings.Repeat("?, ", len(indexes)), ", ")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
	}
	defer rows.Close()
	got := make(map[int64][]byte, len(indexes))
	for rows.Next() {
		var x int64
		var h []byte
		if err := rows.Scan(&x, &h); err != nil {
			return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
		}
		got[x] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read ledger hashes of workspace %d: %w", ws, err)
	}
	for i, x := range indexes {
		h, ok := got[x]
		if !ok || len(h) != 32 {
			return nil, fmt.Errorf("store: ledger of workspace %d has no stored hash %d", ws, x)
		}
		out[i] = [32]byte(h)
	}
	return out, nil
}

// LedgerEntries reads up to count entries of a workspace's ledger from
// index start, in order.
func (s *Store) LedgerEntries(ctx context.Context, ws, start int64, count int) ([]LedgerEntry, error) {
	rows, err := s.ldb.QueryContext(ctx, `SELECT idx, seq, coalesce(lease_id, ''), data FROM ledger_entries
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
	err = s.ldb.QueryRowContext(ctx, `SELECT idx, seq, lease_id, data FROM ledger_entries
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
	if _, err := s.ldb.ExecContext(ctx, `INSERT OR IGNORE INTO ledger_checkpoints(workspace_id, size, note) VALUES(?, ?, ?)`,
		ws, size, note); err != nil {
		return fmt.Errorf("store: save checkpoint %d of workspace %d: %w", size, ws, err)
	}
	return nil
}

// LatestCheckpoint reads the signed checkpoint of the largest tree of a
// workspace; ok is false when none was signed yet.
func (s *Store) LatestCheckpoint(ctx context.Context, ws int64) (size int64, note []byte, ok bool, err error) {
	err = s.ldb.QueryRowContext(ctx, `SELECT size, note FROM ledger_checkpoints WHERE workspace_id = ? ORDER BY size DESC LIMIT 1`, ws).Scan(&size, &note)
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
