// Package server is the lease plane's HTTP host: the REST routes, API keys
// and workspaces, one kernel machine per workspace with its alarm, durable
// state through server/store (a command log with group commit, snapshots),
// the signed ledger (server/ledger) or the events sink, Prometheus metrics
// and health. docs/SERVER.md is the operator's description (routes, keys
// and roles, the data folder, durability, alarms, metrics); this comment
// says what a change here must keep true.
//
// A request, REST (http.go) or MCP (server/mcp), is authenticated and its
// key's role checked before its body is decoded; then the command is applied
// to the key's workspace, one at a time under the workspace's lock. A command
// that changed state is handed, in order, to the one committer goroutine
// (commit.go), and its answer leaves only after the transaction that holds it
// has committed; a command that changed nothing waits for the commit of the
// last change it may have seen, so no answer shows state a crash could take
// back. When a commit fails, its commands and the workspace's later
// uncommitted ones are answered 503 and the workspace is rebuilt from disk
// (snapshot plus log) before it decides again.
//
// Time comes from Config.Clock and timers from Config.AfterFunc, so tests
// drive both; the events a command made reach the ledger before its answer
// leaves, and under Config.NoLedger the events sink after it, which never
// blocks a command.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// Config configures a Server.
type Config struct {
	// DataDir holds the SQLite database; created when missing.
	DataDir string
	// Engine makes each workspace's machine (kernel.Native or the wasm one).
	Engine kernel.Factory
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Clock is the wall clock. Required: only cmd/ owns the real clock and
	// passes time.Now. The server reads it once at start: the time commands
	// are applied at is that reading (or the newest stamp on disk, when
	// later) plus the time since by Monotonic, so a step of the wall clock
	// never moves the plane's time.
	Clock func() time.Time
	// Monotonic, when set, is a clock that never steps (any fixed origin).
	// nil means the monotonic reading that time.Now carries, through
	// Clock; tests pass a fake to step Clock alone.
	Monotonic func() time.Duration
	// AfterFunc runs f after d and returns a function that cancels it (as
	// time.AfterFunc and Timer.Stop do); nil means time.AfterFunc. Tests
	// pass a fake that fires when they advance their clock.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// MaxBodyBytes bounds request bodies (413 above it); 0 means 8192.
	MaxBodyBytes int64
	// BodyTimeout bounds how long a request body may take to arrive once
	// its headers have (408 after it); 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// MaxConns bounds the connections served at once; further ones wait
	// in the operating system's queue. 0 means DefaultMaxConns.
	MaxConns int
	// UnauthConns bounds the connections open at once that have not yet
	// presented a valid key (a share of MaxConns: when it is full, a new
	// connection takes the place of the oldest one of the address that
	// holds the most). 0 means MaxConns/4; it is at most MaxConns/2.
	UnauthConns int
	// UnauthConnsPerAddr bounds those from one source address (further
	// ones are closed at once). 0 means DefaultUnauthPerAddr.
	UnauthConnsPerAddr int
	// HeaderTimeout bounds how long a request's headers may take to
	// arrive; 0 means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout bounds how long an authenticated keep-alive connection
	// may wait for its next request; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// UnauthTimeout bounds every read on a connection that has not
	// presented a valid key (the idle wait for a next request included);
	// 0 means DefaultUnauthTimeout.
	UnauthTimeout time.Duration
	// WriteTimeout bounds each write to a connection (a client that stops
	// reading its answers is cut off after it); 0 means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MaxHeld bounds the held requests (lease ?waitUpToMs=N, MCP held
	// acquires) open at once in the plane: 429 limit_exceeded with limit
	// heldRequests past it. 0 means MaxConns/2; it is below MaxConns.
	MaxHeld int
	// MaxHeldPerKey bounds those of one key; 0 means DefaultMaxHeldPerKey.
	MaxHeldPerKey int
	// MetricsWorkspaces serves the series labelled with workspace names on
	// /metrics to everyone (for a plane whose port only the operator's
	// scraper reaches); otherwise only to a scrape with MetricsToken.
	MetricsWorkspaces bool
	// MetricsToken, when set, is a bearer token that lets a scrape of
	// /metrics see the series labelled with workspace names.
	MetricsToken string
	// SnapshotEvery is how many logged commands of a workspace go between
	// snapshots; 0 means 1000.
	SnapshotEvery int
	// LogKeep is how many logged commands behind a workspace's newest
	// snapshot are kept; 0 means store.LogKeep (tests set fewer).
	LogKeep int64
	// KeyCacheTTL is how long a looked-up key is trusted before it is read
	// again; 0 means 2 s. A revocation does not wait for it: RevokeKey
	// takes effect at once, one by another process (leaseplane keys revoke)
	// within KeyPoll.
	KeyCacheTTL time.Duration
	// KeyPoll is how often the store's key epoch, raised by every
	// revocation, is read; 0 means DefaultKeyPoll.
	KeyPoll time.Duration
	// FirstRules are the kernel rules ({"readShared": [...]}) of the
	// workspace Bootstrap creates; empty means none.
	FirstRules []byte
	// NoLedger turns the signed ledger off (for measuring what it costs).
	NoLedger bool
	// PublicHost, when set, goes in front of the ledger origins of
	// workspaces made from now on: HOST/leaseplane/<workspace>.
	PublicHost string
	// LedgerRetention, when above 0, is how long ledger entry bodies are
	// kept once an export has covered them (POST /api/v1/ledger/exported);
	// then the entries and receipt routes answer 410 gone for them. Tree
	// hashes and checkpoints are kept forever. 0 keeps bodies forever.
	LedgerRetention time.Duration
	// LedgerRetainEvery is how often bodies past LedgerRetention are
	// looked for; 0 means a minute.
	LedgerRetainEvery time.Duration
	// faults are the test faults (faults.go): set only by this package's
	// tests and, in a build with the tag leaseplane_testfaults, by SetTestFaults.
	faults faults
}

