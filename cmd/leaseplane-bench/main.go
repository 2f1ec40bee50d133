// Command leaseplane-bench is the load tool of docs/BENCHMARKS.md "Server
// load": it measures the lease plane against its peers, each driven by its
// own users' client library, in one run on one machine.
//
// It is a module of its own (this folder's go.mod, with a replace to the
// repository's root module) so that go-redis and etcd's client never enter
// the product's dependencies: `go build ./cmd/leaseplane` pulls in neither.
//
// Targets, each started by the tool on loopback:
//   - leaseplane/ENGINE: the real server (server.New, a temporary data folder,
//     durable SQLite with group commit) in this process, driven through its
//     REST client, server/client (client.Holder when it has to wait);
//   - redis and redis-aof: Debian's redis-server without persistence, and
//     with appendonly and appendfsync always, driven by go-redis v9
//     (SET NX with a 30 s expiry, released by a Lua compare-and-delete;
//     a refused client retries after 50-250 ms, redsync's default);
//   - etcd: a single-node etcd (Debian's etcd-server, fsync on), driven by
//     clientv3's concurrency.Mutex (Lock waits on a watch);
//   - bare-map (--bare): the lease routes on a Go map behind net/http, the
//     ceiling of the HTTP stack and the load generator.
//
// Workloads, each with 64 clients by default:
//   - spread: each client on resources of its own, acquire+release pairs;
//   - contended: all clients on 4 resources, each waiting the way its
//     system's users wait, releasing at once;
//   - queue: the same, but each holder works 1 ms before releasing, so
//     queues form; its figure is the time from the first ask to the grant.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// target is one system under load.
type target interface {
	name() string
	// worker makes client i, with a connection of its own.
	worker(i int) (worker, error)
	close()
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

// commitStats are the plane's group-commit counters, from /metrics.
type commitStats struct {
	commits, commands, seconds float64
}

func (a commitStats) minus(b commitStats) commitStats {
	return commitStats{a.commits - b.commits, a.commands - b.commands, a.seconds - b.seconds}
}

// result is one workload's figures on one target.
type result struct {
	target, workload string
	elapsed          time.Duration
	pairs            int64
	errors           int64
	firstErr         error
	pairLat          []time.Duration // ask to released, per pair
	grantLat         []time.Duration // ask to granted, per pair
	commits          commitStats
	cpu              time.Duration // this process and the target's daemon
}

func (r result) pairsPerSec() float64 { return float64(r.pairs) / r.elapsed.Seconds() }

func (r result) cpuPerPair() time.Duration {
	if r.pairs == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.pairs)
}

// pct is the p-quantile of sorted latencies.
func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[int(float64(len(lat)-1)*p)]
}

