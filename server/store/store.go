// Package store is the lease plane's durable state in SQLite, through
// modernc.org/sqlite (pure Go, nothing to install). It is the only package
// that imports the SQLite driver (rule 2 of docs/ARCHITECTURE.md).
//
// The database file DIR/leaseplane.db, in WAL mode with synchronous=FULL
// (a commit is on disk when Commit returns), holds:
//   - workspaces: a name and the kernel rules each workspace's machine is
//     built with;
//   - keys: API keys, stored only as SHA-256 hashes, each with a role
//     (workspace, agent or operator) and, for agent keys, the agent's DID;
//   - log_runs: every command that changed a workspace's state, with the
//     time it was applied at, in order (seq); Commit writes many commands
//     in one transaction (group commit), each workspace's as one row, a
//     run (logruns.go); log keeps the rows, one per command, that folders
//     of schema 1 wrote;
//   - snapshots (in DIR/snapshots.db, a file of its own, so that a large
//     snapshot never holds up another workspace's commit): the latest
//     kernel snapshot of each workspace and the seq it follows; replay
//     starts there, so it is bounded (data folders of 0.1 kept them in
//     leaseplane.db, which Load still reads);
//   - the log rows also keep the events each command emitted (a JSON
//     array; NULL in rows written before the ledger existed), so the ledger
//     is derived from the durable log; the log is trimmed only behind the
//     point the ledger has caught up to (Options.LogKeepAfter);
//   - the ledger (in DIR/ledger.db, a file of its own, ledger.go): entries
//     packed and compressed 32 a row with the tree hashes of whole rows,
//     the grants' look-up, signed checkpoints, each workspace's position and
//     retention marks; written with synchronous=NORMAL (WAL), since it is
//     derived from the log and rebuilt from it: SyncLedger makes it durable
//     up to a point, and the log is trimmed only behind that point;
//   - events (in DIR/events.db, a file of its own): every kernel event, one
//     row each, append-only (triggers refuse UPDATE and DELETE); written best
//     effort, never in the way of a command, and only by a server without a
//     ledger (with one, the ledger holds the same events).
//
// A Store is safe for concurrent use. Commit is meant to be called by one
// writer goroutine; readers (key look-ups, Load) run beside it.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// The files of the data directory, each a database of its own: the log
// and the keys; the events; the ledger; the snapshots (so that writing one
// workspace's large snapshot never holds the write lock that every
// workspace's command commits need).
const (
	FileName          = "leaseplane.db"
	EventsFileName    = "events.db"
	LedgerFileName    = "ledger.db"
	SnapshotsFileName = "snapshots.db"
)

// schemaVersion is the schema this build writes: 2 since the log is
// written in runs (logruns.go). It reads a folder of schema 1 too, and
// marks it 2 on open, so that a build of schema 1, which would not see
// the runs, refuses it.
const schemaVersion = "2"

const schema = `
CREATE TABLE IF NOT EXISTS meta(
	key TEXT PRIMARY KEY,
	value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workspaces(
	id INTEGER PRIMARY KEY,
	name TEXT NOT NULL UNIQUE,
	rules TEXT NOT NULL,
	created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS keys(
	id TEXT PRIMARY KEY,
	hash BLOB NOT NULL UNIQUE,
	workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
	role TEXT NOT NULL CHECK(role IN ('workspace', 'agent', 'operator')),
	agent_did TEXT NOT NULL DEFAULT '',
	created_ms INTEGER NOT NULL,
	revoked_ms INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS log(
	workspace_id INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	now_ms INTEGER NOT NULL,
	op TEXT NOT NULL,
	body BLOB NOT NULL,
	status INTEGER NOT NULL,
	events BLOB,
	PRIMARY KEY(workspace_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots(
	workspace_id INTEGER PRIMARY KEY,
	seq INTEGER NOT NULL,
	state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS log_runs(
	workspace_id INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	last_seq INTEGER NOT NULL,
	max_ms INTEGER NOT NULL,
	cmds BLOB NOT NULL,
	PRIMARY KEY(workspace_id, seq)) WITHOUT ROWID;
`

// eventsSchema is the events database's: a file of its own, so that the
// best-effort events never add pages (and fsync time) to a command's
// commit, and written with synchronous=NORMAL (WAL): a power cut may lose
// the newest events, never a command.
const eventsSchema = `
CREATE TABLE IF NOT EXISTS events(
	id INTEGER PRIMARY KEY,
	workspace_id INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	idx INTEGER NOT NULL,
	type TEXT NOT NULL,
	at_ms INTEGER NOT NULL,
	body TEXT NOT NULL,
	UNIQUE(workspace_id, seq, idx));
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
	BEGIN SELECT RAISE(ABORT, 'events is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
	BEGIN SELECT RAISE(ABORT, 'events is append-only'); END;
`