// DefaultMaxBodyBytes is the request body limit when Config leaves it 0.
const DefaultMaxBodyBytes = 8192

// Server is the lease plane's HTTP host. Create it with New.
type Server struct {
	cfg     Config
	log     *slog.Logger
	engine  kernel.Factory
	store   *store.Store
	mux     *routeMux
	handler http.Handler
	metrics *metrics
	keys    keyCache
	keyMu   sync.Mutex // serializes syncKeyEpoch
	keyStop chan struct{}
	keyDone chan struct{}
	commit  *committer
	snaps   *snapshotter
	events  *eventSink
	clock   *planeClock
	bodies  bodyGuard
	conns   *connGuard
	held    heldRequests
	ledger  *ledger.Ledger // nil when Config.NoLedger
	hub     eventHub       // the events streams (events.go)

	wsMu       sync.RWMutex
	workspaces map[int64]*workspace

	// life guards closed: every request, tick and drill holds it for reading
	// while it runs; Shutdown takes it for writing, so it waits for them.
	life   sync.RWMutex
	closed bool
	// draining is closed when Shutdown begins: held lease requests answer
	// their last refusal instead of holding the drain up.
	draining  chan struct{}
	drainOnce sync.Once

	httpMu  sync.Mutex
	httpSrv []*http.Server
	// httpDown is set once Shutdown has taken httpSrv: a later Serve returns.
	httpDown bool

	unlock func() // releases the data directory's lock

	drills *drillRunner

	// heldAnswered, when set (tests), runs in a held request between its
	// durable answer and its write.
	heldAnswered func(ctx context.Context)
}

