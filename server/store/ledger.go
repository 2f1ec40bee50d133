package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// ledgerSchema is the ledger's: a file of its own, so that its writes never
// add to a command's commit. Entries are kept in rows of rows.Size, laid on
// multiples of it (a row ends where a multiple of rows.Size does; the last
// row of a workspace grows until it is full), each row's bodies packed and
// compressed by kernel/ledger/rows. Of the tree hashes, only what cannot be
// recomputed from a row is stored: a full row's subtree hash and the ones
// above it that its last entry completes (row_hashes, one small row per
// full row); leaf hashes and the subtrees inside a row are recomputed from
// its bodies, and kept (leaf_hashes) when retention drops the bodies. Each
// entry keeps the time it was written in its row (retention counts from
// it). One small row per grant serves the receipt route's look-up by lease
// id.
//
// Hashes, leaf hashes and grants are append-only (triggers refuse UPDATE and
// DELETE); a body row may only grow while it is not full, and lose entries
// only to retention, as a prefix below the workspace's export mark whose
// leaf hashes are kept. A workspace's position (the last logged command whose
// events are entries, and the tree size) moves in the same transaction as
// the entries it covers.
var ledgerSchema = `
CREATE TABLE IF NOT EXISTS position(
	workspace_id INTEGER PRIMARY KEY,
	seq INTEGER NOT NULL,
	size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS body_rows(
	workspace_id INTEGER NOT NULL,
	first INTEGER NOT NULL,
	count INTEGER NOT NULL,
	data BLOB NOT NULL,
	PRIMARY KEY(workspace_id, first));
CREATE TABLE IF NOT EXISTS row_hashes(
	workspace_id INTEGER NOT NULL,
	row INTEGER NOT NULL,
	hashes BLOB NOT NULL,
	PRIMARY KEY(workspace_id, row)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leaf_hashes(
	workspace_id INTEGER NOT NULL,
	first INTEGER NOT NULL,
	count INTEGER NOT NULL,
	hashes BLOB NOT NULL,
	PRIMARY KEY(workspace_id, first));
CREATE TABLE IF NOT EXISTS grant_index(
	workspace_id INTEGER NOT NULL,
	epoch INTEGER NOT NULL,
	lease INTEGER NOT NULL,
	idx INTEGER NOT NULL,
	PRIMARY KEY(workspace_id, epoch, lease, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS retention(
	workspace_id INTEGER PRIMARY KEY,
	exported INTEGER NOT NULL,
	dropped INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints(
	workspace_id INTEGER NOT NULL,
	size INTEGER NOT NULL,
	note BLOB NOT NULL,
	PRIMARY KEY(workspace_id, size)) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS body_rows_append_only BEFORE UPDATE ON body_rows
	WHEN NOT (NEW.workspace_id = OLD.workspace_id AND (
		(NEW.first = OLD.first AND NEW.count > OLD.count AND (OLD.first + OLD.count) % 32 != 0
			AND NEW.first / 32 = (NEW.first + NEW.count - 1) / 32)
		OR (NEW.first > OLD.first AND NEW.first + NEW.count = OLD.first + OLD.count
			AND NEW.first <= coalesce((SELECT exported FROM retention WHERE workspace_id = OLD.workspace_id), 0)
			AND EXISTS (SELECT 1 FROM leaf_hashes WHERE workspace_id = OLD.workspace_id AND first = OLD.first AND count = NEW.first - OLD.first))))
	BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only (the last row may grow; retention may drop an exported prefix, its leaf hashes kept)'); END;
CREATE TRIGGER IF NOT EXISTS body_rows_kept_until_exported BEFORE DELETE ON body_rows
	WHEN OLD.first + OLD.count > coalesce((SELECT exported FROM retention WHERE workspace_id = OLD.workspace_id), 0)
		OR NOT EXISTS (SELECT 1 FROM leaf_hashes WHERE workspace_id = OLD.workspace_id AND first = OLD.first AND count = OLD.count)
	BEGIN SELECT RAISE(ABORT, 'ledger entries are dropped only once exported, their leaf hashes kept'); END;
` + appendOnly("row_hashes", "ledger hashes are append-only", "ledger hashes are append-only") +
	appendOnly("leaf_hashes", "ledger hashes are append-only", "ledger hashes are append-only") +
	appendOnly("grant_index", "ledger grants are append-only", "ledger grants are append-only") +
	appendOnly("checkpoints", "checkpoints are kept as signed", "checkpoints are kept forever")

