// Command leaseplane-bench is the load tool of docs/BENCHMARKS.md "Server
// load": it measures the lease plane against its peers, each driven by its
// own users' client library, in one run on one machine.
//
// It is a module of its own (this folder's go.mod, with a replace to the
// repository's root module) so that go-redis and etcd's client never enter
// the product's dependencies: `go build ./cmd/leaseplane` pulls in neither.
//
// Targets, each started by the tool on loopback, afresh for every
// workload:
//   - leaseplane/ENGINE: `leaseplane serve` as its own process, as users
//     run it (the binary built from this repository, or --server-binary; a
//     temporary data folder; --addr 127.0.0.1:0; the key its first start
//     prints), driven through its REST client, server/client;
//     with --in-process, leaseplane/ENGINE/in-process: the real server
//     (server.New) inside the tool's own process instead;
//   - redis and redis-aof: Debian's redis-server without persistence, and
//     with appendonly and appendfsync always, driven by go-redis v9
//     (SET NX with a 30 s expiry, released by a Lua compare-and-delete;
//     a refused client retries after 50-250 ms, redsync's default);
//   - etcd: a single-node etcd (Debian's etcd-server, fsync on), driven by
//     clientv3's concurrency.Mutex (Lock waits on a watch);
//   - bare-map (--bare): the lease routes on a Go map behind net/http in
//     the tool's process, the ceiling of the HTTP stack and the load
//     generator.
//
// Workloads, each with 64 clients by default:
//   - spread: each client on resources of its own, acquire+release pairs;
//   - contended: all clients on 4 resources, each waiting the way its
//     system's users wait, releasing at once;
//   - queue: the same, but each holder works 1 ms before releasing, so
//     queues form; its figure is the time from the first ask to the grant.
//     leaseplane is measured twice: held (client.Holder: the plane holds
//     each acquire, ?waitUpToMs) and polled (ask, sleep the refusal's
//     stampede.waitMs, ask again).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // a target or workload could not be measured
	exitUsage   = 2
	warmUp      = 500 * time.Millisecond
	queueHoldMs = 1
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// target is one system under load, started for one workload.
type target interface {
	name() string
	// worker makes client i, with a connection of its own. polled asks a
	// leaseplane worker to poll (sleep stampede.waitMs and ask again)
	// instead of having its acquires held; peers ignore it.
	worker(i int, polled bool) (worker, error)
	close() error
}

// worker is one client. acquire returns once the lock on res is granted,
// waiting the way the system's users wait, or with ctx's error when ctx
// ends first; release gives the lock back.
type worker interface {
	acquire(ctx context.Context, res string) error
	release(ctx context.Context, res string) error
	close()
}

// daemonPIDer is a target served by a separate process.
type daemonPIDer interface{ daemonPID() int }

// commitStatser is a target that can tell its commit counters.
type commitStatser interface{ commitStats() commitStats }

// commitStats are the plane's group-commit counters, from /metrics, and
// its time answering releases (from a release's arrival to its durable
// answer).
type commitStats struct {
	commits, commands, seconds float64
	releases, releaseSeconds   float64
}

func (a commitStats) minus(b commitStats) commitStats {
	return commitStats{a.commits - b.commits, a.commands - b.commands, a.seconds - b.seconds,
		a.releases - b.releases, a.releaseSeconds - b.releaseSeconds}
}

// result is one workload's figures on one target in one run.
type result struct {
	target, workload string
	run              int // 0 for the first
	elapsed          time.Duration
	pairs            int64 // pairs ended inside the measured span
	made             int64 // every pair completed, warm-up and stop included
	errors           int64
	firstErr         error
	pairLat          []time.Duration // ask to released, per pair
	grantLat         []time.Duration // ask to granted, per pair
	handoff          handoff         // queue workload: where a handoff's time goes
	commits          commitStats
	cpu              time.Duration // this process and the target's daemon
	daemonCPU        time.Duration // of which the target's daemon (its server process)
}

func (r result) pairsPerSec() float64 { return float64(r.pairs) / r.elapsed.Seconds() }

func (r result) cpuPerPair() time.Duration {
	if r.pairs == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.pairs)
}

// latency is the workload's latency: ask to grant in the queue workload,
// the whole pair otherwise.
func (r result) latency() []time.Duration {
	if r.workload == "queue" {
		return r.grantLat
	}
	return r.pairLat
}

// pct is the p-quantile of sorted latencies.
func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[int(float64(len(lat)-1)*p)]
}

const help = `usage: leaseplane-bench [flags]

Measures durable leaseplane (leaseplane serve as its own process, built
from this repository) against Redis (go-redis) and etcd (clientv3
concurrency.Mutex), each started by the tool on loopback, with N clients
in three workloads (spread, contended, queue; queue both held and polled
for leaseplane), and prints one table per workload with each target's
ratio to etcd and to Redis, then the issues' goals. With --runs N, each
figure is the median of N runs. See docs/BENCHMARKS.md "Server load".`