const help = `usage: leaseplane-bench [flags]

Measures durable leaseplane against Redis (go-redis) and etcd
(clientv3 concurrency.Mutex), each started by the tool on loopback, with N
clients in three workloads (spread, contended, queue), and prints one
table per workload with each target's ratio to etcd and to Redis.
See docs/BENCHMARKS.md "Server load".`

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leaseplane-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clients := fs.Int("clients", 64, "concurrent clients")
	dur := fs.Duration("duration", 5*time.Second, "measured time per workload (after a 0.5 s warm-up)")
	engineList := fs.String("engines", "native", "comma-separated leaseplane engines: native, wasm (empty: none)")
	peers := fs.String("peers", "redis,redis-aof,etcd", "comma-separated peers: redis, redis-aof, etcd (empty: none)")
	bare := fs.Bool("bare", false, "also measure a bare in-memory map behind net/http (the HTTP stack's ceiling)")
	workloads := fs.String("workloads", "spread,contended,queue", "comma-separated workloads: spread, contended, queue")
	jitter := fs.Bool("jitter", false, "leaseplane clients that must wait sleep waitMs plus a random part of it (at most half, at most 500 ms), not waitMs exactly")
	noLedger := fs.Bool("no-ledger", false, "also measure each engine with the signed ledger off (what the ledger costs)")
	rawClient := fs.Bool("raw-client", false, "drive leaseplane with a minimal HTTP/1.1 client instead of server/client over net/http")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the leaseplane runs (server and load generator) to this file")
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
	wls, ok := list(stderr, "workload", *workloads, []string{"spread", "contended", "queue"})
	if !ok || len(wls) == 0 {
		if ok {
			fmt.Fprintln(stderr, "leaseplane-bench: --workloads: name at least one")
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

	type mk struct {
		label string
		open  func() (target, error)
	}
	var targets []mk
	for _, e := range engs {
		targets = append(targets, mk{"leaseplane/" + e, func() (target, error) { return openPlane(e, *clients, *rawClient, *jitter, false) }})
		if *noLedger {
			targets = append(targets, mk{"leaseplane/" + e + "/no-ledger", func() (target, error) { return openPlane(e, *clients, *rawClient, *jitter, true) }})
		}
	}
	if *bare {
		targets = append(targets, mk{"bare-map", func() (target, error) { return openBare(*clients) }})
	}
	for _, p := range ps {
		switch p {
		case "redis":
			targets = append(targets, mk{p, func() (target, error) { return openRedis(false) }})
		case "redis-aof":
			targets = append(targets, mk{p, func() (target, error) { return openRedis(true) }})
		case "etcd":
			targets = append(targets, mk{p, openEtcd})
		}
	}
	if len(targets) == 0 {
		fmt.Fprintln(stderr, "leaseplane-bench: no targets: name an engine or a peer")
		return exitUsage
	}

	var prof *os.File
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane-bench: --cpuprofile: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		prof = f
	}

	fmt.Fprintf(stdout, "leaseplane-bench: %d clients, %s per workload after a %s warm-up, GOMAXPROCS %s, load generator in this process\n",
		*clients, *dur, warmUp, gomaxprocs())
	status := exitOK
	results := map[string][]result{} // by workload
	var failures []string
	for _, t := range targets {
		fmt.Fprintf(stderr, "leaseplane-bench: starting %s\n", t.label)
		tg, err := t.open()
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s not measured: %v", t.label, err))
			status = exitFailed
			continue
		}
		profiling := prof != nil && strings.HasPrefix(t.label, "leaseplane/")
		if profiling {
			if err := pprof.StartCPUProfile(prof); err != nil {
				fmt.Fprintf(stderr, "leaseplane-bench: --cpuprofile: %v\n", err)
				profiling = false
			}
			prof = nil // one target's profile per run
		}
		for _, w := range wls {
			fmt.Fprintf(stderr, "leaseplane-bench: %s %s\n", t.label, w)
			r, err := measure(tg, w, *clients, *dur)
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s %s not measured: %v", t.label, w, err))
				status = exitFailed
				continue
			}
			r.target = t.label
			results[w] = append(results[w], r)
			if r.firstErr != nil {
				failures = append(failures, fmt.Sprintf("%s %s: %d errors, the first: %v", t.label, w, r.errors, r.firstErr))
				status = exitFailed
			}
		}
		if profiling {
			pprof.StopCPUProfile()
		}
		tg.close()
	}
	for _, w := range wls {
		printTable(stdout, w, results[w])
	}
	printGoals(stdout, results)
	for _, f := range failures {
		fmt.Fprintln(stdout, f)
	}
	return status
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

// measure runs one workload: a warm-up, then dur measured. Pairs count
// when they end inside the measured span.
func measure(t target, workload string, clients int, dur time.Duration) (result, error) {
	ws := make([]worker, clients)
	for i := range ws {
		w, err := t.worker(i)
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
		pairs, errors     int64
		firstErr          error
		pairLat, grantLat []time.Duration
	}
	parts := make([]part, len(ws))
	start := time.Now()
	from := start.Add(warmUp)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &parts[i]
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
				if t0.Before(from) || ctx.Err() != nil {
					continue
				}
				p.pairs++
				p.pairLat = append(p.pairLat, t2.Sub(t0))
				p.grantLat = append(p.grantLat, t1.Sub(t0))
			}
		}()
	}
	time.Sleep(warmUp)
	st, hasStats := t.(commitStatser)
	var before commitStats
	if hasStats {
		before = st.commitStats()
	}
	cpu0 := cpuTime(t)
	time.Sleep(dur)
	r := result{workload: workload, cpu: cpuTime(t) - cpu0, elapsed: time.Since(from)}
	if hasStats {
		r.commits = st.commitStats().minus(before)
	}
	cancel()
	wg.Wait()
	for _, p := range parts {
		r.pairs += p.pairs
		r.errors += p.errors
		if r.firstErr == nil {
			r.firstErr = p.firstErr
		}
		r.pairLat = append(r.pairLat, p.pairLat...)
		r.grantLat = append(r.grantLat, p.grantLat...)
	}
	slices.Sort(r.pairLat)
	slices.Sort(r.grantLat)
	if r.pairs == 0 && r.firstErr != nil {
		return r, r.firstErr
	}
	return r, nil
}