const snapshotsSchema = `
CREATE TABLE IF NOT EXISTS snapshots(
	workspace_id INTEGER PRIMARY KEY,
	seq INTEGER NOT NULL,
	state BLOB NOT NULL);
`

// Options tune a Store. The zero value is right for production.
type Options struct {
	// BeforeSnapshot, when set, runs at the start of every SaveSnapshot.
	// A seam for tests (a snapshot write held up).
	BeforeSnapshot func()
	// BeforeCommit, when set, runs inside every Commit before the log rows
	// are written; a non-nil error fails that Commit as a disk write failure
	// would. It is a seam for tests of the failure path.
	BeforeCommit func() error
	// LogKeep, when above 0, replaces the constant LogKeep: how many log
	// records behind a workspace's newest snapshot are kept (tests).
	LogKeep int64
	// LogKeepAfter, when set, gives for a workspace the seq after which its
	// log rows must be kept whatever the snapshots say: the ledger's
	// position, so that a ledger that fell behind can still catch up.
	LogKeepAfter func(workspace int64) int64
	// LedgerFault, when set, runs inside every AppendLedger; a non-nil error
	// fails it as a disk failure would. A seam for tests of the ledger's
	// outage path.
	LedgerFault func() error
}

// Store is an open database.
type Store struct {
	db   *sql.DB // leaseplane.db: workspaces, keys, log, snapshots
	edb  *sql.DB // events.db: events
	ldb  *sql.DB // ledger.db: the ledger
	sdb  *sql.DB // snapshots.db: the snapshots
	path string
	opts Options

	delLog, delRuns *sql.Stmt // the log trim's, in log and log_runs
	insRun, lastSeq *sql.Stmt // the commit's (logruns.go)
	// Under logWrite, the commit's: its packing buffer, and the last seq
	// logged of each workspace it has committed to (a new run must
	// start after it; DeleteDrillWorkspace forgets one).
	runBuf     []byte
	lastLogged map[int64]int64
	// logWrite is taken by Commit and by the log trim around their
	// transactions on leaseplane.db: the one that comes second waits for
	// the other in Go and starts the moment it is done. Left to SQLite's
	// busy handler, it finds the write lock taken and sleeps 1, 2, 5, 10
	// ms and so on between tries, however soon the other finished: a
	// commit meeting a trim waited at least 1 ms more (8 when the trim
	// took 4), its whole group's answers with it, and under steady commits
	// a trim could keep missing the gaps between them.
	logWrite  sync.Mutex
	keyEpochs *sql.Stmt // read every key poll

	stmtMu      sync.Mutex
	eventStmts  [rowsPerInsert + 1]*sql.Stmt // multi-row INSERTs by row count
	grantStmts  [rowsPerInsert + 1]*sql.Stmt // the ledger's grants, likewise
	ledgerReads map[string]*sql.Stmt         // the ledger's point reads, by query
}

// stmt returns the prepared multi-row INSERT for n rows (a power of two:
// perInsert), preparing it on first use: preparing a statement of hundreds of
// parameters costs more than running it, and with a statement for every
// count up to rowsPerInsert, each on each of a pool's connections, group
// commits of ever new sizes kept preparing them.
func (s *Store) stmt(db *sql.DB, cache *[rowsPerInsert + 1]*sql.Stmt, q string, n int) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := cache[n]; st != nil {
		return st, nil
	}
	st, err := db.Prepare(q)
	if err != nil {
		return nil, fmt.Errorf("store: prepare a %d-row insert: %w", n, err)
	}
	cache[n] = st
	return st, nil
}

// cachePragma bounds each connection's SQLite page cache to 512 KiB
// (SQLite's default is 2 MiB): the server keeps ten connections, and the
// files are mostly appended to, so a big cache buys little and its memory,
// allocated outside the Go heap, stays with the process
// (docs/BENCHMARKS.md, "Memory").
const cachePragma = "&_pragma=cache_size(-512)"

// idleConnLife is how long a connection may sit unused before its pool
// closes it. Each open connection keeps its page cache and the driver's
// other allocations (outside the Go heap); closing the idle ones gives
// that memory back once traffic stops, and reopening costs a file open
// and a schema read, far less than a burst's commands
// (docs/BENCHMARKS.md, "Server memory").
const idleConnLife = 5 * time.Second

