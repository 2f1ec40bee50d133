package store

import (
	"context"
	"database/sql"
	"fmt"
)

// detectionSchema holds the cases detectors file (in leaseplane.db).
const detectionSchema = `
CREATE TABLE IF NOT EXISTS detection_cases(
	id INTEGER PRIMARY KEY,
	workspace_id INTEGER NOT NULL,
	detector TEXT NOT NULL,
	key TEXT NOT NULL,
	status TEXT NOT NULL DEFAULT 'open',
	entry_a INTEGER NOT NULL,
	entry_b INTEGER NOT NULL,
	finding TEXT NOT NULL,
	first_seen_ms INTEGER NOT NULL,
	last_seen_ms INTEGER NOT NULL,
	UNIQUE(workspace_id, key));
`

func (s *Store) initDetection() error {
	if _, err := s.db.Exec(detectionSchema); err != nil {
		return fmt.Errorf("store: create detection schema: %w", err)
	}
	return nil
}

// Case is a finding filed for review.
type Case struct {
	ID          int64
	Workspace   int64
	Detector    string
	Key         string // what makes it the same finding across runs
	Status      string // open
	EntryA      int64
	EntryB      int64
	Finding     []byte // the finding as JSON
	FirstSeenMs int64
	LastSeenMs  int64
}

// FileCase files a finding of workspace ws once: a case with the same key
// is kept as it was (only its last sighting moves). It returns the case.
func (s *Store) FileCase(ctx context.Context, c Case) (Case, error) {
	_, err := s.db.ExecContext(ctx, `INSERT INTO detection_cases(workspace_id, detector, key, entry_a, entry_b, finding, first_seen_ms, last_seen_ms)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(workspace_id, key) DO UPDATE SET last_seen_ms = excluded.last_seen_ms`,
		c.Workspace, c.Detector, c.Key, c.EntryA, c.EntryB, string(c.Finding), c.FirstSeenMs, c.LastSeenMs)
	if err != nil {
		return Case{}, fmt.Errorf("store: file case: %w", err)
	}
	cs, err := s.cases(ctx, `WHERE workspace_id = ? AND key = ?`, c.Workspace, c.Key)
	if err != nil || len(cs) == 0 {
		return Case{}, fmt.Errorf("store: read the case filed: %v", err)
	}
	return cs[0], nil
}

// Cases lists workspace ws's cases, oldest first (all when status is "").
func (s *Store) Cases(ctx context.Context, ws int64, status string) ([]Case, error) {
	if status == "" {
		return s.cases(ctx, `WHERE workspace_id = ?`, ws)
	}
	return s.cases(ctx, `WHERE workspace_id = ? AND status = ?`, ws, status)
}

// OpenCases counts the open cases of every workspace.
func (s *Store) OpenCases(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM detection_cases WHERE status = 'open'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count open cases: %w", err)
	}
	return n, nil
}

func (s *Store) cases(ctx context.Context, where string, args ...any) ([]Case, error) {
	return queryAll(ctx, s.db, "list cases", func(rows *sql.Rows) (Case, error) {
		var c Case
		var f string
		err := rows.Scan(&c.ID, &c.Workspace, &c.Detector, &c.Key, &c.Status, &c.EntryA, &c.EntryB, &f, &c.FirstSeenMs, &c.LastSeenMs)
		c.Finding = []byte(f)
		return c, err
	}, `SELECT id, workspace_id, detector, key, status, entry_a, entry_b, finding, first_seen_ms, last_seen_ms
		FROM detection_cases `+where+` ORDER BY id`, args...)
}