// spec is a target the tool can start.
type spec struct {
	label string
	plane bool // leaseplane: the queue workload runs held and polled
	// open starts the target; profile, when set, is where a leaseplane
	// target's CPU profile goes.
	open func(profile string) (target, error)
}

// job is one measurement: a target, a workload and, for leaseplane in the
// queue workload, the way its clients wait.
type job struct {
	spec
	workload string
	polled   bool
}

// row is the job's label in its workload's table.
func (j job) row() string {
	if !j.plane || j.workload != "queue" {
		return j.label
	}
	if j.polled {
		return j.label + "/polled"
	}
	return j.label + "/held"
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leaseplane-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clients := fs.Int("clients", 64, "concurrent clients")
	dur := fs.Duration("duration", 5*time.Second, "measured time per workload (after a 0.5 s warm-up); with --pairs, the most a workload may take before it fails")
	pairs := fs.Int64("pairs", 0, "measure each workload until this many pairs are counted (after the warm-up) instead of for --duration; a workload that has not made them within --duration fails")
	runs := fs.Int("runs", 1, "runs of every target and workload; each figure printed is the median of the runs")
	engineList := fs.String("engines", "native", "comma-separated leaseplane engines: native, wasm (empty: none)")
	inProcess := fs.Bool("in-process", false, "run the leaseplane server inside this process (server.New) instead of as `leaseplane serve`; its rows say /in-process")
	serverBin := fs.String("server-binary", "", "the leaseplane binary to run (default: built from this repository into a temporary folder)")
	peers := fs.String("peers", "redis,redis-aof,etcd", "comma-separated peers: redis, redis-aof, etcd (empty: none)")
	bare := fs.Bool("bare", false, "also measure a bare in-memory map behind net/http, in this process (the HTTP stack's ceiling)")
	workloads := fs.String("workloads", "spread,contended,queue", "comma-separated workloads: spread, contended, queue")
	queueWaits := fs.String("queue-waits", "held,polled", "how leaseplane's clients wait in the queue workload, comma-separated: held (?waitUpToMs), polled (sleep stampede.waitMs)")
	jitter := fs.Bool("jitter", false, "polling leaseplane clients sleep waitMs plus a random part of it (at most half, at most 500 ms), not waitMs exactly")
	noLedger := fs.Bool("no-ledger", false, "also measure each engine with the signed ledger off (what the ledger costs)")
	rawClient := fs.Bool("raw-client", false, "drive leaseplane with a minimal HTTP/1.1 client instead of server/client")
	netHTTP := fs.Bool("net-http", false, "leaseplane's clients send through net/http (server/client given an http.Client, as a program that passes one does) instead of the client's own connections (client.New with none, the default users get)")
	batch := fs.Int("batch", 0, "prototype, spread only: each leaseplane client is an orchestrator for B agents and sends their acquires, then their releases, in one request each (--clients/B orchestrators); needs a server with the prototype batch route, which the product does not have (docs/BENCHMARKS.md)")
	h2c := fs.Int("h2c", 0, "prototype: leaseplane's clients share N HTTP/2 connections without TLS (prior knowledge) instead of one HTTP/1.1 connection each; needs a server that speaks h2c, which the product does not today (docs/BENCHMARKS.md)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the first leaseplane target's first workload (spread by default) in the first run to this file: of the server process (its serve --cpuprofile), or with --in-process of this process (server and load generator)")
	loadgenProfile := fs.String("loadgen-cpuprofile", "", "write a CPU profile of this process, the load generator, during the first leaseplane target's first workload in the first run to this file (beside --cpuprofile, the server process's); not with --in-process, where --cpuprofile is this process's")
	model := fs.Bool("model", false, "instead of measuring, run the queue workload against the kernel in virtual time (held and polled) with the latencies below, and print its pairs/s: the ceiling of each way of waiting under the kernel's rules (docs/BENCHMARKS.md)")
	modelOneway := fs.Duration("model-oneway", 100*time.Microsecond, "--model: a request's or an answer's trip")
	modelCommit := fs.Duration("model-commit", 500*time.Microsecond, "--model: how long a logged command's answer waits for its commit")
	modelHold := fs.Duration("model-hold", 1100*time.Microsecond, "--model: from a grant received to its release sent (the 1 ms of work and a sleep's overshoot)")
	modelSeed := fs.Uint64("model-seed", 0, "--model: 0 for the latencies exactly; else each one drawn uniform over ½–1½ times its value, from this seed")
	fs.Usage = func() {
		fmt.Fprintln(stderr, help)
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "leaseplane-bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *clients < 1 || *clients > 10000 {
		fmt.Fprintf(stderr, "leaseplane-bench: --clients %d: want 1 to 10000\n", *clients)
		return exitUsage
	}
	if *dur <= 0 {
		fmt.Fprintf(stderr, "leaseplane-bench: --duration %s: want a positive duration\n", *dur)
		return exitUsage
	}
	if *pairs < 0 {
		fmt.Fprintf(stderr, "leaseplane-bench: --pairs %d: want 0 (measure for --duration) or more\n", *pairs)
		return exitUsage
	}
	if *runs < 1 || *runs > 100 {
		fmt.Fprintf(stderr, "leaseplane-bench: --runs %d: want 1 to 100\n", *runs)
		return exitUsage
	}
	wls, ok := list(stderr, "workload", *workloads, []string{"spread", "contended", "queue"})
	if !ok || len(wls) == 0 {
		if ok {
			fmt.Fprintln(stderr, "leaseplane-bench: --workloads: name at least one")
		}
		return exitUsage
	}
	waits, ok := list(stderr, "queue wait", *queueWaits, []string{"held", "polled"})
	if !ok || len(waits) == 0 {
		if ok {
			fmt.Fprintln(stderr, "leaseplane-bench: --queue-waits: name at least one")
		}
		return exitUsage
	}
	engs, ok := list(stderr, "engine", *engineList, []string{"native", "wasm"})
	if !ok {
		return exitUsage
	}
	ps, ok := list(stderr, "peer", *peers, []string{"redis", "redis-aof", "etcd"})
	if !ok {
		return exitUsage
	}
	if *h2c < 0 || *h2c > *clients || (*h2c > 0 && *rawClient) {
		fmt.Fprintf(stderr, "leaseplane-bench: --h2c %d: want 0 to --clients, and not with --raw-client\n", *h2c)
		return exitUsage
	}
	if *batch < 0 || *batch > *clients || (*batch > 0 && (*rawClient || *workloads != "spread" || *clients%*batch != 0)) {
		fmt.Fprintf(stderr, "leaseplane-bench: --batch %d: want 0, or a divisor of --clients with --workloads spread (not with --raw-client)\n", *batch)
		return exitUsage
	}
	if *model {
		o := modelOpts{clients: *clients, oneway: *modelOneway, commit: *modelCommit, hold: *modelHold, measured: *dur,
			jitter: *modelSeed != 0, seed: *modelSeed}
		if o.oneway < 0 || o.commit < 0 || o.hold < 0 {
			fmt.Fprintln(stderr, "leaseplane-bench: --model-oneway, --model-commit, --model-hold: want durations of 0 or more")
			return exitUsage
		}
		if err := printModel(stdout, o); err != nil {
			fmt.Fprintf(stderr, "leaseplane-bench: model: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	if *serverBin != "" && *inProcess {
		fmt.Fprintln(stderr, "leaseplane-bench: --server-binary and --in-process: choose one")
		return exitUsage
	}
	if *loadgenProfile != "" && *inProcess {
		fmt.Fprintln(stderr, "leaseplane-bench: --loadgen-cpuprofile and --in-process: choose one (with --in-process, --cpuprofile profiles this process)")
		return exitUsage
	}
	profile, ok := profilePath(stderr, "--cpuprofile", *cpuProfile)
	if !ok {
		return exitUsage
	}
	lgProfile, ok := profilePath(stderr, "--loadgen-cpuprofile", *loadgenProfile)
	if !ok {
		return exitUsage
	}
	if profile != "" && profile == lgProfile {
		fmt.Fprintln(stderr, "leaseplane-bench: --cpuprofile and --loadgen-cpuprofile name the same file")
		return exitUsage
	}

	var specs []spec
	for _, e := range engs {
		for _, nl := range []bool{false, true} {
			if nl && !*noLedger {
				continue
			}
			s := spec{label: planeLabel(e, nl, *inProcess), plane: true}
			o := planeOpts{clients: *clients, raw: *rawClient, netHTTP: *netHTTP, jitter: *jitter, noLedger: nl, h2c: *h2c, batch: *batch}
			if *h2c > 0 {
				s.label += "/h2c"
			}
			if *batch > 0 {
				s.label += "/batch" + strconv.Itoa(*batch)
			}
			if *inProcess {
				s.open = func(string) (target, error) { return openInProcessPlane(e, o) }
			} else {
				s.open = func(prof string) (target, error) { return openProcessPlane(*serverBin, e, o, prof) }
			}
			specs = append(specs, s)
		}
	}
	if *bare {
		specs = append(specs, spec{label: "bare-map", open: func(string) (target, error) { return openBare(*clients) }})
	}
	for _, p := range ps {
		switch p {
		case "redis":
			specs = append(specs, spec{label: p, open: func(string) (target, error) { return openRedis(false) }})
		case "redis-aof":
			specs = append(specs, spec{label: p, open: func(string) (target, error) { return openRedis(true) }})
		case "etcd":
			specs = append(specs, spec{label: p, open: func(string) (target, error) { return openEtcd() }})
		}
	}
	if len(specs) == 0 {
		fmt.Fprintln(stderr, "leaseplane-bench: no targets: name an engine or a peer")
		return exitUsage
	}
	var jobs []job
	for _, s := range specs {
		for _, w := range wls {
			if s.plane && w == "queue" {
				for _, wt := range waits {
					jobs = append(jobs, job{s, w, wt == "polled"})
				}
				continue
			}
			jobs = append(jobs, job{spec: s, workload: w})
		}
	}

	mode := "leaseplane serve as its own process"
	if *inProcess {
		mode = "the leaseplane server inside this process (--in-process)"
	}
	if len(engs) > 0 && !*inProcess && *serverBin == "" {
		dir, err := os.MkdirTemp("", "leaseplane-bench-bin-")
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane-bench: %v\n", err)
			return exitFailed
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(stderr, "leaseplane-bench: building the leaseplane binary")
		bin, err := buildServer(dir)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane-bench: %v\n", err)
			return exitFailed
		}
		*serverBin = bin
		mode += ", built from this repository"
	} else if *serverBin != "" {
		mode += " (" + *serverBin + ")"
	}
	sp := span{dur: *dur, pairs: *pairs}
	if *pairs == 0 {
		perJob := warmUp + *dur
		fmt.Fprintf(stderr, "leaseplane-bench: %d runs of %d measurements, %s each plus start-up: about %s\n",
			*runs, len(jobs), perJob, (time.Duration(*runs*len(jobs)) * (perJob + time.Second)).Round(time.Second))
	} else {
		fmt.Fprintf(stderr, "leaseplane-bench: %d runs of %d measurements, each until %d pairs (at most %s)\n", *runs, len(jobs), *pairs, *dur)
	}
	fmt.Fprintf(stdout, "leaseplane-bench: %d clients, %s per workload after a %s warm-up, GOMAXPROCS %s; %s; every target started afresh for each workload\n",
		*clients, sp, warmUp, gomaxprocs(), mode)
	if *runs > 1 {
		fmt.Fprintf(stdout, "each figure is the median of %d runs; a ratio is the median of the runs' ratios (each against the peer in the same run)\n", *runs)
	}
	status := exitOK
	var all []result
	var failures []string
	fail := func(format string, a ...any) {
		failures = append(failures, fmt.Sprintf(format, a...))
		status = exitFailed
	}
	profiled := profile == "" && lgProfile == ""
	for r := range *runs {
		for _, j := range jobs {
			label := j.row()
			fmt.Fprintf(stderr, "leaseplane-bench: run %d/%d: %s %s\n", r+1, *runs, label, j.workload)
			prof, lgProf := "", ""
			if !profiled && j.plane {
				prof, lgProf, profiled = profile, lgProfile, true
			}
			serverProf := prof
			if *inProcess {
				// The server runs in this process: its profile is this
				// process's, taken as the load generator's would be.
				serverProf, lgProf = "", prof
			}
			tg, err := j.open(serverProf)
			if err != nil {
				fail("run %d: %s %s not measured: %v", r+1, label, j.workload, err)
				continue
			}
			var stopProf func() error
			if lgProf != "" {
				flag := "--loadgen-cpuprofile"
				if *inProcess {
					flag = "--cpuprofile"
				}
				if stopProf, err = startCPUProfile(lgProf); err != nil {
					fail("%s: %v", flag, err)
				}
			}
			n := *clients
			if j.plane && *batch > 0 {
				n /= *batch // orchestrators, each for batch agents
			}
			res, err := measure(tg, j.workload, j.polled, n, sp)
			if stopProf != nil {
				if perr := stopProf(); perr != nil {
					fail("writing the load generator's CPU profile %s: %v", lgProf, perr)
				}
			}
			if cerr := tg.close(); cerr != nil {
				fail("run %d: %s %s: stopping: %v", r+1, label, j.workload, cerr)
			}
			if err != nil {
				fail("run %d: %s %s not measured: %v", r+1, label, j.workload, err)
				continue
			}
			res.target, res.run = label, r
			all = append(all, res)
			if res.firstErr != nil {
				fail("run %d: %s %s: %d errors, the first: %v", r+1, label, j.workload, res.errors, res.firstErr)
			}
			if prof != "" {
				fmt.Fprintf(stdout, "CPU profile of %s %s (%s): %s\n", label, j.workload, map[bool]string{true: "this process: server and load generator", false: "the server process"}[*inProcess], prof)
			}
			if lgProf != "" && !*inProcess && stopProf != nil {
				fmt.Fprintf(stdout, "CPU profile of %s %s (the load generator, this process): %s\n", label, j.workload, lgProf)
			}
		}
	}
	sums := summarize(all, *runs)
	for _, w := range wls {
		printTable(stdout, w, sums[w], *runs)
	}
	printGoals(stdout, sums, *runs, *clients)
	for _, f := range failures {
		fmt.Fprintln(stdout, f)
	}
	return status
}

// profilePath makes a profile flag's file absolute and checks that it can
// be created; "" stays "".
func profilePath(stderr io.Writer, flag, name string) (string, bool) {
	if name == "" {
		return "", true
	}
	p, err := filepath.Abs(name)
	if err == nil {
		var f *os.File
		if f, err = os.Create(p); err == nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane-bench: %s: %v\n", flag, err)
		return "", false
	}
	return p, true
}

// startCPUProfile profiles this process into file until the function it
// returns is called, which writes the profile out and closes the file.
func startCPUProfile(file string) (stop func() error, err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// list splits a comma-separated flag value and checks each name.
func list(stderr io.Writer, what, s string, known []string) ([]string, bool) {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(known, n) {
			fmt.Fprintf(stderr, "leaseplane-bench: unknown %s %q (want %s)\n", what, n, strings.Join(known, ", "))
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

func gomaxprocs() string {
	if v := os.Getenv("GOMAXPROCS"); v != "" {
		return v
	}
	return "default"
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
}

// resource is the resource client i asks for on its n-th pair.
func resource(workload string, i, n int) string {
	if workload == "spread" {
		return "bench/spread/" + strconv.Itoa(i) + "/" + strconv.Itoa(n%8)
	}
	return "bench/" + workload + "/" + strconv.Itoa((i+n)%4)
}

// span is how long a workload is measured: for dur, or (pairs above 0)
// until pairs pairs are counted, dur then being a watchdog.
type span struct {
	dur   time.Duration
	pairs int64
}

func (s span) String() string {
	if s.pairs > 0 {
		return fmt.Sprintf("%d pairs (at most %s)", s.pairs, s.dur)
	}
	return s.dur.String()
}

// measure runs one workload: a warm-up, then the span measured. Pairs
// count when they end inside the span (throughput is pairs ended per
// second, however long each waited: counting only the pairs begun inside
// the span too would leave out about as many as end within one wait of
// its end, a fifth of a polled queue's 5 s); latencies are of the pairs
// counted that also began inside it.
// Counting to a number of pairs cannot come out empty on a loaded machine,
// only slower: it fails only when the watchdog (sp.dur) fires first.
func measure(t target, workload string, polled bool, clients int, sp span) (result, error) {
	ws := make([]worker, clients)
	for i := range ws {
		w, err := t.worker(i, polled)
		if err != nil {
			for _, w := range ws[:i] {
				w.close()
			}
			return result{}, fmt.Errorf("client %d: %w", i, err)
		}
		ws[i] = w
	}
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type part struct {
		pairs, made       int64
		errors            int64
		firstErr          error
		pairLat, grantLat []time.Duration
		marks             []mark
	}
	parts := make([]part, len(ws))
	var counted atomic.Int64 // pairs counted so far, with sp.pairs
	enough := make(chan struct{})
	var enoughOnce sync.Once
	start := time.Now()
	from := start.Add(warmUp)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &parts[i]
			per := 1 // pairs one acquire+release makes
			if b, ok := w.(interface{ pairsPer() int }); ok {
				per = b.pairsPer()
			}
			for n := 0; ctx.Err() == nil; n++ {
				res := resource(workload, i, n)
				t0 := time.Now()
				if err := w.acquire(ctx, res); err != nil {
					if ctx.Err() == nil {
						p.errors++
						if p.firstErr == nil {
							p.firstErr = fmt.Errorf("acquire %s: %w", res, err)
						}
						time.Sleep(time.Millisecond)
					}
					continue
				}
				t1 := time.Now()
				if workload == "queue" {
					time.Sleep(queueHoldMs * time.Millisecond)
				}
				tr := time.Now()
				// The release runs to its end even when the run stops, so no
				// lock outlives it.
				if err := w.release(context.WithoutCancel(ctx), res); err != nil {
					p.errors++
					if p.firstErr == nil {
						p.firstErr = fmt.Errorf("release %s: %w", res, err)
					}
					continue
				}
				t2 := time.Now()
				p.made += int64(per)
				if t2.Before(from) || ctx.Err() != nil {
					continue
				}
				p.pairs += int64(per)
				if sp.pairs > 0 && counted.Add(int64(per)) >= sp.pairs {
					enoughOnce.Do(func() { close(enough) })
				}
				if workload == "queue" {
					p.marks = append(p.marks, mark{res: res, granted: t1, released: tr})
				}
				if t0.Before(from) {
					continue
				}
				for range per {
					p.pairLat = append(p.pairLat, t2.Sub(t0))
					p.grantLat = append(p.grantLat, t1.Sub(t0))
				}
			}
		}()
	}
	time.Sleep(warmUp)
	st, hasStats := t.(commitStatser)
	var before commitStats
	if hasStats {
		before = st.commitStats()
	}
	cpu0, d0 := cpuTime(t)
	watchdog := time.NewTimer(sp.dur)
	timedOut := false
	if sp.pairs > 0 {
		select {
		case <-enough:
		case <-watchdog.C:
			timedOut = true
		}
	} else {
		<-watchdog.C
	}
	watchdog.Stop()
	// The span ends here: a pair ending after it is not counted.
	cancel()
	cpu1, d1 := cpuTime(t)
	r := result{workload: workload, cpu: cpu1 - cpu0, daemonCPU: d1 - d0, elapsed: time.Since(from)}
	if hasStats {
		r.commits = st.commitStats().minus(before)
	}
	wg.Wait()
	var marks []mark
	for _, p := range parts {
		marks = append(marks, p.marks...)
		r.pairs += p.pairs
		r.made += p.made
		r.errors += p.errors
		if r.firstErr == nil {
			r.firstErr = p.firstErr
		}
		r.pairLat = append(r.pairLat, p.pairLat...)
		r.grantLat = append(r.grantLat, p.grantLat...)
	}
	slices.Sort(r.pairLat)
	slices.Sort(r.grantLat)
	r.handoff = handoffOf(marks)
	if r.pairs == 0 && r.firstErr != nil {
		return r, r.firstErr
	}
	if timedOut {
		return r, fmt.Errorf("%d of %d pairs within %s (%d errors)", r.pairs, sp.pairs, sp.dur, r.errors)
	}
	return r, nil
}

// mark is one counted pair of the queue workload: its resource, when its
// grant was received and when its release was sent.
type mark struct {
	res               string
	granted, released time.Time
}

// handoff is where the time between two grants on one resource goes, in
// the queue workload: hold, from a grant received to its release sent
// (the 1 ms of work and the sleep's overshoot), and gap, from a release
// sent to the next grant on that resource received (the release's trip,
// the commit, the grant's trip; for polling clients, the wait for the
// next poll too). Means over the measured span.
type handoff struct {
	hold, gap time.Duration
	gaps      int
}

// handoffOf measures handoffs from the pairs' marks: on each resource, in
// grant order, the gap between a release sent and the next grant received.
func handoffOf(marks []mark) handoff {
	byRes := map[string][]mark{}
	for _, m := range marks {
		byRes[m.res] = append(byRes[m.res], m)
	}
	var h handoff
	var hold, gap time.Duration
	for _, ms := range byRes {
		slices.SortFunc(ms, func(a, b mark) int { return a.granted.Compare(b.granted) })
		for i, m := range ms {
			hold += m.released.Sub(m.granted)
			if i+1 < len(ms) && ms[i+1].granted.After(m.released) {
				gap += ms[i+1].granted.Sub(m.released)
				h.gaps++
			}
		}
	}
	if len(marks) > 0 {
		h.hold = hold / time.Duration(len(marks))
	}
	if h.gaps > 0 {
		h.gap = gap / time.Duration(h.gaps)
	}
	return h
}

// cpuTime is the CPU time (user + system) used so far by this process and
// by t's daemon process, if it has one, and the daemon's part of it.
func cpuTime(t target) (all, daemon time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		all = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if dp, ok := t.(daemonPIDer); ok {
		daemon = procCPU(dp.daemonPID())
	}
	return all + daemon, daemon
}

// procCPU is a process's CPU time from /proc (Linux): the nanoseconds
// each of its threads has run (schedstat), or its user + system time in
// 10 ms clock ticks when that is more (a thread that exited takes its
// nanoseconds with it); zero when it can read neither. The ticks alone
// read 0 for a short run, which made the server's part vanish.
func procCPU(pid int) time.Duration {
	dir := "/proc/" + strconv.Itoa(pid)
	var ran time.Duration
	if tasks, err := os.ReadDir(dir + "/task"); err == nil {
		for _, task := range tasks {
			b, err := os.ReadFile(dir + "/task/" + task.Name() + "/schedstat")
			if err != nil {
				continue
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					ran += time.Duration(ns)
				}
			}
		}
	}
	return max(ran, procTicks(dir))
}

// procTicks reads user + system time from dir/stat in clock ticks of
// 10 ms; zero when it cannot.
func procTicks(dir string) time.Duration {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which ends at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// workloadTitle says what a workload's table measures.
var workloadTitle = map[string]string{
	"spread":    "spread: each client on its own resources; latency is one acquire+release pair",
	"contended": "contended: all clients on 4 resources, waiting as each system's users wait; latency is ask to released",
	"queue":     "queue: contended, each holder working 1 ms; latency is the time from the first ask to the grant (leaseplane held: ?waitUpToMs; polled: sleeping stampede.waitMs)",
}

// summary is one row's figures over the runs: each the median of the
// runs' figures.
type summary struct {
	target                string
	runs                  []result // in run order
	pps                   float64
	p50, p99, max, cpu    time.Duration
	daemonCPU             time.Duration // the server process's part of cpu; 0 in-process
	errors                int64
	xEtcd, xRedis         float64 // median of the runs' ratios; 0 when there is no peer
	commitsPerSec, perCmt float64
	msPerCommit           float64
	hold, gap             time.Duration // queue: a handoff's parts (handoff)
	msPerRelease          float64       // the plane's time per release, arrival to durable answer
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

// summarize groups results by workload and row, in the order first
// measured, and takes each figure's median over the runs. A ratio is
// taken within each run (against the peer's result of the same run and
// workload), then its median.
func summarize(all []result, runs int) map[string][]summary {
	type key struct{ workload, target string }
	byKey := map[key]*summary{}
	peer := map[key][]*result{} // (workload, peer) → by run
	out := map[string][]summary{}
	var order []key
	for i := range all {
		r := &all[i]
		k := key{r.workload, r.target}
		if byKey[k] == nil {
			byKey[k] = &summary{target: r.target}
			order = append(order, k)
		}
		byKey[k].runs = append(byKey[k].runs, *r)
		if r.target == "etcd" || r.target == "redis" {
			if peer[k] == nil {
				peer[k] = make([]*result, runs)
			}
			peer[k][r.run] = r
		}
	}
	for _, k := range order {
		s := byKey[k]
		var pps, cps, per, ms, rel, xe, xr []float64
		var p50, p99, mx, cpu, dcpu, hold, gap []time.Duration
		for _, r := range s.runs {
			pps = append(pps, r.pairsPerSec())
			l := r.latency()
			p50, p99, mx = append(p50, pct(l, 0.5)), append(p99, pct(l, 0.99)), append(mx, pct(l, 1))
			cpu = append(cpu, r.cpuPerPair())
			if r.pairs > 0 {
				dcpu = append(dcpu, r.daemonCPU/time.Duration(r.pairs))
			}
			s.errors += r.errors
			if c := r.commits; c.commits > 0 {
				cps = append(cps, c.commits/r.elapsed.Seconds())
				per = append(per, c.commands/c.commits)
				ms = append(ms, 1000*c.seconds/c.commits)
			}
			if c := r.commits; c.releases > 0 {
				rel = append(rel, 1000*c.releaseSeconds/c.releases)
			}
			if r.handoff.gaps > 0 {
				hold, gap = append(hold, r.handoff.hold), append(gap, r.handoff.gap)
			}
			ratio := func(name string) (float64, bool) {
				ps := peer[key{k.workload, name}]
				if ps == nil || ps[r.run] == nil || ps[r.run].pairs == 0 {
					return 0, false
				}
				return r.pairsPerSec() / ps[r.run].pairsPerSec(), true
			}
			if x, ok := ratio("etcd"); ok {
				xe = append(xe, x)
			}
			if x, ok := ratio("redis"); ok {
				xr = append(xr, x)
			}
		}
		s.pps = median(pps)
		s.p50, s.p99, s.max, s.cpu = medianDur(p50), medianDur(p99), medianDur(mx), medianDur(cpu)
		s.daemonCPU = medianDur(dcpu)
		s.xEtcd, s.xRedis = median(xe), median(xr)
		s.commitsPerSec, s.perCmt, s.msPerCommit = median(cps), median(per), median(ms)
		s.hold, s.gap, s.msPerRelease = medianDur(hold), medianDur(gap), median(rel)
		out[k.workload] = append(out[k.workload], *s)
	}
	return out
}

// printTable writes one workload's table: each row's figures and its
// pairs/s as a multiple of etcd's and Redis's in the same run; with more
// than one run, each row's pairs/s and p99 by run below it.
func printTable(w io.Writer, workload string, ss []summary, runs int) {
	if len(ss) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", workloadTitle[workload])
	width := len("target")
	for _, s := range ss {
		width = max(width, len(s.target))
	}
	ratio := func(x float64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", x)
	}
	fmt.Fprintf(w, "%-*s %9s %9s %9s %9s %9s %8s %8s %6s\n", width, "target", "pairs/s", "p50", "p99", "max", "CPU/pair", "×etcd", "×redis", "errors")
	for _, s := range ss {
		fmt.Fprintf(w, "%-*s %9.0f %9s %9s %9s %9s %8s %8s %6d\n", width, s.target, s.pps,
			fmtDur(s.p50), fmtDur(s.p99), fmtDur(s.max), fmtDur(s.cpu), ratio(s.xEtcd), ratio(s.xRedis), s.errors)
	}
	for _, s := range ss {
		if s.daemonCPU > 0 {
			fmt.Fprintf(w, "%-*s CPU per pair: %s in the server process, %s in the load generator\n", width, s.target,
				fmtDur(s.daemonCPU), fmtDur(s.cpu-s.daemonCPU))
		}
	}
	for _, s := range ss {
		if s.commitsPerSec > 0 {
			fmt.Fprintf(w, "%-*s %.0f commits/s, %.1f commands per commit, %.2f ms per commit\n", width, s.target,
				s.commitsPerSec, s.perCmt, s.msPerCommit)
		}
	}
	for _, s := range ss {
		if s.gap <= 0 {
			continue
		}
		line := fmt.Sprintf("%-*s handoff: %s = %s from a grant received to its release sent (%d ms of work) + %s from a release sent to the next grant received",
			width, s.target, fmtDur(s.hold+s.gap), fmtDur(s.hold), queueHoldMs, fmtDur(s.gap))
		if s.msPerRelease > 0 {
			line += fmt.Sprintf(" (the plane answers a release in %.2f ms)", s.msPerRelease)
		}
		fmt.Fprintln(w, line)
	}
	if runs > 1 {
		for _, s := range ss {
			var pps, p99 []string
			for _, r := range s.runs {
				pps = append(pps, fmt.Sprintf("%.0f", r.pairsPerSec()))
				p99 = append(p99, fmtDur(pct(r.latency(), 0.99)))
			}
			fmt.Fprintf(w, "%-*s by run: pairs/s %s; p99 %s\n", width, s.target, strings.Join(pps, ", "), strings.Join(p99, ", "))
		}
	}
}

// printGoals states issue 23's bar and goals, and issue 20's queue
// targets, against this run's figures (medians over the runs), for the
// first leaseplane target measured, with the polled queue's ceiling
// (polledCeiling) against etcd's.
func printGoals(w io.Writer, sums map[string][]summary, runs, clients int) {
	find := func(workload, name string) (summary, bool) {
		for _, s := range sums[workload] {
			if s.target == name || (strings.HasPrefix(name, "leaseplane") && strings.HasPrefix(s.target, "leaseplane/") &&
				strings.HasSuffix(s.target, strings.TrimPrefix(name, "leaseplane"))) {
				return s, s.pps > 0
			}
		}
		return summary{}, false
	}
	var lines []string
	add := func(goal string, ok bool, got string) {
		verdict := "not met"
		if ok {
			verdict = "met"
		}
		lines = append(lines, fmt.Sprintf("  %-56s %-24s %s", goal, got, verdict))
	}
	if lp, ok := find("spread", "leaseplane"); ok {
		if e, ok := find("spread", "etcd"); ok {
			add("spread: pairs/s ≥ 2× etcd's Mutex (issue 23's bar)", lp.xEtcd >= 2, fmt.Sprintf("%.2f×", lp.xEtcd))
			add("spread: p99 ≤ etcd's (issue 23's bar)", lp.p99 <= e.p99, fmtDur(lp.p99)+" vs "+fmtDur(e.p99))
		}
		if _, ok := find("spread", "redis"); ok {
			add("spread: pairs/s ≥ 0.5× Redis's (goal)", lp.xRedis >= 0.5, fmt.Sprintf("%.2f×", lp.xRedis))
		}
	}
	if lp, ok := find("contended", "leaseplane"); ok {
		if _, ok := find("contended", "etcd"); ok {
			add("contended: pairs/s ≥ 2× etcd's Mutex (issue 14)", lp.xEtcd >= 2, fmt.Sprintf("%.2f×", lp.xEtcd))
		}
	}
	if e, ok := find("queue", "etcd"); ok {
		if lp, ok := find("queue", "leaseplane/held"); ok {
			add("queue held: pairs/s ≥ 8× etcd's Mutex (issue 20)", lp.xEtcd >= 8, fmt.Sprintf("%.2f×", lp.xEtcd))
			add("queue held: p99 to a grant ≤ ½ etcd's (issue 20)", 2*lp.p99 <= e.p99, fmtDur(lp.p99)+" vs "+fmtDur(e.p99))
		}
		if lp, ok := find("queue", "leaseplane/polled"); ok {
			add("queue polled: pairs/s ≥ 0.15× etcd's Mutex (issue 20)", lp.xEtcd >= 0.15, fmt.Sprintf("%.2f×", lp.xEtcd))
			if clients >= 64 {
				// 16 or more a resource: a newcomer finds 4 or more waiting
				// (polledCeiling); with fewer the bound does not hold.
				c := polledCeiling(clients)
				lines = append(lines, fmt.Sprintf("    (polling's ceiling by the back-off by place: %d clients / 800 ms = %.0f pairs/s, %.2f× etcd's median here)",
					clients, c, c/e.pps))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	of := "this run"
	if runs > 1 {
		of = fmt.Sprintf("medians of %d runs", runs)
	}
	fmt.Fprintf(w, "\ngoals, first leaseplane target, %s:\n", of)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
