package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/mcp"
)

// defaultEngine is what serve runs without --engine. The wasm engine would
// be the default once its end-to-end throughput is at least 80 % of
// native's; the "Server" section of docs/BENCHMARKS.md has the measurement
// behind the choice.
const defaultEngine = "native"

// firstWorkspace is the workspace a first start on an empty data folder
// creates, with one workspace key it prints.
const firstWorkspace = "default"

// Defaults of serve's --addr and --data; LEASEPLANE_ADDR and LEASEPLANE_DATA
// replace them.
const (
	defaultAddr = "127.0.0.1:8080"
	defaultData = "./data"
)

// envOr is the environment variable name's value, or def when it is unset
// or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// testFaults, when set, adds serve's test-only flags (--test-fault,
// --test-drills) and returns what applies them: only in a binary built
// with the tag leaseplane_testfaults (package testfaults), never in the
// product binary nor in this package's untagged tests.
var testFaults func(fs *flag.FlagSet) func(*server.Config, io.Writer) bool

// serveEnv is what the process gives serve: the real clock and timers, the
// signals that stop it. Tests give their own.
type serveEnv struct {
	clock     func() time.Time
	afterFunc func(time.Duration, func()) func() bool
	// ready, when set, gets the listening address.
	ready func(addr string)
}

func runServe(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if p, ok := serveGC(os.Getenv("GOGC")); ok {
		debug.SetGCPercent(p)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, args, stdout, stderr, serveEnv{clock: time.Now})
}