// ErrNotFound is returned when a named workspace or key does not exist.
var ErrNotFound = errors.New("not found")

// Open opens (creating when missing) the database in dir.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: data directory is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data directory: %w", err)
	}
	if err := private(dir, 0o700); err != nil {
		return nil, err
	}
	// The files and their settings: the log and the keys (foreign keys
	// on), events (a best-effort record, synchronous NORMAL), the ledger
	// (rebuilt from the log: synchronous NORMAL, made durable by SyncLedger)
	// and the snapshots, each with its own pool.
	files := [...]struct {
		name, pragmas string
		conns         int
	}{
		{FileName, "&_pragma=synchronous(FULL)&_pragma=foreign_keys(on)", 4},
		{EventsFileName, "&_pragma=synchronous(NORMAL)", 2},
		{LedgerFileName, "&_pragma=synchronous(NORMAL)", 4},
		{SnapshotsFileName, "&_pragma=synchronous(FULL)", 2},
	}
	var dbs []*sql.DB
	closeAll := func() {
		for _, d := range dbs {
			d.Close()
		}
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		// Made 0600 before SQLite opens it: its -wal and -shm files take
		// the database file's mode.
		if err := privateFile(path); err != nil {
			closeAll()
			return nil, err
		}
		d, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"+f.pragmas+"&_txlock=immediate"+cachePragma)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
		d.SetMaxOpenConns(f.conns)
		d.SetConnMaxIdleTime(idleConnLife)
		dbs = append(dbs, d)
	}
	dbs[0].SetMaxIdleConns(4)
	s := &Store{db: dbs[0], edb: dbs[1], ldb: dbs[2], sdb: dbs[3], path: filepath.Join(dir, FileName), opts: opts}
	if err := s.init(); err != nil {
		closeAll()
		return nil, err
	}
	return s, nil
}

// private narrows the mode of path to mode when it allows more (a data
// folder made 0755 by an older release, or by hand): the folder holds key
// hashes and the ledger's signing keys.
func private(path string, mode os.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if fi.Mode().Perm()&^mode != 0 {
		if err := os.Chmod(path, fi.Mode().Perm()&mode); err != nil {
			return fmt.Errorf("store: make %s readable by its owner only: %w", path, err)
		}
	}
	return nil
}