// appendOnly is the SQL of two triggers that refuse every UPDATE (with
// message onUpdate) and DELETE (onDelete) of table's rows.
func appendOnly(table, onUpdate, onDelete string) string {
	return "CREATE TRIGGER IF NOT EXISTS " + table + "_no_update BEFORE UPDATE ON " + table +
		"\n\tBEGIN SELECT RAISE(ABORT, '" + onUpdate + "'); END;\n" +
		"CREATE TRIGGER IF NOT EXISTS " + table + "_no_delete BEFORE DELETE ON " + table +
		"\n\tBEGIN SELECT RAISE(ABORT, '" + onDelete + "'); END;\n"
}

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
// WrittenMs is the time of the append, from which retention counts.
type LedgerAppend struct {
	Workspace int64
	From, To  LedgerPos
	Entries   []LedgerEntry
	HashStart int64
	Hashes    [][32]byte
	WrittenMs int64
}

// ErrLedgerMoved is returned when a ledger is not where an append expected
// it: nothing was written.
var ErrLedgerMoved = errors.New("the ledger's position is not the one the append started from")

// ErrGone is returned for entries whose bodies retention has dropped
// (their hashes, and so every proof, are kept).
var ErrGone = errors.New("the entry's body was dropped after its retention period, once exported")

// GoneError says which entries are gone: those below Kept.
type GoneError struct {
	Index, Kept int64
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("entry %d was dropped after its retention period, once exported (entries from %d are kept)", e.Index, e.Kept)
}

// Unwrap makes errors.Is(err, ErrGone) hold.
func (e *GoneError) Unwrap() error { return ErrGone }

// ledgerRead is the prepared statement of a ledger read (or of an
// append's statement, a multi-row insert among them), prepared on first
// use: reads such as a proof's ask a few rows each, and preparing costs
// more than running.
func (s *Store) ledgerRead(q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := s.ledgerReads[q]; st != nil {
		return st, nil
	}
	st, err := s.ldb.Prepare(q)
	if err != nil {
		return nil, fmt.Errorf("store: prepare a ledger read: %w", err)
	}
	if s.ledgerReads == nil {
		s.ledgerReads = map[string]*sql.Stmt{}
	}
	s.ledgerReads[q] = st
	return st, nil
}

const (
	qBodyRow  = `SELECT first, count, data FROM body_rows WHERE workspace_id = ? AND first <= ? ORDER BY first DESC LIMIT 1`
	qBodyRows = `SELECT first, data FROM body_rows WHERE workspace_id = ? AND first >= ? AND first < ? ORDER BY first`
	qDropped  = `SELECT dropped FROM retention WHERE workspace_id = ?`
	qGrant    = `SELECT idx FROM grant_index WHERE workspace_id = ? AND epoch = ? AND lease = ? ORDER BY idx DESC LIMIT 1`
	qEpoch    = `SELECT max(epoch) FROM grant_index WHERE workspace_id = ?`
	// The append's statements, run in its transaction (tx.Stmt).
	qPosFirst = `INSERT INTO position(workspace_id, seq, size) VALUES(?, ?, ?)
		ON CONFLICT(workspace_id) DO UPDATE SET seq = excluded.seq, size = excluded.size
		WHERE position.seq = 0 AND position.size = 0`
	qPosMove = `UPDATE position SET seq = ?, size = ? WHERE workspace_id = ? AND seq = ? AND size = ?`
	qLastRow = `SELECT first, count, data FROM body_rows WHERE workspace_id = ? AND first < ? AND first >= ? ORDER BY first DESC LIMIT 1`
	qGrowRow = `UPDATE body_rows SET count = ?, data = ? WHERE workspace_id = ? AND first = ?`
)