// serve runs the server until ctx ends, then shuts it down gracefully.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, env serveEnv) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr("LEASEPLANE_ADDR", defaultAddr), "address to listen on (env LEASEPLANE_ADDR); port 0 picks a free one")
	data := fs.String("data", envOr("LEASEPLANE_DATA", defaultData), "data folder (the SQLite database), created when missing (env LEASEPLANE_DATA)")
	engine := fs.String("engine", defaultEngine, "engine to run each workspace's kernel in: native or wasm")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logJSON := fs.Bool("log-json", false, "write logs as JSON lines instead of text")
	noLedger := fs.Bool("no-ledger", false, "run without the signed ledger (to measure what it costs)")
	retention := fs.Duration("ledger-retention", 0, "drop ledger entry bodies this long after they were written, once an export covered them (e.g. 720h); hashes and checkpoints are kept; 0 keeps them forever")
	publicHost := fs.String("public-host", "", "public host name put in front of the ledger origins of workspaces made from now on (HOST/leaseplane/W)")
	mcpNames := fs.String("mcp-tool-names", mcp.NamesDotted, "how /mcp's tools/list spells the tools: dotted (coordination.lease.acquire) or underscore (coordination_lease_acquire, for Claude Desktop, Codex, Copilot); tools/call takes both")
	rules := fs.String("rules", "", `rules of the workspace a first start creates, e.g. {"readShared":["file:"]} (later ones: keys create --rules)`)
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (and its chain); needs --tls-key")
	tlsKey := fs.String("tls-key", "", "the PEM private key of --tls-cert")
	metricsWorkspaces := fs.Bool("metrics-workspaces", false, "show the series labelled with workspace names on /metrics to every scrape (for a port only your scraper reaches); without it only to a scrape with --metrics-token-file's token")
	metricsTokenFile := fs.String("metrics-token-file", "", "a file holding a token; a scrape of /metrics with Authorization: Bearer TOKEN also gets the series labelled with workspace names")
	maxConns := fs.Int("max-conns", server.DefaultMaxConns, "connections served at once; further ones wait in the operating system's queue")
	unauthConns := fs.Int("unauth-conns", 0, "of those, connections open at once that have not presented a valid key (0: a quarter of --max-conns; at most half)")
	unauthPerAddr := fs.Int("unauth-conns-per-addr", server.DefaultUnauthPerAddr, "of those, connections from one source address (further ones are closed at once)")
	maxHeld := fs.Int("max-held", 0, "held lease requests (?waitUpToMs=N, MCP) open at once in the plane, 429 past it (0: half of --max-conns; below it)")
	maxHeldPerKey := fs.Int("max-held-per-key", server.DefaultMaxHeldPerKey, "held lease requests open at once per key, 429 past it")
	headerTimeout := fs.Duration("header-timeout", server.DefaultHeaderTimeout, "how long a request's headers may take to arrive")
	bodyTimeout := fs.Duration("body-timeout", server.DefaultBodyTimeout, "how long a request's body may take to arrive (408 after it)")
	idleTimeout := fs.Duration("idle-timeout", server.DefaultIdleTimeout, "how long an authenticated keep-alive connection may wait for its next request")
	unauthTimeout := fs.Duration("unauth-timeout", server.DefaultUnauthTimeout, "the longest any read may wait on a connection that has not presented a valid key (its idle wait included)")
	writeTimeout := fs.Duration("write-timeout", server.DefaultWriteTimeout, "how long each write to a client may take (a client that stops reading is cut off)")
	drainTimeout := fs.Duration("drain-timeout", 10*time.Second, "on SIGTERM, how long requests under way may take to finish before their connections are closed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the server to this file, from its start until it stops (read it with go tool pprof)")
	var applyTestFaults func(*server.Config, io.Writer) bool
	if testFaults != nil {
		applyTestFaults = testFaults(fs)
	}
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: leaseplane serve [--addr 127.0.0.1:8080] [--data ./data] [--engine native|wasm]")
		printFlags(fs)
	}
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "leaseplane serve: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max-conns", *maxConns}, {"unauth-conns", *unauthConns}, {"unauth-conns-per-addr", *unauthPerAddr},
		{"max-held", *maxHeld}, {"max-held-per-key", *maxHeldPerKey}} {
		if f.v < 0 || f.v == 0 && f.name != "unauth-conns" && f.name != "max-held" {
			fmt.Fprintf(stderr, "leaseplane serve: --%s %d: want a number above 0\n", f.name, f.v)
			return 2
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"header-timeout", *headerTimeout}, {"body-timeout", *bodyTimeout}, {"idle-timeout", *idleTimeout},
		{"unauth-timeout", *unauthTimeout}, {"write-timeout", *writeTimeout}, {"drain-timeout", *drainTimeout}} {
		if f.v <= 0 {
			fmt.Fprintf(stderr, "leaseplane serve: --%s %s: want a duration above 0\n", f.name, f.v)
			return 2
		}
	}
	if *unauthConns > *maxConns/2 {
		fmt.Fprintf(stderr, "leaseplane serve: --unauth-conns %d: at most half of --max-conns (%d), so that connections without a key never take those tenants need\n", *unauthConns, *maxConns)
		return 2
	}
	if *maxHeld >= *maxConns {
		fmt.Fprintf(stderr, "leaseplane serve: --max-held %d: must be below --max-conns (%d), so that held requests never take every connection\n", *maxHeld, *maxConns)
		return 2
	}
	if *retention < 0 || (*retention > 0 && *noLedger) {
		fmt.Fprintf(stderr, "leaseplane serve: --ledger-retention %s: want a duration of 0 or more, and a ledger (not with --no-ledger)\n", *retention)
		return 2
	}
	var metricsToken string
	if *metricsTokenFile != "" {
		b, err := os.ReadFile(*metricsTokenFile)
		if metricsToken = strings.TrimSpace(string(b)); err != nil || len(metricsToken) < 16 {
			fmt.Fprintf(stderr, "leaseplane serve: --metrics-token-file %s: want a file holding a token of 16 characters or more (%v)\n", *metricsTokenFile, err)
			return 2
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "leaseplane serve: --log-level %q: want debug, info, warn or error\n", *logLevel)
		return 2
	}
	hopts := &slog.HandlerOptions{Level: level}
	var logger *slog.Logger
	if *logJSON {
		logger = slog.New(slog.NewJSONHandler(stderr, hopts))
	} else {
		logger = slog.New(slog.NewTextHandler(stderr, hopts))
	}
	toolNames, err := mcp.ParseToolNames(*mcpNames)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane serve: --mcp-tool-names: %v\n", err)
		return 2
	}
	mk, ok := engines[*engine]
	if !ok {
		fmt.Fprintf(stderr, "leaseplane serve: unknown engine %q (have %s)\n", *engine, strings.Join(engineNames(), ", "))
		return 2
	}
	var cert *tls.Certificate
	if (*tlsCert == "") != (*tlsKey == "") {
		fmt.Fprintln(stderr, "leaseplane serve: --tls-cert and --tls-key go together")
		return 2
	}
	if *tlsCert != "" {
		c, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane serve: --tls-cert %s, --tls-key %s: %v\n", *tlsCert, *tlsKey, err)
			return 2
		}
		cert = &c
	}
	// Bind before anything is created: a first start that cannot listen
	// must not make the workspace whose key it could then never show.
	ln, err := server.Listen(*addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "leaseplane serve: %s is already in use: another process (perhaps another leaseplane) listens there; nothing was created or changed\n", *addr)
		} else {
			fmt.Fprintf(stderr, "leaseplane serve: cannot listen on %s: %v\n", *addr, err)
		}
		fmt.Fprintf(stderr, "leaseplane serve: pick another address with --addr 127.0.0.1:18080, LEASEPLANE_ADDR=127.0.0.1:18080, or make run ADDR=127.0.0.1:18080 (port 0 picks a free one)\n")
		return 1
	}
	defer ln.Close()
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane serve: --cpuprofile %s: %v\n", *cpuProfile, err)
			return 2
		}
		defer stopProfile()
	}
	factory, err := mk()
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane serve: engine %s: %v\n", *engine, err)
		return 1
	}
	cfg := server.Config{
		DataDir:         *data,
		Engine:          factory,
		Logger:          logger,
		Clock:           env.clock,
		AfterFunc:       env.afterFunc,
		FirstRules:      []byte(*rules),
		NoLedger:        *noLedger,
		PublicHost:      *publicHost,
		LedgerRetention: *retention,

		MaxConns:           *maxConns,
		UnauthConns:        *unauthConns,
		UnauthConnsPerAddr: *unauthPerAddr,
		HeaderTimeout:      *headerTimeout,
		BodyTimeout:        *bodyTimeout,
		IdleTimeout:        *idleTimeout,
		UnauthTimeout:      *unauthTimeout,
		WriteTimeout:       *writeTimeout,
		MaxHeld:            *maxHeld,
		MaxHeldPerKey:      *maxHeldPerKey,
		MetricsWorkspaces:  *metricsWorkspaces,
		MetricsToken:       metricsToken,
	}
	if applyTestFaults != nil && !applyTestFaults(&cfg, stderr) {
		return 2
	}
	srv, err := server.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane serve: %v\n", err)
		return 1
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), *drainTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			logger.Error("shutdown", "err", err)
		}
	}
	key, created, err := srv.Bootstrap(firstWorkspace)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane serve: create the first workspace: %v\n", err)
		shutdown()
		return 1
	}
	for _, mount := range mounts {
		if err := mount(srv, mountOptions{mcpToolNames: toolNames}); err != nil {
			fmt.Fprintf(stderr, "leaseplane serve: %v\n", err)
			shutdown()
			return 1
		}
	}
	url := "http://" + ln.Addr().String()
	if cert != nil {
		url = "https://" + ln.Addr().String()
	} else if !loopbackOnly(ln.Addr()) {
		fmt.Fprintf(stderr, "leaseplane serve: warning: serving on %s without TLS: keys and leases cross the network in clear; "+
			"give --tls-cert and --tls-key, or put a TLS proxy in front and listen on 127.0.0.1\n", ln.Addr())
	}
	if created {
		fmt.Fprintf(stdout, "leaseplane: first start on an empty data folder: created workspace %q and a workspace key.\n", firstWorkspace)
		fmt.Fprintf(stdout, "leaseplane: it is shown only now; more with: leaseplane keys create --data %s --workspace %s\n", *data, firstWorkspace)
		fmt.Fprintf(stdout, "export LEASEPLANE_KEY=%s\n", key)
	}
	fmt.Fprintf(stdout, "leaseplane: serving on %s (engine %s, data %s)\n", url, factory.Name(), *data)
	fmt.Fprintf(stdout, "export LEASEPLANE_URL=%s\n", url)
	if env.ready != nil {
		env.ready(ln.Addr().String())
	}
	trimCtx, stopTrim := context.WithCancel(ctx)
	defer stopTrim()
	go trimAfterBursts(trimCtx)
	errc := make(chan error, 1)
	go func() {
		if cert != nil {
			errc <- srv.ServeTLS(ln, *cert)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case <-ctx.Done():
		logger.Info("stopping: draining requests and committing")
		shutdown()
		<-errc
		return 0
	case err := <-errc:
		shutdown()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintf(stderr, "leaseplane serve: %v\n", err)
			return 1
		}
		return 0
	}
}

// startCPUProfile starts profiling this process's CPU into a new file at
// path; the caller must call stop, which writes the profile's end and
// closes the file, before the process exits.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// loopbackOnly reports whether addr can be reached only from this machine.
func loopbackOnly(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