// orDefault sets *v to def when it is zero or less (a Config field left
// out).
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// New opens the store in cfg.DataDir, rebuilds every workspace's machine
// from its snapshot and log, arms their alarms and returns the server, not
// yet listening.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("server: Config.Engine is required (kernel.Native or the wasm factory)")
	}
	if cfg.Clock == nil {
		return nil, errors.New("server: Config.Clock is required (cmd passes time.Now)")
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	orDefault(&cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&cfg.BodyTimeout, DefaultBodyTimeout)
	orDefault(&cfg.MaxConns, DefaultMaxConns)
	orDefault(&cfg.UnauthConns, max(1, cfg.MaxConns/defaultUnauthFraction))
	cfg.UnauthConns = min(cfg.UnauthConns, max(1, cfg.MaxConns/2))
	orDefault(&cfg.UnauthConnsPerAddr, DefaultUnauthPerAddr)
	cfg.UnauthConnsPerAddr = min(cfg.UnauthConnsPerAddr, cfg.UnauthConns)
	orDefault(&cfg.MaxHeld, max(1, cfg.MaxConns/defaultHeldFraction))
	cfg.MaxHeld = min(cfg.MaxHeld, max(1, cfg.MaxConns-1))
	orDefault(&cfg.MaxHeldPerKey, DefaultMaxHeldPerKey)
	orDefault(&cfg.HeaderTimeout, DefaultHeaderTimeout)
	orDefault(&cfg.IdleTimeout, DefaultIdleTimeout)
	orDefault(&cfg.UnauthTimeout, DefaultUnauthTimeout)
	orDefault(&cfg.WriteTimeout, DefaultWriteTimeout)
	orDefault(&cfg.SnapshotEvery, 1000)
	orDefault(&cfg.KeyCacheTTL, 2*time.Second)
	orDefault(&cfg.KeyPoll, DefaultKeyPoll)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("server: Config.DataDir is required")
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var led *ledger.Ledger
	opts := store.Options{BeforeCommit: cfg.faults.commit, LedgerFault: cfg.faults.ledger, BeforeSnapshot: cfg.faults.snapshot,
		LogKeep: cfg.LogKeep}
	if !cfg.NoLedger {
		// The log is kept behind the ledger's position, so that the
		// ledger can always catch up from it.
		opts.LogKeepAfter = func(ws int64) int64 { return led.KeepAfter(ws) }
	}
	st, err := store.Open(cfg.DataDir, opts)
	if err != nil {
		unlock()
		return nil, err
	}
	last, err := st.LastStampMs()
	if err != nil {
		st.Close()
		unlock()
		return nil, err
	}
	clock := newPlaneClock(cfg.Clock, cfg.Monotonic, last)
	if !cfg.NoLedger {
		// The ledger stamps its writes with the plane's clock, from which
		// retention counts: a step of the system clock drops nothing early.
		now := func() time.Time { return time.UnixMilli(clock.nowMs(cfg.Clock)) }
		led, err = ledger.New(ledger.Config{Store: st, DataDir: cfg.DataDir, Host: cfg.PublicHost, Logger: log,
			Now: now, Retention: cfg.LedgerRetention, RetainEvery: cfg.LedgerRetainEvery})
		if err != nil {
			st.Close()
			unlock()
			return nil, err
		}
		led.Start()
	}
	s := &Server{
		cfg:        cfg,
		draining:   make(chan struct{}),
		log:        log,
		engine:     cfg.Engine,
		store:      st,
		mux:        &routeMux{ServeMux: http.NewServeMux()},
		workspaces: map[int64]*workspace{},
		unlock:     unlock,
		ledger:     led,
	}
	s.clock = clock
	s.keys.entries = map[string]keyEntry{}
	s.hub.wss = map[int64]*wsEvents{}
	s.bodies.reading = map[*guardedBody]struct{}{}
	s.held = heldRequests{max: cfg.MaxHeld, maxPerKey: cfg.MaxHeldPerKey, perKey: map[string]int{}, open: map[*heldSlot]struct{}{}}
	s.conns = newConnGuard(cfg.MaxConns, cfg.UnauthConns, cfg.UnauthConnsPerAddr, cfg.UnauthTimeout, cfg.WriteTimeout)
	s.metrics = newMetrics(s)
	s.commit = newCommitter(s)
	s.snaps = newSnapshotter(s)
	s.events = newEventSink(s)
	go s.commit.run()
	go s.snaps.run()
	go s.events.run()
	if err := s.syncKeyEpoch(context.Background()); err != nil {
		s.stopAll()
		return nil, err
	}
	s.keyStop, s.keyDone = make(chan struct{}), make(chan struct{})
	go s.watchKeys(s.keyStop, s.keyDone)
	wss, err := st.Workspaces()
	if err != nil {
		s.stopAll()
		return nil, err
	}
	for _, w := range wss {
		if store.IsDrillWorkspace(w.Name) {
			// left by a run that a stop interrupted
			if err := st.DeleteDrillWorkspace(w.ID); err != nil {
				s.stopAll()
				return nil, err
			}
			continue
		}
		if _, err := s.workspace(w.ID); err != nil {
			s.stopAll()
			return nil, err
		}
	}
	s.drills = newDrillRunner(s)
	s.routes()
	s.handler = securityHeaders(s.recoverer(s.guardBody(s.mux)))
	if err := s.drills.start(); err != nil {
		s.stopAll()
		return nil, err
	}
	log.Info("server ready", "data", st.Path(), "engine", cfg.Engine.Name(), "workspaces", len(wss))
	return s, nil
}

// nowMs is the plane's time: see planeClock.
func (s *Server) nowMs() int64 { return s.clock.nowMs(s.cfg.Clock) }

// Ledger is the server's signed ledger; nil when Config.NoLedger.
func (s *Server) Ledger() *ledger.Ledger { return s.ledger }

// Store is the server's store (for the ledger, tests and the CLI).
func (s *Server) Store() *store.Store { return s.store }

// Engine is the factory the server's machines come from.
func (s *Server) Engine() kernel.Factory { return s.engine }