// SyncLedger makes every ledger transaction committed before it durable
// (ledger.db is written with synchronous=NORMAL: a commit is not synced,
// and a power cut may lose the newest ones): a WAL checkpoint, which syncs
// the WAL before it copies it into the database and the database after. It
// reports whether the checkpoint copied every frame; when a reader kept it
// from finishing, nothing is promised and the caller tries again later.
func (s *Store) SyncLedger(ctx context.Context) (bool, error) {
	var busy, frames, done int64
	if err := s.ldb.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil {
		return false, fmt.Errorf("store: sync the ledger: %w", err)
	}
	return busy == 0 && frames == done, nil
}

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
	tx, err := begin(s.ldb, "ledger append", s.opts.LedgerFault)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var grants []grantRow
	for _, a := range appends {
		var res sql.Result
		var st *sql.Stmt
		if a.From == (LedgerPos{}) {
			if st, err = s.ledgerRead(qPosFirst); err == nil {
				res, err = tx.Stmt(st).Exec(a.Workspace, a.To.Seq, a.To.Size)
			}
		} else {
			if st, err = s.ledgerRead(qPosMove); err == nil {
				res, err = tx.Stmt(st).Exec(a.To.Seq, a.To.Size, a.Workspace, a.From.Seq, a.From.Size)
			}
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
		for i, e := range a.Entries {
			if e.Index != a.From.Size+int64(i) {
				return fmt.Errorf("store: ledger of workspace %d: entry %d out of place", a.Workspace, e.Index)
			}
			if id, ok := leaseKey(e.LeaseID); ok {
				grants = append(grants, grantRow{a.Workspace, id, e.Index})
			}
		}
		if err := s.putEntries(tx, a.Workspace, a.Entries, a.HashStart, a.Hashes, a.WrittenMs); err != nil {
			return err
		}
	}
	// In key order: the look-up rows land in the index's pages one after
	// the other, not at random; and all in the newest epoch's part of the
	// index, so a write touches a bounded number of its pages however large
	// the ledger grows.
	slices.SortFunc(grants, func(a, b grantRow) int {
		return cmp.Or(cmp.Compare(a.ws, b.ws), cmp.Compare(a.idx>>epochBits, b.idx>>epochBits),
			cmp.Compare(a.lease, b.lease), cmp.Compare(a.idx, b.idx))
	})
	args := make([]any, 0, 4*min(len(grants), rowsPerInsert))
	for start := 0; start < len(grants); {
		chunk := grants[start : start+perInsert(len(grants)-start)]
		start += len(chunk)
		q := `INSERT OR IGNORE INTO grant_index(workspace_id, epoch, lease, idx) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", len(chunk)), ", ")
		st, err := s.stmt(s.ldb, &s.grantStmts, q, len(chunk))
		if err != nil {
			return err
		}
		args = args[:0]
		for _, g := range chunk {
			args = append(args, g.ws, g.idx>>epochBits, g.lease, g.idx)
		}
		if _, err := tx.Stmt(st).Exec(args...); err != nil {
			return fmt.Errorf("store: write the ledger's grants: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit ledger append: %w", err)
	}
	return nil
}

// grantRow is a row of the grant index: where a lease's grant is.
type grantRow struct{ ws, lease, idx int64 }

// epochBits splits the grant index into epochs of 65,536 entries: it is
// keyed by (workspace, epoch, lease id), so new grants (random lease ids)
// land only among the newest epoch's rows, and a look-up asks each epoch,
// newest first (a ledger of a million entries has 16).
const epochBits = 16

// leaseKey is the 64 bits of a kernel lease id ("lease_" and 16 hex
// digits) that key the grant index; ok is false for any other string.
func leaseKey(id string) (int64, bool) {
	hex, ok := strings.CutPrefix(id, "lease_")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return int64(v), true
}

// storedHashCount is how many tree hashes n entries store (tlog's
// StoredHashCount): 2n minus the ones in n.
func storedHashCount(n int64) int64 { return 2*n - int64(bits.OnesCount64(uint64(n))) }

// hashesOf is how many tree hashes appending entry n stores: one, and one
// more for each subtree it completes.
func hashesOf(n int64) int { return 1 + bits.TrailingZeros64(^uint64(n)) }

// hashHome is the entry whose append stored hash x, and its place among
// that entry's hashes.
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

// ledgerDropped is the index below which a workspace's entry bodies were
// dropped by retention (0 when none were).
func (s *Store) ledgerDropped(ctx context.Context, ws int64) (int64, error) {
	st, err := s.ledgerRead(qDropped)
	if err != nil {
		return 0, err
	}
	var d int64
	err = st.QueryRowContext(ctx, ws).Scan(&d)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: read the ledger retention of workspace %d: %w", ws, err)
	}
	return d, nil
}

// LedgerEntries reads up to count entries of a workspace's ledger from
// index start, in order; a *GoneError (errors.Is ErrGone) when start is
// below the entries retention has dropped.
func (s *Store) LedgerEntries(ctx context.Context, ws, start int64, count int) ([]LedgerEntry, error) {
	one, err := s.ledgerRead(qBodyRow)
	if err != nil {
		return nil, err
	}
	// The row that holds start (retention drops whole rows, oldest first:
	// when none does, its body may be gone).
	var first, n int64
	var data []byte
	err = one.QueryRowContext(ctx, ws, start).Scan(&first, &n, &data)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: read ledger entries of workspace %d: %w", ws, err)
	}
	if err != nil || start >= first+n {
		dropped, err := s.ledgerDropped(ctx, ws)
		if err != nil {
			return nil, err
		}
		if start < dropped {
			return nil, &GoneError{Index: start, Kept: dropped}
		}
		return nil, nil
	}
	out, err := unpackEntries(nil, ws, first, start, count, data)
	if err != nil || len(out) == count {
		return out, err
	}
	many, err := s.ledgerRead(qBodyRows)
	if err != nil {
		return nil, err
	}
	rows, err := many.QueryContext(ctx, ws, first+n, start+int64(count))
	if err != nil {
		return nil, fmt.Errorf("store: read ledger entries of workspace %d: %w", ws, err)
	}
	defer rows.Close()
	for rows.Next() && len(out) < count {
		var f int64
		var data []byte
		if err := rows.Scan(&f, &data); err != nil {
			return nil, fmt.Errorf("store: read ledger entries of workspace %d: %w", ws, err)
		}
		if want := start + int64(len(out)); f > want {
			return nil, fmt.Errorf("store: ledger of workspace %d has no entry %d", ws, want)
		}
		if out, err = unpackEntries(out, ws, f, start, count, data); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// LedgerLease finds the grant entry of a lease (the latest, should an id
// repeat); ok is false when there is none, and the error a *GoneError
// when its body was dropped.
func (s *Store) LedgerLease(ctx context.Context, ws int64, leaseID string) (e LedgerEntry, ok bool, err error) {
	key, valid := leaseKey(leaseID)
	if !valid {
		return e, false, nil
	}
	top, err := s.ledgerRead(qEpoch)
	if err != nil {
		return e, false, err
	}
	st, err := s.ledgerRead(qGrant)
	if err != nil {
		return e, false, err
	}
	var newest sql.NullInt64
	if err := top.QueryRowContext(ctx, ws).Scan(&newest); err != nil {
		return e, false, fmt.Errorf("store: find the grant of lease %s in workspace %d: %w", leaseID, ws, err)
	}
	idx := int64(-1)
	for epoch := newest.Int64; newest.Valid && epoch >= 0 && idx < 0; epoch-- {
		err = st.QueryRowContext(ctx, ws, epoch, key).Scan(&idx)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return e, false, fmt.Errorf("store: find the grant of lease %s in workspace %d: %w", leaseID, ws, err)
		}
	}
	if idx < 0 {
		return e, false, nil
	}
	es, err := s.LedgerEntries(ctx, ws, idx, 1)
	if err != nil {
		return e, true, err
	}
	if len(es) != 1 {
		return e, false, fmt.Errorf("store: the grant of lease %s in workspace %d is entry %d, which is not there", leaseID, ws, idx)
	}
	e = es[0]
	e.LeaseID = leaseID
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
	var out []LoggedEvents
	err := s.readLog(ctx, ws, afterSeq, func(x logged) bool {
		if len(out) == limit {
			return false
		}
		out = append(out, LoggedEvents{Seq: x.Seq, Events: x.Events, Known: x.known})
		return true
	})
	return out, err
}

// lastSeqSQL is the last seq logged of workspace ?1, in log or in
// log_runs; 0 when none.
const lastSeqSQL = `SELECT max(COALESCE((SELECT max(seq) FROM log WHERE workspace_id = ?1), 0),
	COALESCE((SELECT max(last_seq) FROM log_runs WHERE workspace_id = ?1), 0))`

// LastSeq is the last logged command of a workspace (0 when none is logged,
// or the snapshot's seq when the log was trimmed to it).
func (s *Store) LastSeq(ctx context.Context, ws int64) (int64, error) {
	var seq sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT NULLIF((`+lastSeqSQL+`), 0)`, ws).Scan(&seq); err != nil {
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

// LedgerRetention is where a workspace's retention stands: Exported is
// the tree size its last export covered (bodies below it may be dropped),
// Dropped the index below which bodies were dropped.
type LedgerRetention struct {
	Exported, Dropped int64
}

// LedgerRetentionOf reads a workspace's retention marks (zero when it has
// none).
func (s *Store) LedgerRetentionOf(ctx context.Context, ws int64) (LedgerRetention, error) {
	var r LedgerRetention
	err := s.ldb.QueryRowContext(ctx, `SELECT exported, dropped FROM retention WHERE workspace_id = ?`, ws).Scan(&r.Exported, &r.Dropped)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("store: read the ledger retention of workspace %d: %w", ws, err)
	}
	return r, nil
}

// MarkExported records that a workspace's entries below size were
// exported: retention may drop their bodies. The mark only rises.
func (s *Store) MarkExported(ctx context.Context, ws, size int64) error {
	if _, err := s.ldb.ExecContext(ctx, `INSERT INTO retention(workspace_id, exported, dropped) VALUES(?, ?, 0)
		ON CONFLICT(workspace_id) DO UPDATE SET exported = max(exported, excluded.exported)`, ws, size); err != nil {
		return fmt.Errorf("store: mark the ledger of workspace %d exported up to %d: %w", ws, size, err)
	}
	return nil
}