// privateFile creates the file path with mode 0600 when it is missing, and
// narrows it and its -wal and -shm files to 0600 when they allow more.
func privateFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("store: create %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := private(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (s *Store) init() error {
	if _, err := s.db.Exec(schema); err != nil {
		return fmt.Errorf("store: create schema in %s: %w", s.path, err)
	}
	if _, err := s.edb.Exec(eventsSchema); err != nil {
		return fmt.Errorf("store: create events schema: %w", err)
	}
	if _, err := s.ldb.Exec(ledgerSchema); err != nil {
		return fmt.Errorf("store: create ledger schema: %w", err)
	}
	if err := s.migrateLedger(); err != nil {
		return err
	}
	if _, err := s.sdb.Exec(snapshotsSchema); err != nil {
		return fmt.Errorf("store: create snapshots schema: %w", err)
	}
	// Columns the log gained after its first release, added to an older
	// log: events (since the ledger; old rows stay NULL, their events are
	// not known), and the semantics and rules each command ran under (a log
	// without them was written by leaseplane 0.1: semantics 1, the
	// workspace's rules).
	for _, col := range []struct{ name, decl string }{
		{"events", "events BLOB"}, {"semantics", "semantics INTEGER NOT NULL DEFAULT 1"}, {"rules", "rules TEXT"},
	} {
		var has int
		if err := s.db.QueryRow(`SELECT count(*) FROM pragma_table_info('log') WHERE name = ?`, col.name).Scan(&has); err != nil {
			return fmt.Errorf("store: read the log's columns: %w", err)
		}
		if has == 0 {
			if _, err := s.db.Exec(`ALTER TABLE log ADD COLUMN ` + col.decl); err != nil {
				return fmt.Errorf("store: add the %s column to the log: %w", col.name, err)
			}
		}
	}
	if err := s.initDrills(); err != nil {
		return err
	}
	if err := s.initDetection(); err != nil {
		return err
	}
	if _, err := s.db.Exec(fenceSchema); err != nil {
		return fmt.Errorf("store: create the fence raise schema: %w", err)
	}
	var v string
	err := s.db.QueryRow(`SELECT value FROM meta WHERE key = 'schema'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := s.db.Exec(`INSERT INTO meta(key, value) VALUES('schema', ?)`, schemaVersion); err != nil {
			return fmt.Errorf("store: write schema version: %w", err)
		}
	case err != nil:
		return fmt.Errorf("store: read schema version: %w", err)
	case v == "1":
		if _, err := s.db.Exec(`UPDATE meta SET value = ? WHERE key = 'schema'`, schemaVersion); err != nil {
			return fmt.Errorf("store: write schema version: %w", err)
		}
	case v != schemaVersion:
		return fmt.Errorf("store: %s has schema version %s; this build reads version %s", s.path, v, schemaVersion)
	}
	err = nil
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = s.db.Prepare(q)
		return st
	}
	// Not while a backup holds trimming (HoldLogTrim): checked in the
	// DELETE itself, so a hold committed before it always wins.
	s.delLog = prep(`DELETE FROM log WHERE workspace_id = ? AND seq <= ? AND NOT ` + trimHeldSQL)
	s.delRuns = prep(`DELETE FROM log_runs WHERE workspace_id = ?1 AND seq <= ?2 AND last_seq <= ?2 AND NOT ` + trimHeldSQL)
	s.insRun = prep(`INSERT INTO log_runs(workspace_id, seq, last_seq, max_ms, cmds) VALUES(?, ?, ?, ?, ?)`)
	s.lastSeq = prep(lastSeqSQL)
	s.keyEpochs = prep(`SELECT
		COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'key_epoch'), 0),
		COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'key_epoch_applied'), 0)`)
	if err != nil {
		return fmt.Errorf("store: prepare statements: %w", err)
	}
	return nil
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

// Close closes the database; a last checkpoint folds the WAL into it.
func (s *Store) Close() error {
	s.stmtMu.Lock()
	stmts := []*sql.Stmt{s.delLog, s.delRuns, s.insRun, s.lastSeq, s.keyEpochs}
	stmts = append(stmts, s.eventStmts[:]...)
	stmts = append(stmts, s.grantStmts[:]...)
	for _, st := range s.ledgerReads {
		stmts = append(stmts, st)
	}
	s.stmtMu.Unlock()
	for _, st := range stmts {
		if st != nil {
			st.Close()
		}
	}
	err1 := s.db.Close()
	err2 := s.edb.Close()
	err3 := s.ldb.Close()
	err4 := s.sdb.Close()
	return errors.Join(err1, err2, err3, err4)
}

// Workspace is one tenant: its own machine, keys, log and events.
type Workspace struct {
	ID        int64
	Name      string
	Rules     []byte // kernel rules JSON
	CreatedMs int64
}

// ValidWorkspaceName checks a workspace name: 1-64 bytes of letters,
// digits, '-', '_' and '.'.
func ValidWorkspaceName(name string) error {
	if name == "" || len(name) > 64 {
		return errors.New("workspace name must be 1-64 bytes")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("workspace name %q may hold only letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// EnsureWorkspace returns the workspace named name, creating it with rules
// when it does not exist. created tells which happened. Rules of an
// existing workspace are left as they are.
func (s *Store) EnsureWorkspace(name string, rules []byte, nowMs int64) (w Workspace, created bool, err error) {
	if err := ValidWorkspaceName(name); err != nil {
		return Workspace{}, false, err
	}
	if len(rules) == 0 {
		rules = []byte(`{"readShared":[]}`)
	}
	res, err := s.db.Exec(`INSERT INTO workspaces(name, rules, created_ms) VALUES(?, ?, ?) ON CONFLICT(name) DO NOTHING`,
		name, string(rules), nowMs)
	if err != nil {
		return Workspace{}, false, fmt.Errorf("store: create workspace %s: %w", name, err)
	}
	n, _ := res.RowsAffected()
	w, err = s.WorkspaceByName(name)
	return w, n == 1, err
}

// WorkspaceByName looks a workspace up; ErrNotFound when there is none.
func (s *Store) WorkspaceByName(name string) (Workspace, error) {
	return s.workspace(`SELECT id, name, rules, created_ms FROM workspaces WHERE name = ?`, name)
}

// WorkspaceByID looks a workspace up; ErrNotFound when there is none.
func (s *Store) WorkspaceByID(id int64) (Workspace, error) {
	return s.workspace(`SELECT id, name, rules, created_ms FROM workspaces WHERE id = ?`, id)
}

func (s *Store) workspace(q string, arg any) (Workspace, error) {
	var w Workspace
	var rules string
	err := s.db.QueryRow(q, arg).Scan(&w.ID, &w.Name, &rules, &w.CreatedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return Workspace{}, fmt.Errorf("workspace %v: %w", arg, ErrNotFound)
	}
	if err != nil {
		return Workspace{}, fmt.Errorf("store: read workspace %v: %w", arg, err)
	}
	w.Rules = []byte(rules)
	return w, nil
}

// queryAll runs query on db and reads each row with scan; an error says
// store, then what failed.
func queryAll[T any](ctx context.Context, db *sql.DB, what string, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	return out, nil
}

// Workspaces lists every workspace by id.
func (s *Store) Workspaces() ([]Workspace, error) {
	return queryAll(context.Background(), s.db, "list workspaces", func(rows *sql.Rows) (Workspace, error) {
		var w Workspace
		var rules string
		err := rows.Scan(&w.ID, &w.Name, &rules, &w.CreatedMs)
		w.Rules = []byte(rules)
		return w, err
	}, `SELECT id, name, rules, created_ms FROM workspaces ORDER BY id`)
}

// Role is what a key may do.
type Role string

// The roles of keys.
const (
	// RoleWorkspace may name any agent of its workspace.
	RoleWorkspace Role = "workspace"
	// RoleAgent may name only its own agent DID.
	RoleAgent Role = "agent"
	// RoleOperator may do what a workspace key does, and suspend and resume
	// agents.
	RoleOperator Role = "operator"
)

// Key is a stored API key (never its secret).
type Key struct {
	ID          string
	WorkspaceID int64
	Workspace   string
	Role        Role
	AgentDID    string // for RoleAgent
	CreatedMs   int64
	RevokedMs   int64 // 0 while valid
}

// KeyPrefix starts every key: "lp_" ID "_" secret.
const KeyPrefix = "lp_"

// HashKey is how a key is stored: its SHA-256.
func HashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// CreateKey makes a new key for workspace w and returns it; only its hash
// is stored. agentDID must be set for RoleAgent and empty otherwise.
func (s *Store) CreateKey(w Workspace, role Role, agentDID string, nowMs int64) (string, Key, error) {
	switch role {
	case RoleWorkspace, RoleOperator:
		if agentDID != "" {
			return "", Key{}, fmt.Errorf("a %s key names no agent", role)
		}
	case RoleAgent:
		if agentDID == "" {
			return "", Key{}, errors.New("an agent key needs the agent's DID")
		}
	default:
		return "", Key{}, fmt.Errorf("unknown key role %q", role)
	}
	var idb [6]byte
	var secret [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", Key{}, fmt.Errorf("store: draw key id: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", Key{}, fmt.Errorf("store: draw key secret: %w", err)
	}
	id := hex.EncodeToString(idb[:])
	key := KeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	_, err := s.db.Exec(`INSERT INTO keys(id, hash, workspace_id, role, agent_did, created_ms) VALUES(?, ?, ?, ?, ?, ?)`,
		id, HashKey(key), w.ID, string(role), agentDID, nowMs)
	if err != nil {
		return "", Key{}, fmt.Errorf("store: create key: %w", err)
	}
	return key, Key{ID: id, WorkspaceID: w.ID, Workspace: w.Name, Role: role, AgentDID: agentDID, CreatedMs: nowMs}, nil
}

const keyColumns = `k.id, k.workspace_id, w.name, k.role, k.agent_did, k.created_ms, k.revoked_ms
	FROM keys k JOIN workspaces w ON w.id = k.workspace_id`

func scanKey(sc interface{ Scan(...any) error }) (Key, error) {
	var k Key
	var role string
	err := sc.Scan(&k.ID, &k.WorkspaceID, &k.Workspace, &role, &k.AgentDID, &k.CreatedMs, &k.RevokedMs)
	k.Role = Role(role)
	return k, err
}

// LookupKey finds the key with this secret. ok is false when no key has
// that hash; a revoked key is returned with RevokedMs set.
func (s *Store) LookupKey(ctx context.Context, key string) (k Key, ok bool, err error) {
	k, err = scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyColumns+` WHERE k.hash = ?`, HashKey(key)))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, false, nil
	}
	if err != nil {
		return Key{}, false, fmt.Errorf("store: look up key: %w", err)
	}
	return k, true, nil
}

// Keys lists the keys of one workspace, or of all when workspace is "".
func (s *Store) Keys(workspace string) ([]Key, error) {
	q := `SELECT ` + keyColumns
	var args []any
	if workspace != "" {
		q += ` WHERE w.name = ?`
		args = append(args, workspace)
	}
	return queryAll(context.Background(), s.db, "list keys", func(rows *sql.Rows) (Key, error) { return scanKey(rows) },
		q+` ORDER BY k.created_ms, k.id`, args...)
}

// RevokeKey revokes the key with this id (or this whole key). Revoking a
// revoked key is not an error; an unknown one is ErrNotFound. In the same
// transaction it raises the key epoch (KeyEpochs), which a running server
// watches to drop the keys it has cached.
func (s *Store) RevokeKey(idOrKey string, nowMs int64) (Key, error) {
	id := idOrKey
	if strings.HasPrefix(idOrKey, KeyPrefix) {
		rest := idOrKey[len(KeyPrefix):]
		if i := strings.IndexByte(rest, '_'); i > 0 {
			id = rest[:i]
		}
	}
	nowMs = max(nowMs, 1) // revoked_ms 0 means not revoked
	tx, err := s.db.Begin()
	if err != nil {
		return Key{}, fmt.Errorf("store: revoke key %s: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`UPDATE keys SET revoked_ms = ? WHERE id = ? AND revoked_ms = 0`, nowMs, id); err != nil {
		return Key{}, fmt.Errorf("store: revoke key %s: %w", id, err)
	}
	k, err := scanKey(tx.QueryRow(`SELECT `+keyColumns+` WHERE k.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("key %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("store: read key %s: %w", id, err)
	}
	if _, err := tx.Exec(`INSERT INTO meta(key, value) VALUES('key_epoch', '1')
		ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1`); err != nil {
		return Key{}, fmt.Errorf("store: raise the key epoch: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Key{}, fmt.Errorf("store: revoke key %s: %w", id, err)
	}
	return k, nil
}