// Handle mounts h at pattern on the server's mux (web pages, /mcp). It
// panics on a pattern that conflicts with another, as ServeMux does.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Handler is the server's HTTP handler: every route, with panics answered
// 500 instead of dropping the connection.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers HTTP on ln until Shutdown; it returns nil after Shutdown.
// At most Config.MaxConns connections are served at once, at most
// Config.UnauthConns of them without a valid key (see connGuard); request
// headers must arrive within Config.HeaderTimeout and bodies within
// Config.BodyTimeout.
func (s *Server) Serve(ln net.Listener) error { return s.serve(ln, nil) }

// ServeTLS is Serve over TLS with cert (the certificate and its chain).
func (s *Server) ServeTLS(ln net.Listener, cert tls.Certificate) error {
	return s.serve(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

func (s *Server) serve(ln net.Listener, tc *tls.Config) error {
	ln = &guardListener{Listener: ln, g: s.conns, closed: make(chan struct{})}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ConnContext:       withConn,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.httpMu.Lock()
	if s.httpDown {
		// Shutdown came first: it would not know to stop this one.
		s.httpMu.Unlock()
		ln.Close()
		return nil
	}
	s.httpSrv = append(s.httpSrv, hs)
	s.httpMu.Unlock()
	var err error
	if tc != nil {
		hs.TLSConfig = tc
		err = hs.ServeTLS(ln, "", "")
	} else {
		err = hs.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting requests, lets those under way finish (each
// waits for its commit), stops the alarms, commits what is queued, writes
// a snapshot of every workspace and closes the store. A request whose body
// is still arriving is not waited for: its read fails at once and it is
// answered 503. ctx bounds the wait for HTTP requests; when it ends, the
// connections left are closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.drainOnce.Do(func() { close(s.draining) })
	var first error
	s.httpMu.Lock()
	s.httpDown = true
	srvs := s.httpSrv
	s.httpMu.Unlock()
	s.bodies.expireBodies()
	for _, hs := range srvs {
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
			if first == nil {
				first = fmt.Errorf("server: drain HTTP: %w", err)
			}
		}
	}
	if s.drills != nil {
		s.drills.stop()
	}
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return first
	}
	s.closed = true
	s.life.Unlock()
	if err := s.stopAll(); err != nil && first == nil {
		first = err
	}
	s.log.Info("server stopped")
	return first
}

// stopAll stops alarms and the committer, snapshots every workspace whose
// memory matches the disk, and closes the store.
func (s *Server) stopAll() error {
	s.wsMu.Lock()
	wss := make([]*workspace, 0, len(s.workspaces))
	for _, ws := range s.workspaces {
		wss = append(wss, ws)
	}
	s.wsMu.Unlock()
	for _, ws := range wss {
		ws.mu.Lock()
		ws.disarm()
		ws.closed = true
		ws.mu.Unlock()
	}
	if s.keyStop != nil {
		close(s.keyStop)
		<-s.keyDone
	}
	s.commit.stop()
	s.snaps.stop()
	s.events.stop()
	if s.ledger != nil {
		s.ledger.Stop()
	}
	var first error
	for _, ws := range wss {
		ws.mu.Lock()
		if ws.eng != nil && !ws.needsReload() && ws.sinceSnap > 0 {
			snap, err := ws.eng.Snapshot()
			if err == nil {
				err = s.store.SaveSnapshot(ws.id, ws.seq, snap)
			}
			if err != nil {
				s.log.Error("snapshot on shutdown failed", "workspace", ws.name, "err", err)
				if first == nil {
					first = err
				}
			}
		}
		if ws.eng != nil {
			ws.eng.Close()
			ws.eng = nil
		}
		ws.mu.Unlock()
	}
	if err := s.store.Close(); err != nil && first == nil {
		first = fmt.Errorf("server: close store: %w", err)
	}
	s.unlock()
	return first
}

// Bootstrap makes a first workspace named name with one workspace key when
// the store has no workspace at all, and returns the key; created is false
// (and key empty) when some workspace already exists.
func (s *Server) Bootstrap(name string) (key string, created bool, err error) {
	wss, err := s.store.Workspaces()
	if err != nil {
		return "", false, err
	}
	if len(wss) > 0 {
		return "", false, nil
	}
	now := s.nowMs()
	if len(s.cfg.FirstRules) > 0 {
		if _, err := kernel.ParseRules(s.cfg.FirstRules); err != nil {
			return "", false, fmt.Errorf("server: rules of the first workspace: %w", err)
		}
	}
	w, _, err := s.store.EnsureWorkspace(name, s.cfg.FirstRules, now)
	if err != nil {
		return "", false, err
	}
	key, _, err = s.store.CreateKey(w, store.RoleWorkspace, "", now)
	if err != nil {
		return "", false, err
	}
	if _, err := s.workspace(w.ID); err != nil {
		return "", false, err
	}
	return key, true, nil
}
