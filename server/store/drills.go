package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// drillSchema holds the drills' runs and cadences (in leaseplane.db).
const drillSchema = `
CREATE TABLE IF NOT EXISTS drill_runs(
	id INTEGER PRIMARY KEY,
	workspace_id INTEGER NOT NULL,
	trigger TEXT NOT NULL,
	requested_ms INTEGER NOT NULL,
	started_ms INTEGER,
	finished_ms INTEGER,
	passed INTEGER,
	drills TEXT NOT NULL DEFAULT '[]');
CREATE INDEX IF NOT EXISTS drill_runs_by_workspace ON drill_runs(workspace_id, id);
CREATE TABLE IF NOT EXISTS drill_cadence(
	workspace_id INTEGER PRIMARY KEY,
	every_ms INTEGER NOT NULL);
`

// DrillPrefix starts the name of every drill workspace. No real
// workspace can have it: ValidWorkspaceName refuses '~'.
const DrillPrefix = "~drill-"

func (s *Store) initDrills() error {
	if _, err := s.db.Exec(drillSchema); err != nil {
		return fmt.Errorf("store: create drills schema: %w", err)
	}
	// cancelled_ms came after the first release: added to an older table.
	var has int
	if err := s.db.QueryRow(`SELECT count(*) FROM pragma_table_info('drill_runs') WHERE name = 'cancelled_ms'`).Scan(&has); err != nil {
		return fmt.Errorf("store: read the drill runs' columns: %w", err)
	}
	if has == 0 {
		if _, err := s.db.Exec(`ALTER TABLE drill_runs ADD COLUMN cancelled_ms INTEGER`); err != nil {
			return fmt.Errorf("store: add the cancelled_ms column to the drill runs: %w", err)
		}
	}
	return nil
}

// CreateDrillWorkspace makes a workspace of its own for one drill, named
// DrillPrefix+suffix, with rules.
func (s *Store) CreateDrillWorkspace(suffix string, rules []byte, nowMs int64) (Workspace, error) {
	name := DrillPrefix + suffix
	if err := ValidWorkspaceName(suffix); err != nil {
		return Workspace{}, err
	}
	if len(rules) == 0 {
		rules = []byte(`{"readShared":[]}`)
	}
	if _, err := s.db.Exec(`INSERT INTO workspaces(name, rules, created_ms) VALUES(?, ?, ?)`, name, string(rules), nowMs); err != nil {
		return Workspace{}, fmt.Errorf("store: create drill workspace %s: %w", name, err)
	}
	return s.WorkspaceByName(name)
}

// IsDrillWorkspace tells a drill workspace's name.
func IsDrillWorkspace(name string) bool { return strings.HasPrefix(name, DrillPrefix) }