// KeyEpochs reads the key epoch, raised by every revocation, and the
// newest epoch a running server has applied (dropped its cached keys for).
func (s *Store) KeyEpochs(ctx context.Context) (epoch, applied int64, err error) {
	err = s.keyEpochs.QueryRowContext(ctx).Scan(&epoch, &applied)
	if err != nil {
		return 0, 0, fmt.Errorf("store: read the key epoch: %w", err)
	}
	return epoch, applied, nil
}

// AckKeyEpoch records that a running server applies key epoch n.
func (s *Store) AckKeyEpoch(n int64) error {
	if _, err := s.db.Exec(`INSERT INTO meta(key, value) VALUES('key_epoch_applied', ?)
		ON CONFLICT(key) DO UPDATE SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))`, strconv.FormatInt(n, 10)); err != nil {
		return fmt.Errorf("store: record the applied key epoch: %w", err)
	}
	return nil
}

// Record is one logged command of a workspace.
type Record struct {
	Workspace int64
	Seq       int64 // 1, 2, ... per workspace
	NowMs     int64
	Op        string
	Body      []byte
	Status    int // the answer's status, checked on replay
	// Events are the events the command emitted, the kernel's JSON array
	// (Load leaves them empty; LogEvents reads them).
	Events []byte
	// Semantics is the kernel semantics the command was decided by
	// (kernel.Semantics when it was logged; 1 for a log of leaseplane 0.1).
	Semantics int
	// Rules are the kernel rules the command ran under, written on the
	// first command after a workspace is loaded; nil means the same as the
	// command before (or, for a log of leaseplane 0.1, the workspace's).
	Rules []byte
	// Snapshot, when set, is the machine's state right after this command;
	// Commit stores it as the workspace's snapshot.
	Snapshot []byte
}