// cpuTime is the CPU time (user + system) used so far by this process and
// by t's daemon process, if it has one.
func cpuTime(t target) time.Duration {
	var ru syscall.Rusage
	var d time.Duration
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		d = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if dp, ok := t.(daemonPIDer); ok {
		d += procCPU(dp.daemonPID())
	}
	return d
}

// procCPU reads a process's user + system time from /proc (Linux), in
// clock ticks of 10 ms; zero when it cannot.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
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
	"queue":     "queue: contended, each holder working 1 ms; latency is the time from the first ask to the grant",
}

// printTable writes one workload's table: each target's figures and its
// pairs/s as a multiple of etcd's and Redis's in the same run.
func printTable(w io.Writer, workload string, rs []result) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", workloadTitle[workload])
	byName := map[string]result{}
	for _, r := range rs {
		byName[r.target] = r
	}
	ratio := func(r result, peer string) string {
		p, ok := byName[peer]
		if !ok || p.pairs == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", r.pairsPerSec()/p.pairsPerSec())
	}
	lat := func(r result) []time.Duration {
		if workload == "queue" {
			return r.grantLat
		}
		return r.pairLat
	}
	fmt.Fprintf(w, "%-18s %9s %9s %9s %9s %9s %8s %8s %6s\n", "target", "pairs/s", "p50", "p99", "max", "CPU/pair", "×etcd", "×redis", "errors")
	for _, r := range rs {
		l := lat(r)
		fmt.Fprintf(w, "%-18s %9.0f %9s %9s %9s %9s %8s %8s %6d\n", r.target, r.pairsPerSec(),
			fmtDur(pct(l, 0.50)), fmtDur(pct(l, 0.99)), fmtDur(pct(l, 1)), fmtDur(r.cpuPerPair()),
			ratio(r, "etcd"), ratio(r, "redis"), r.errors)
	}
	for _, r := range rs {
		if c := r.commits; c.commits > 0 {
			fmt.Fprintf(w, "%-18s %.0f commits/s, %.1f commands per commit, %.2f ms per commit\n", r.target,
				c.commits/r.elapsed.Seconds(), c.commands/c.commits, 1000*c.seconds/c.commits)
		}
	}
}

// printGoals states issue 14's goals against this run's figures, for the
// first leaseplane engine measured.
func printGoals(w io.Writer, results map[string][]result) {
	find := func(workload, name string) (result, bool) {
		for _, r := range results[workload] {
			if r.target == name || (name == "leaseplane" && strings.HasPrefix(r.target, "leaseplane/")) {
				return r, r.pairs > 0
			}
		}
		return result{}, false
	}
	var lines []string
	add := func(goal string, ok bool, got string) {
		verdict := "not met"
		if ok {
			verdict = "met"
		}
		lines = append(lines, fmt.Sprintf("  %-52s %-26s %s", goal, got, verdict))
	}
	if lp, ok := find("spread", "leaseplane"); ok {
		if e, ok := find("spread", "etcd"); ok {
			x := lp.pairsPerSec() / e.pairsPerSec()
			add("spread: pairs/s ≥ 2× etcd's Mutex", x >= 2, fmt.Sprintf("%.2f×", x))
		}
		if r, ok := find("spread", "redis"); ok {
			x := lp.pairsPerSec() / r.pairsPerSec()
			add("spread: pairs/s ≥ 0.5× Redis's", x >= 0.5, fmt.Sprintf("%.2f×", x))
		}
		p := pct(lp.pairLat, 0.99)
		add("spread: p99 < 10 ms", p < 10*time.Millisecond, fmtDur(p))
	}
	if lp, ok := find("contended", "leaseplane"); ok {
		if e, ok := find("contended", "etcd"); ok {
			x := lp.pairsPerSec() / e.pairsPerSec()
			add("contended: pairs/s ≥ 2× etcd's Mutex", x >= 2, fmt.Sprintf("%.2f×", x))
		}
	}
	if lp, ok := find("queue", "leaseplane"); ok {
		if e, ok := find("queue", "etcd"); ok {
			a, b := pct(lp.grantLat, 0.99), pct(e.grantLat, 0.99)
			add("queue: p99 time to a grant ≤ etcd's", a <= b, fmtDur(a)+" vs "+fmtDur(b))
			x := lp.pairsPerSec() / e.pairsPerSec()
			add("queue: pairs/s ≥ etcd's", x >= 1, fmt.Sprintf("%.2f×", x))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\ngoals (issue 14), first leaseplane engine:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
