package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The data folder's databases in the order CopyDatabases copies them: the
// ones derived from the command log first (events, the ledger), then the
// snapshots, then leaseplane.db with the log itself. Each copy is one
// read transaction of its file, so it is consistent in itself; the order
// makes the files consistent with each other: what is derived from the
// log, or a snapshot of it, is copied before the log, so it never covers a
// command the copied log lacks (the ledger is never ahead of the log, no
// snapshot is newer than the log's last command, and no event belongs to
// a command the copied log does not have). The log rows between them are
// there too, because trimming is held meanwhile (HoldLogTrim).
var BackupOrder = []string{EventsFileName, LedgerFileName, SnapshotsFileName, FileName}

// backupHoldPrefix starts the meta rows that hold log trimming, one per
// backup under way (the prefix, then a random id): each row's value is the
// Unix time in ms (SQLite's own clock, so every process on the machine
// reads the same) until which no process trims the log. Two backups at
// once each hold and release their own row.
const backupHoldPrefix = "backup_hold_until_ms:"

// nowMsSQL is SQLite's clock in Unix milliseconds.
const nowMsSQL = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// trimHeldSQL is true while a backup holds log trimming.
const trimHeldSQL = `EXISTS (SELECT 1 FROM meta WHERE key >= '` + backupHoldPrefix + `' AND key < '` + backupHoldPrefix + `~'
	AND CAST(value AS INTEGER) > ` + nowMsSQL + `)`

// HoldLogTrim stops every process that has this data folder open from
// trimming the command log for d, or until release is called: a backup
// copies the derived files before the log, and the log rows they still
// need must be there when the log is copied. A hold that is never
// released (a backup killed midway) lapses by itself; meanwhile the log
// only grows a little.
func (s *Store) HoldLogTrim(d time.Duration) (release func() error, err error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("store: hold log trimming for a backup: %w", err)
	}
	key := backupHoldPrefix + hex.EncodeToString(id[:])
	if _, err := s.db.Exec(`INSERT INTO meta(key, value) VALUES(?, CAST(`+nowMsSQL+` + ? AS TEXT))`, key, d.Milliseconds()); err != nil {
		return nil, fmt.Errorf("store: hold log trimming for a backup: %w", err)
	}
	return func() error {
		if _, err := s.db.Exec(`DELETE FROM meta WHERE key = ?`, key); err != nil {
			return fmt.Errorf("store: release the backup's hold on log trimming: %w", err)
		}
		return nil
	}, nil
}

// LogTrimHeld reports whether a backup holds log trimming now.
func (s *Store) LogTrimHeld() (bool, error) {
	var held bool
	if err := s.db.QueryRow(`SELECT ` + trimHeldSQL).Scan(&held); err != nil {
		return false, fmt.Errorf("store: read the backup's hold on log trimming: %w", err)
	}
	return held, nil
}