// Event is one kernel event.
type Event struct {
	ID        int64 // assigned by the table
	Workspace int64
	Seq       int64 // the logged command that emitted it
	Index     int   // its place among that command's events
	Type      string
	AtMs      int64
	Body      []byte // the event's JSON object
}

// rowsPerInsert bounds the rows of one multi-row INSERT (6 or 9 parameters
// each, well under SQLite's limit); a power of two.
const rowsPerInsert = 128

// perInsert is how many of n rows (n > 0) the next multi-row INSERT takes: the
// largest power of two up to n and rowsPerInsert, so that only 8 statements
// of each kind are ever prepared (a group of 37 rows is 32 + 4 + 1).
func perInsert(n int) int {
	if n >= rowsPerInsert {
		return rowsPerInsert
	}
	return 1 << (bits.Len(uint(n)) - 1)
}

var (
	eventsSQL [rowsPerInsert + 1]string
	sqlOnce   sync.Once
)

func buildSQL() {
	for n := 1; n <= rowsPerInsert; n *= 2 {
		vals := strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?), ", n), ", ")
		eventsSQL[n] = `INSERT OR IGNORE INTO events(workspace_id, seq, idx, type, at_ms, body) VALUES ` + vals
	}
}

func insertEventsSQL(n int) string { sqlOnce.Do(buildSQL); return eventsSQL[n] }