// DeleteDrillWorkspace deletes a drill workspace and everything of it in
// leaseplane.db: keys, log, snapshot. A workspace that is not a drill's is
// refused.
func (s *Store) DeleteDrillWorkspace(id int64) error {
	w, err := s.WorkspaceByID(id)
	if err != nil {
		return err
	}
	if !IsDrillWorkspace(w.Name) {
		return fmt.Errorf("store: workspace %s is not a drill workspace; it is never deleted", w.Name)
	}
	// Its snapshot first (snapshots.db, a file of its own): the id of the
	// newest workspace is given again to the next one made (INTEGER
	// PRIMARY KEY), which must not start from a drill's state. Should the
	// process die between the two, the next start deletes the workspace
	// again.
	if _, err := s.sdb.Exec(`DELETE FROM snapshots WHERE workspace_id = ?`, id); err != nil {
		return fmt.Errorf("store: delete the snapshot of drill workspace %s: %w", w.Name, err)
	}
	s.logWrite.Lock()
	defer s.logWrite.Unlock()
	delete(s.lastLogged, id) // its id may be given to the next workspace made
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("store: delete drill workspace %s: %w", w.Name, err)
	}
	defer tx.Rollback()
	for _, q := range []string{`DELETE FROM keys WHERE workspace_id = ?`, `DELETE FROM log WHERE workspace_id = ?`,
		`DELETE FROM log_runs WHERE workspace_id = ?`,
		`DELETE FROM snapshots WHERE workspace_id = ?`, `DELETE FROM workspaces WHERE id = ?`} {
		if _, err := tx.Exec(q, id); err != nil {
			return fmt.Errorf("store: delete drill workspace %s: %w", w.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: delete drill workspace %s: %w", w.Name, err)
	}
	return nil
}

// LogSince reads a workspace's logged commands with seq above after, in
// order.
func (s *Store) LogSince(ctx context.Context, ws, after int64) ([]Record, error) {
	var out []Record
	err := s.readLog(ctx, ws, after, func(x logged) bool {
		out = append(out, Record{Workspace: ws, Seq: x.Seq, NowMs: x.NowMs, Op: x.Op, Body: x.Body, Status: x.Status})
		return true
	})
	return out, err
}

// DrillRun is one run of the drills as stored.
type DrillRun struct {
	ID          int64
	Workspace   int64 // the workspace that asked for it
	Trigger     string
	RequestedMs int64
	StartedMs   int64 // 0 while queued
	FinishedMs  int64 // 0 while queued or running
	CancelledMs int64 // when an operator cancelled it (then FinishedMs too); 0 if not
	Passed      bool  // meaningful once finished, unless cancelled
	Drills      []byte
}

// AddDrillRun records a run asked for by workspace ws, queued.
func (s *Store) AddDrillRun(ws int64, trigger string, nowMs int64) (int64, error) {
	res, err := s.db.Exec(`INSERT INTO drill_runs(workspace_id, trigger, requested_ms) VALUES(?, ?, ?)`, ws, trigger, nowMs)
	if err != nil {
		return 0, fmt.Errorf("store: record drill run: %w", err)
	}
	return res.LastInsertId()
}

// StartDrillRun marks a run started.
func (s *Store) StartDrillRun(id, nowMs int64) error {
	if _, err := s.db.Exec(`UPDATE drill_runs SET started_ms = ? WHERE id = ?`, nowMs, id); err != nil {
		return fmt.Errorf("store: start drill run %d: %w", id, err)
	}
	return nil
}

// SaveDrillRun writes a run's drills so far and, when finishedMs is not 0,
// its end and verdict.
func (s *Store) SaveDrillRun(id int64, drills []byte, finishedMs int64, passed bool) error {
	var err error
	if finishedMs == 0 {
		_, err = s.db.Exec(`UPDATE drill_runs SET drills = ? WHERE id = ?`, string(drills), id)
	} else {
		_, err = s.db.Exec(`UPDATE drill_runs SET drills = ?, finished_ms = ?, passed = ? WHERE id = ?`, string(drills), finishedMs, passed, id)
	}
	if err != nil {
		return fmt.Errorf("store: save drill run %d: %w", id, err)
	}
	return nil
}

// CancelDrillRun ends a queued or running run as cancelled at nowMs, with
// the drills it had done (no verdict).
func (s *Store) CancelDrillRun(id int64, drills []byte, nowMs int64) error {
	if _, err := s.db.Exec(`UPDATE drill_runs SET drills = ?, finished_ms = ?, cancelled_ms = ?, passed = NULL WHERE id = ?`,
		string(drills), nowMs, nowMs, id); err != nil {
		return fmt.Errorf("store: cancel drill run %d: %w", id, err)
	}
	return nil
}

const drillRunColumns = `id, workspace_id, trigger, requested_ms, started_ms, finished_ms, cancelled_ms, passed, drills`

func scanDrillRun(rows *sql.Rows) (DrillRun, error) {
	var r DrillRun
	var started, finished, cancelled sql.NullInt64
	var passed sql.NullBool
	var drills string
	err := rows.Scan(&r.ID, &r.Workspace, &r.Trigger, &r.RequestedMs, &started, &finished, &cancelled, &passed, &drills)
	r.StartedMs, r.FinishedMs, r.CancelledMs, r.Passed, r.Drills = started.Int64, finished.Int64, cancelled.Int64, passed.Bool, []byte(drills)
	return r, err
}

// DrillRuns lists the runs workspace ws asked for, newest first, at most
// limit.
func (s *Store) DrillRuns(ctx context.Context, ws int64, limit int) ([]DrillRun, error) {
	return queryAll(ctx, s.db, "list drill runs", scanDrillRun,
		`SELECT `+drillRunColumns+` FROM drill_runs WHERE workspace_id = ? ORDER BY id DESC LIMIT ?`, ws, limit)
}

// DrillRunOf is run id of workspace ws; ok is false when ws has no such
// run.
func (s *Store) DrillRunOf(ctx context.Context, ws, id int64) (r DrillRun, ok bool, err error) {
	rs, err := queryAll(ctx, s.db, "read a drill run", scanDrillRun,
		`SELECT `+drillRunColumns+` FROM drill_runs WHERE workspace_id = ? AND id = ?`, ws, id)
	if err != nil || len(rs) == 0 {
		return DrillRun{}, false, err
	}
	return rs[0], true, nil
}

// UnfinishedDrillRuns lists the runs that were queued or running when the
// server stopped, oldest first.
func (s *Store) UnfinishedDrillRuns() ([]DrillRun, error) {
	return queryAll(context.Background(), s.db, "list unfinished drill runs", func(rows *sql.Rows) (DrillRun, error) {
		var r DrillRun
		var drills string
		err := rows.Scan(&r.ID, &r.Workspace, &r.Trigger, &r.RequestedMs, &r.StartedMs, &drills)
		r.Drills = []byte(drills)
		return r, err
	}, `SELECT id, workspace_id, trigger, requested_ms, COALESCE(started_ms, 0), drills
		FROM drill_runs WHERE finished_ms IS NULL ORDER BY id`)
}

// SetDrillCadence sets how often workspace ws's drills repeat; 0 stops
// them.
func (s *Store) SetDrillCadence(ws, everyMs int64) error {
	var err error
	if everyMs == 0 {
		_, err = s.db.Exec(`DELETE FROM drill_cadence WHERE workspace_id = ?`, ws)
	} else {
		_, err = s.db.Exec(`INSERT INTO drill_cadence(workspace_id, every_ms) VALUES(?, ?)
			ON CONFLICT(workspace_id) DO UPDATE SET every_ms = excluded.every_ms`, ws, everyMs)
	}
	if err != nil {
		return fmt.Errorf("store: set drill cadence: %w", err)
	}
	return nil
}

// DrillCadences lists the cadences set, by workspace id.
func (s *Store) DrillCadences() (map[int64]int64, error) {
	rows, err := s.db.Query(`SELECT workspace_id, every_ms FROM drill_cadence`)
	if err != nil {
		return nil, fmt.Errorf("store: read drill cadences: %w", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var ws, every int64
		if err := rows.Scan(&ws, &every); err != nil {
			return nil, fmt.Errorf("store: read drill cadences: %w", err)
		}
		out[ws] = every
	}
	return out, rows.Err()
}

// RequeueDrillRun puts an unfinished run back in the queue: not started,
// no drills done.
func (s *Store) RequeueDrillRun(id int64) error {
	if _, err := s.db.Exec(`UPDATE drill_runs SET started_ms = NULL, drills = '[]' WHERE id = ? AND finished_ms IS NULL`, id); err != nil {
		return fmt.Errorf("store: requeue drill run %d: %w", id, err)
	}
	return nil
}