// CopyDatabases writes a consistent copy of the data folder's four SQLite
// files into dir (which must exist; the files must not), while the plane
// may be running and writing: each with VACUUM INTO, a read transaction
// that never blocks the writer, in BackupOrder, with log trimming held
// meanwhile. Each copy is synced to disk before it returns.
func (s *Store) CopyDatabases(ctx context.Context, dir string) error {
	release, err := s.HoldLogTrim(time.Hour)
	if err != nil {
		return err
	}
	defer release()
	dbs := map[string]*sql.DB{EventsFileName: s.edb, LedgerFileName: s.ldb, SnapshotsFileName: s.sdb, FileName: s.db}
	for _, name := range BackupOrder {
		out := filepath.Join(dir, name)
		// Made empty first, so that the copy has mode 0600 whatever the
		// umask: it holds key hashes (VACUUM INTO accepts an empty file).
		f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("store: back up %s: %w", name, err)
		}
		f.Close()
		if _, err := dbs[name].ExecContext(ctx, `VACUUM INTO ?`, out); err != nil {
			return fmt.Errorf("store: back up %s into %s: %w", name, out, err)
		}
		if err := syncFile(out); err != nil {
			return fmt.Errorf("store: back up %s: %w", name, err)
		}
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CheckIntegrity runs SQLite's integrity check on each database; a
// restore refuses a damaged copy.
func (s *Store) CheckIntegrity(ctx context.Context) error {
	for _, d := range []struct {
		name string
		db   *sql.DB
	}{{FileName, s.db}, {SnapshotsFileName, s.sdb}, {LedgerFileName, s.ldb}, {EventsFileName, s.edb}} {
		var res string
		if err := d.db.QueryRowContext(ctx, `PRAGMA integrity_check(1)`).Scan(&res); err != nil {
			return fmt.Errorf("store: check %s: %w", d.name, err)
		}
		if res != "ok" {
			return fmt.Errorf("store: %s is damaged: %s", d.name, res)
		}
	}
	return nil
}

// The fence raise of a restored data folder (meta rows): every workspace's
// fence counter is raised, once, on its first load after the restore, to
// at least its counter plus fenceRaiseKey and at least fenceFloorKey, so
// that no fence the lost plane handed out after the backup is handed out
// again. Workspaces made after the restore are raised too on their first
// load: the lost plane may have had one of the same name.
const (
	fenceRaiseKey = "fence_raise"
	fenceFloorKey = "fence_floor"
)

const fenceSchema = `
CREATE TABLE IF NOT EXISTS fence_raised(
	workspace_id INTEGER PRIMARY KEY,
	from_fence INTEGER NOT NULL,
	to_fence INTEGER NOT NULL,
	at_ms INTEGER NOT NULL);
`

// FenceRaise is how a restored data folder raises each workspace's fence
// counter: to at least Floor, and at least Raise above what it was.
type FenceRaise struct {
	Raise, Floor int64
}

// SetFenceRaise records, in a data folder just restored, the raise every
// workspace's fence counter gets on its first load (the server's
// raiseFences). A folder restored from a backup of a restored folder adds
// its raise to the one recorded there, and takes the higher floor, and
// applies them to every workspace again (it returns the raise recorded): a workspace that had not been
// loaded since the first restore still needs the first raise, and one
// that had is raised more than it needs, which is harmless.
func (s *Store) SetFenceRaise(r FenceRaise) (FenceRaise, error) {
	if r.Raise < 0 || r.Floor < 0 {
		return FenceRaise{}, errors.New("store: a fence raise and floor are not negative")
	}
	tx, err := s.db.Begin()
	if err != nil {
		return FenceRaise{}, fmt.Errorf("store: record the fence raise: %w", err)
	}
	defer tx.Rollback()
	var oldRaise, oldFloor sql.NullString
	if err := tx.QueryRow(`SELECT (SELECT value FROM meta WHERE key = ?), (SELECT value FROM meta WHERE key = ?)`,
		fenceRaiseKey, fenceFloorKey).Scan(&oldRaise, &oldFloor); err != nil {
		return FenceRaise{}, fmt.Errorf("store: read the fence raise: %w", err)
	}
	if oldRaise.Valid {
		n, err := strconv.ParseInt(oldRaise.String, 10, 64)
		if err != nil || n < 0 {
			return FenceRaise{}, fmt.Errorf("store: the recorded fence raise %q does not read", oldRaise.String)
		}
		r.Raise += n
	}
	if oldFloor.Valid {
		n, err := strconv.ParseInt(oldFloor.String, 10, 64)
		if err != nil {
			return FenceRaise{}, fmt.Errorf("store: the recorded fence floor %q does not read", oldFloor.String)
		}
		r.Floor = max(r.Floor, n)
	}
	for _, q := range []struct {
		q    string
		args []any
	}{
		{`DELETE FROM fence_raised`, nil},
		{`INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`,
			[]any{fenceRaiseKey, strconv.FormatInt(r.Raise, 10)}},
		{`INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`,
			[]any{fenceFloorKey, strconv.FormatInt(r.Floor, 10)}},
		// the holds of the backup itself, copied with it
		{`DELETE FROM meta WHERE key >= ? AND key < ?`, []any{backupHoldPrefix, backupHoldPrefix + "~"}},
	} {
		if _, err := tx.Exec(q.q, q.args...); err != nil {
			return FenceRaise{}, fmt.Errorf("store: record the fence raise: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return FenceRaise{}, fmt.Errorf("store: record the fence raise: %w", err)
	}
	return r, nil
}

// PendingFenceRaise reports the raise a workspace's fence counter is still
// to get (ok false when none: not a restored folder, or already raised).
func (s *Store) PendingFenceRaise(ctx context.Context, ws int64) (r FenceRaise, ok bool, err error) {
	var raise, floor sql.NullString
	var done bool
	err = s.db.QueryRowContext(ctx, `SELECT
		(SELECT value FROM meta WHERE key = ?), (SELECT value FROM meta WHERE key = ?),
		EXISTS (SELECT 1 FROM fence_raised WHERE workspace_id = ?)`, fenceRaiseKey, fenceFloorKey, ws).Scan(&raise, &floor, &done)
	if err != nil {
		return r, false, fmt.Errorf("store: read the fence raise of workspace %d: %w", ws, err)
	}
	if done || !raise.Valid {
		return r, false, nil
	}
	if r.Raise, err = strconv.ParseInt(raise.String, 10, 64); err == nil && floor.Valid {
		r.Floor, err = strconv.ParseInt(floor.String, 10, 64)
	}
	if err != nil {
		return r, false, fmt.Errorf("store: the fence raise of this data folder does not read: %w", err)
	}
	return r, true, nil
}

// FenceRaised records that a workspace's fence counter went from from to
// to: its raise is done.
func (s *Store) FenceRaised(ws, from, to, nowMs int64) error {
	if _, err := s.db.Exec(`INSERT OR REPLACE INTO fence_raised(workspace_id, from_fence, to_fence, at_ms) VALUES(?, ?, ?, ?)`,
		ws, from, to, nowMs); err != nil {
		return fmt.Errorf("store: record the fence raise of workspace %d: %w", ws, err)
	}
	return nil
}

// CheckpointAt reads the signed checkpoint a workspace's ledger kept for
// its tree of size size; ok is false when none was signed at that size.
func (s *Store) CheckpointAt(ctx context.Context, ws, size int64) (note []byte, ok bool, err error) {
	err = s.ldb.QueryRowContext(ctx, `SELECT note FROM checkpoints WHERE workspace_id = ? AND size = ?`, ws, size).Scan(&note)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: read checkpoint %d of workspace %d: %w", size, ws, err)
	}
	return note, true, nil
}

// RaisedFence reads how a workspace's fence counter was raised after a
// restore: from and to; ok is false when it was not.
func (s *Store) RaisedFence(ctx context.Context, ws int64) (from, to int64, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT from_fence, to_fence FROM fence_raised WHERE workspace_id = ?`, ws).Scan(&from, &to)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("store: read the fence raise of workspace %d: %w", ws, err)
	}
	return from, to, true, nil
}