// LogKeep is how many log records before a workspace's newest snapshot are
// kept; older ones are deleted when a snapshot is written.
const LogKeep = 4096

// begin starts a transaction on db for what (a commit, a ledger append),
// once fault, a test's seam, when set, has not failed it.
func begin(db *sql.DB, what string, fault func() error) (*sql.Tx, error) {
	tx, err := db.Begin()
	if err != nil {
		return nil, fmt.Errorf("store: begin %s: %w", what, err)
	}
	if fault != nil {
		if err := fault(); err != nil {
			tx.Rollback()
			return nil, fmt.Errorf("store: %s: %w", what, err)
		}
	}
	return tx, nil
}

// Commit writes recs, in order, in one transaction: all or nothing.
func (s *Store) Commit(recs []Record) error {
	if err := s.commitLog(recs); err != nil {
		return err
	}
	for i := range recs {
		if r := &recs[i]; r.Snapshot != nil {
			if err := s.SaveSnapshot(r.Workspace, r.Seq, r.Snapshot); err != nil {
				return err
			}
		}
	}
	return nil
}

// commitLog is Commit's transaction: each workspace's commands in runs
// (logruns.go), a row each. A run that would overlap one already logged
// fails the whole commit, as a repeated seq did when the log had a row per
// command.
func (s *Store) commitLog(recs []Record) error {
	s.logWrite.Lock()
	defer s.logWrite.Unlock()
	tx, err := begin(s.db, "commit", s.opts.BeforeCommit)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ins := tx.Stmt(s.insRun)
	var logged map[int64]int64 // this commit's runs: the last seq of each workspace
	for _, run := range runs(recs) {
		first, last := run[0].Seq, run[len(run)-1].Seq
		ws := run[0].Workspace
		prev, ok := logged[ws]
		if !ok {
			prev, ok = s.lastLogged[ws]
		}
		if !ok {
			if err := tx.Stmt(s.lastSeq).QueryRow(ws).Scan(&prev); err != nil {
				return fmt.Errorf("store: log commands %d-%d of workspace %d: %w", first, last, ws, err)
			}
		}
		if prev >= first {
			return fmt.Errorf("store: log commands %d-%d of workspace %d: commands up to %d are logged already", first, last, ws, prev)
		}
		maxMs := run[0].NowMs
		for i := range run {
			maxMs = max(maxMs, run[i].NowMs)
		}
		s.runBuf = packRun(s.runBuf[:0], run)
		if _, err := ins.Exec(ws, first, last, maxMs, s.runBuf); err != nil {
			return fmt.Errorf("store: log commands %d-%d of workspace %d: %w", first, last, ws, err)
		}
		if logged == nil {
			logged = make(map[int64]int64, 1)
		}
		logged[ws] = last
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	if s.lastLogged == nil {
		s.lastLogged = map[int64]int64{}
	}
	for ws, last := range logged {
		s.lastLogged[ws] = last
	}
	return nil
}

// AppendEvents writes events in one transaction of the events database.
// An event already there (same workspace, seq and index: a replay) is
// kept as it was.
func (s *Store) AppendEvents(events []Event) error {
	tx, err := s.edb.Begin()
	if err != nil {
		return fmt.Errorf("store: begin events: %w", err)
	}
	defer tx.Rollback()
	for start := 0; start < len(events); {
		chunk := events[start : start+perInsert(len(events)-start)]
		start += len(chunk)
		args := make([]any, 0, 6*len(chunk))
		for _, e := range chunk {
			args = append(args, e.Workspace, e.Seq, e.Index, e.Type, e.AtMs, string(e.Body))
		}
		st, err := s.stmt(s.edb, &s.eventStmts, insertEventsSQL(len(chunk)), len(chunk))
		if err != nil {
			return err
		}
		if _, err := tx.Stmt(st).Exec(args...); err != nil {
			return fmt.Errorf("store: write %d events of workspace %d from command %d: %w",
				len(chunk), chunk[0].Workspace, chunk[0].Seq, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit events: %w", err)
	}
	return nil
}

// SaveSnapshot stores a workspace's snapshot taken after command seq (a
// snapshot older than the one stored is ignored), then deletes the log
// records more than LogKeep behind it that Options.LogKeepAfter does not
// keep. The snapshot goes to its own database file: writing it never holds
// up another workspace's commit. Only a snapshot of committed commands may
// be saved.
func (s *Store) SaveSnapshot(ws, seq int64, state []byte) error {
	if s.opts.BeforeSnapshot != nil {
		s.opts.BeforeSnapshot()
	}
	if _, err := s.sdb.Exec(`INSERT INTO snapshots(workspace_id, seq, state) VALUES(?, ?, ?)
		ON CONFLICT(workspace_id) DO UPDATE SET seq = excluded.seq, state = excluded.state
		WHERE excluded.seq >= snapshots.seq`, ws, seq, state); err != nil {
		return fmt.Errorf("store: snapshot workspace %d at %d: %w", ws, seq, err)
	}
	keep := int64(LogKeep)
	if s.opts.LogKeep > 0 {
		keep = s.opts.LogKeep
	}
	trim := seq - keep
	if s.opts.LogKeepAfter != nil {
		trim = min(trim, s.opts.LogKeepAfter(ws))
	}
	if trim > 0 {
		if err := s.trimLog(ws, trim); err != nil {
			return fmt.Errorf("store: trim log of workspace %d: %w", ws, err)
		}
	}
	return nil
}

// trimLog deletes workspace ws's logged commands up to seq trim, in one
// transaction: the rows of log, and the runs that end by it.
func (s *Store) trimLog(ws, trim int64) error {
	s.logWrite.Lock()
	defer s.logWrite.Unlock()
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Stmt(s.delLog).Exec(ws, trim); err != nil {
		return err
	}
	if _, err := tx.Stmt(s.delRuns).Exec(ws, trim); err != nil {
		return err
	}
	return tx.Commit()
}

// snapshot reads a workspace's newest snapshot: from snapshots.db, or from
// the snapshots table of leaseplane.db, where data folders of 0.1 keep it.
func (s *Store) snapshot(ctx context.Context, ws int64) (snap []byte, seq int64, err error) {
	for _, db := range []*sql.DB{s.sdb, s.db} {
		var st []byte
		var sq int64
		err := db.QueryRowContext(ctx, `SELECT seq, state FROM snapshots WHERE workspace_id = ?`, ws).Scan(&sq, &st)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("store: read snapshot of workspace %d: %w", ws, err)
		}
		if snap == nil || sq > seq {
			snap, seq = st, sq
		}
	}
	return snap, seq, nil
}

// Load reads what recovers a workspace: its snapshot (nil when none) and
// the seq it follows, then the logged commands after it, in order.
func (s *Store) Load(ctx context.Context, ws int64) (snap []byte, snapSeq int64, recs []Record, err error) {
	snap, snapSeq, err = s.snapshot(ctx, ws)
	if err != nil {
		return nil, 0, nil, err
	}
	err = s.readLog(ctx, ws, snapSeq, func(x logged) bool {
		x.Events = nil // Load leaves them empty (LogEvents reads them)
		recs = append(recs, x.Record)
		return true
	})
	if err != nil {
		return nil, 0, nil, err
	}
	want := snapSeq + 1
	for _, r := range recs {
		if r.Seq != want {
			return nil, 0, nil, fmt.Errorf("store: log of workspace %d has a gap: command %d follows %d", ws, r.Seq, want-1)
		}
		want++
	}
	return snap, snapSeq, recs, nil
}

// Events lists a workspace's events with id above afterID, oldest first,
// at most limit of them.
func (s *Store) Events(ctx context.Context, ws, afterID int64, limit int) ([]Event, error) {
	rows, err := s.edb.QueryContext(ctx, `SELECT id, seq, idx, type, at_ms, body FROM events
		WHERE workspace_id = ? AND id > ? ORDER BY id LIMIT ?`, ws, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: read events of workspace %d: %w", ws, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e := Event{Workspace: ws}
		var body string
		if err := rows.Scan(&e.ID, &e.Seq, &e.Index, &e.Type, &e.AtMs, &body); err != nil {
			return nil, fmt.Errorf("store: read events of workspace %d: %w", ws, err)
		}
		e.Body = []byte(body)
		out = append(out, e)
	}
	return out, rows.Err()
}

// LastStampMs is the newest time any logged command was applied at (0
// for an empty log): the server's clock never starts below it. The log
// keeps at least LogKeep records behind each snapshot, so the newest is
// always there.
func (s *Store) LastStampMs() (int64, error) {
	var ms int64
	if err := s.db.QueryRow(`SELECT max(COALESCE((SELECT MAX(now_ms) FROM log), 0), COALESCE((SELECT MAX(max_ms) FROM log_runs), 0))`).Scan(&ms); err != nil {
		return 0, fmt.Errorf("store: read the newest command time: %w", err)
	}
	return ms, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("store: ping %s: %w", s.path, err)
	}
	return nil
}
