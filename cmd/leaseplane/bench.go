package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/client"
)

func init() {
	register("bench", "load test: N clients doing acquire+release over loopback against the real server (and Redis, etcd)", runBench)
}

// benchTarget is one system under load: the lease plane with one engine,
// or a baseline.
type benchTarget interface {
	name() string
	// worker makes client i's connection.
	worker(i int) (benchWorker, error)
	close()
}

// benchWorker is one client. acquire reports whether the lock was granted
// and how many requests it took; release the same.
type benchWorker interface {
	acquire(res string) (granted bool, requests int, err error)
	release(res string) (requests int, err error)
	close()
}

// benchResult is one workload's figures on one target.
type benchResult struct {
	target, workload string
	clients          int
	elapsed          time.Duration
	pairs, requests  int64
	refused          int64
	errors           int64
	firstErr         error
	lat              []time.Duration // per request
	commits          commitStats     // the plane's commits during the run
	// cpu is the CPU time this process and the target's daemon used.
	cpu time.Duration
}

// cpuPerRequest is CPU time per request: a cost that does not depend on
// what else the machine is running.
func (r benchResult) cpuPerRequest() time.Duration {
	if r.requests == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.requests)
}

// daemonPIDer is a target served by a separate process.
type daemonPIDer interface{ daemonPID() int }

// benchCPU is the CPU time (user + system) used so far by this process and
// by t's daemon process, if it has one.
func benchCPU(t benchTarget) time.Duration {
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

// commitStats are the plane's group-commit counters, from /metrics.
type commitStats struct {
	commits, commands, seconds float64
}

func (a commitStats) minus(b commitStats) commitStats {
	return commitStats{a.commits - b.commits, a.commands - b.commands, a.seconds - b.seconds}
}

// commitStatser is a target that can tell its commit counters.
type commitStatser interface{ commitStats() commitStats }

func (r benchResult) pairsPerSec() float64 { return float64(r.pairs) / r.elapsed.Seconds() }
func (r benchResult) reqPerSec() float64   { return float64(r.requests) / r.elapsed.Seconds() }

func (r benchResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat)-1) * p)
	return r.lat[i]
}

const benchHelp = `usage: leaseplane bench [--clients 64] [--duration 5s] [--engines native,wasm] [--bare] [--redis] [--etcd]

Starts the real server in-process (a temporary data folder, durable SQLite,
loopback HTTP) once per engine, and drives it with N concurrent clients, each
its own agent, doing acquire+release pairs:
  spread     each client on its own resources: every acquire is granted;
  contended  all clients on 4 resources: a refused acquire counts as a try
             (a request, no pair) and the client tries the same resource
             again at once; after a pair it moves to the next resource.
One pair is one acquire and one release: two HTTP requests. Each client is
one kept-alive connection with a minimal HTTP/1.1 client (--std-client: the
project's server/client over net/http, which costs the shared cores more). Prints pairs/s
(granted pairs), requests/s, p50/p99 of single requests, and the CPU time
per request of this process (server and load generator) plus the
baseline's daemon: a cost that does not depend on what else the machine runs.

--bare runs the same routes on a mutex-guarded Go map behind net/http, with
no kernel and no disk: the ceiling of the HTTP stack and the load generator.
--redis starts redis-server on a loopback port (no persistence) and runs the
same workloads as SET key token NX PX 30000 plus a Lua compare-and-delete.
--etcd starts a single-node etcd and runs them as etcd's Mutex does (a txn
that puts the client's key under the lock's prefix with its session lease
and reads the prefix's owner; unlock deletes the key; a client that is not
the owner keeps its key, so it queues as Mutex.Lock does, and polls the
owner instead of watching), through etcd's HTTP/JSON gateway.`

func runBench(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clients := fs.Int("clients", 64, "concurrent clients")
	dur := fs.Duration("duration", 5*time.Second, "measured time per workload (after a 0.5 s warm-up)")
	engineList := fs.String("engines", "", "comma-separated engines (default: every engine this binary has)")
	redis := fs.Bool("redis", false, "also measure Redis SET NX PX + Lua release (needs redis-server)")
	etcd := fs.Bool("etcd", false, "also measure a single-node etcd Mutex (needs etcd)")
	bare := fs.Bool("bare", false, "also measure a bare in-memory map behind net/http (the HTTP stack's ceiling)")
	workloads := fs.String("workloads", "spread,contended", "comma-separated workloads: spread, contended")
	stdClient := fs.Bool("std-client", false, "drive HTTP targets with server/client over net/http instead of the minimal raw HTTP/1.1 client")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (server and load generator) to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, benchHelp)
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "leaseplane bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *clients < 1 || *clients > 10000 {
		fmt.Fprintf(stderr, "leaseplane bench: --clients %d: want 1 to 10000\n", *clients)
		return exitUsage
	}
	if *dur <= 0 {
		fmt.Fprintf(stderr, "leaseplane bench: --duration %s: want a positive duration\n", *dur)
		return exitUsage
	}
	var wls []string
	for _, w := range strings.Split(*workloads, ",") {
		if w != "spread" && w != "contended" {
			fmt.Fprintf(stderr, "leaseplane bench: unknown workload %q (want spread or contended)\n", w)
			return exitUsage
		}
		wls = append(wls, w)
	}
	var names []string
	if *engineList == "" {
		for n := range engines {
			names = append(names, n)
		}
		sort.Strings(names)
	} else {
		names = strings.Split(*engineList, ",")
		for _, n := range names {
			if _, ok := engines[n]; !ok {
				fmt.Fprintf(stderr, "leaseplane bench: unknown engine %q\n", n)
				return exitUsage
			}
		}
	}

	benchStdClient = *stdClient
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane bench: --cpuprofile: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "leaseplane bench: --cpuprofile: %v\n", err)
			return exitUsage
		}
		defer pprof.StopCPUProfile()
	}

	type mk struct {
		label string
		open  func() (benchTarget, error)
	}
	var targets []mk
	for _, n := range names {
		n := n
		targets = append(targets, mk{"leaseplane/" + n, func() (benchTarget, error) {
			f, err := engines[n]()
			if err != nil {
				return nil, fmt.Errorf("engine %s: %w", n, err)
			}
			return openPlaneTarget(f, *clients)
		}})
	}
	if *bare {
		targets = append(targets, mk{"bare-map", func() (benchTarget, error) { return openBareTarget(*clients) }})
	}
	if *redis {
		targets = append(targets, mk{"redis", func() (benchTarget, error) { return openRedisTarget() }})
	}
	if *etcd {
		targets = append(targets, mk{"etcd", func() (benchTarget, error) { return openEtcdTarget(*clients) }})
	}

	fmt.Fprintf(stdout, "%d clients, %s per workload, GOMAXPROCS %s, load generator in the same process\n",
		*clients, *dur, gomaxprocs())
	fmt.Fprintf(stdout, "%-20s %-10s %10s %12s %9s %9s %9s %9s %7s\n", "target", "workload", "pairs/s", "requests/s", "refused%", "p50", "p99", "CPU/req", "errors")
	status := exitOK
	for _, t := range targets {
		tg, err := t.open()
		if err != nil {
			fmt.Fprintf(stdout, "%-20s not measured: %v\n", t.label, err)
			status = exitRefused
			continue
		}
		for _, w := range wls {
			r, err := benchRun(tg, w, *clients, *dur)
			if err != nil {
				fmt.Fprintf(stdout, "%-20s %-10s not measured: %v\n", t.label, w, err)
				status = exitRefused
				continue
			}
			refusedPct := 0.0
			if r.requests > 0 {
				refusedPct = 100 * float64(r.refused) / float64(r.requests)
			}
			fmt.Fprintf(stdout, "%-20s %-10s %10.0f %12.0f %8.1f%% %9s %9s %9s %7d\n", t.label, w,
				r.pairsPerSec(), r.reqPerSec(), refusedPct, fmtDur(r.pct(0.50)), fmtDur(r.pct(0.99)),
				fmtDur(r.cpuPerRequest()), r.errors)
			if c := r.commits; c.commits > 0 {
				fmt.Fprintf(stdout, "%-20s %-10s %.0f commits/s, %.1f commands per commit, %.2f ms per commit\n", "", "",
					c.commits/r.elapsed.Seconds(), c.commands/c.commits, 1000*c.seconds/c.commits)
			}
			if r.firstErr != nil {
				fmt.Fprintf(stdout, "%-20s %-10s first error: %v\n", "", "", r.firstErr)
				status = exitRefused
			}
		}
		tg.close()
	}
	return status
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

// benchResource is the resource client i uses on its n-th pair.
func benchResource(workload string, i, n int) string {
	if workload == "contended" {
		return "bench/contended/" + strconv.Itoa((i+n)%4)
	}
	return "bench/spread/" + strconv.Itoa(i) + "/" + strconv.Itoa(n%8)
}

// benchRun warms up for half a second, then measures for dur.
func benchRun(t benchTarget, workload string, clients int, dur time.Duration) (benchResult, error) {
	ws := make([]benchWorker, clients)
	for i := range ws {
		w, err := t.worker(i)
		if err != nil {
			for _, w := range ws[:i] {
				w.close()
			}
			return benchResult{}, err
		}
		ws[i] = w
	}
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	// pos keeps each client's place across the warm-up and the run, so a
	// client queued on a resource goes on asking for that one.
	pos := make([]int, len(ws))
	drive(ws, workload, pos, 500*time.Millisecond)
	st, hasStats := t.(commitStatser)
	var before commitStats
	if hasStats {
		before = st.commitStats()
	}
	cpu0 := benchCPU(t)
	r := drive(ws, workload, pos, dur)
	r.cpu = benchCPU(t) - cpu0
	if hasStats {
		r.commits = st.commitStats().minus(before)
	}
	r.target, r.workload, r.clients = t.name(), workload, clients
	if r.pairs == 0 && r.firstErr != nil {
		return r, r.firstErr
	}
	return r, nil
}

func drive(ws []benchWorker, workload string, pos []int, dur time.Duration) benchResult {
	var stop atomic.Bool
	var wg sync.WaitGroup
	type part struct {
		pairs, requests, refused, errors int64
		firstErr                         error
		lat                              []time.Duration
	}
	parts := make([]part, len(ws))
	start := time.Now()
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &parts[i]
			p.lat = make([]time.Duration, 0, 4096)
			fail := func(err error) {
				p.errors++
				if p.firstErr == nil {
					p.firstErr = err
				}
			}
			// n moves on after a granted pair only: a refused client tries
			// the same resource again.
			n := pos[i]
			defer func() { pos[i] = n }()
			for !stop.Load() {
				res := benchResource(workload, i, n)
				t0 := time.Now()
				granted, k, err := w.acquire(res)
				t1 := time.Now()
				p.requests += int64(k)
				if k > 0 {
					p.lat = append(p.lat, t1.Sub(t0)/time.Duration(k))
				}
				if err != nil {
					fail(err)
					time.Sleep(time.Millisecond)
					continue
				}
				if !granted {
					p.refused++
					continue
				}
				k, err = w.release(res)
				p.lat = append(p.lat, time.Since(t1)/time.Duration(max(k, 1)))
				p.requests += int64(k)
				if err != nil {
					fail(err)
					continue
				}
				p.pairs++
				n++
			}
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	r := benchResult{elapsed: time.Since(start)}
	for _, p := range parts {
		r.pairs += p.pairs
		r.requests += p.requests
		r.refused += p.refused
		r.errors += p.errors
		if r.firstErr == nil {
			r.firstErr = p.firstErr
		}
		r.lat = append(r.lat, p.lat...)
	}
	slices.Sort(r.lat)
	return r
}

// planeTarget is the real server, in-process, on a loopback port.
type planeTarget struct {
	label string
	srv   *server.Server
	dir   string
	url   string
	key   string
	hc    *http.Client
}

func openPlaneTarget(f kernel.Factory, clients int) (*planeTarget, error) {
	dir, err := os.MkdirTemp("", "leaseplane-bench-")
	if err != nil {
		return nil, err
	}
	s, err := server.New(server.Config{DataDir: dir, Engine: f, Clock: time.Now})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	key, _, err := s.Bootstrap("bench")
	if err != nil {
		s.Shutdown(context.Background())
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Shutdown(context.Background())
		os.RemoveAll(dir)
		return nil, err
	}
	go s.Serve(ln)
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	return &planeTarget{
		label: "leaseplane/" + f.Name(), srv: s, dir: dir, url: "http://" + ln.Addr().String(), key: key,
		hc: &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}, nil
}

func (t *planeTarget) name() string { return t.label }

func (t *planeTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.srv.Shutdown(ctx)
	t.hc.CloseIdleConnections()
	os.RemoveAll(t.dir)
}

// commitStats reads the commit counters from the server's /metrics; zero
// when they cannot be read.
func (t *planeTarget) commitStats() commitStats {
	resp, err := t.hc.Get(t.url + "/metrics")
	if err != nil {
		return commitStats{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return commitStats{}
	}
	var c commitStats
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "leaseplane_commit_batch_commands_count":
			c.commits = v
		case "leaseplane_commit_batch_commands_sum":
			c.commands = v
		case "leaseplane_commit_duration_seconds_sum":
			c.seconds = v
		}
	}
	return c
}

func (t *planeTarget) worker(i int) (benchWorker, error) {
	w := &planeWorker{did: fmt.Sprintf("did:bench:client:%d", i)}
	if benchStdClient {
		w.c = client.New(t.url, t.key, t.hc)
		return w, nil
	}
	raw, err := newRawHTTP(t.url, t.key)
	if err != nil {
		return nil, err
	}
	w.raw = raw
	return w, nil
}

// benchStdClient makes the lease plane's bench clients server/client
// (net/http) instead of the minimal raw HTTP client.
var benchStdClient bool

type planeWorker struct {
	c   *client.Client
	raw *rawHTTP
	did string
}

func (w *planeWorker) body(res string) []byte {
	return []byte(`{"resource":"` + res + `","actorDid":"` + w.did + `"}`)
}

func (w *planeWorker) call(op kernel.Op, body []byte) (int, []byte, error) {
	if w.raw == nil {
		return w.c.Call(context.Background(), op, body)
	}
	path := client.PathLease
	if op == kernel.OpRelease {
		path = client.PathRelease
	}
	return w.raw.do("POST", path, body)
}

func (w *planeWorker) acquire(res string) (bool, int, error) {
	status, ans, err := w.call(kernel.OpAcquire, w.body(res))
	switch {
	case err != nil:
		return false, 1, err
	case status == http.StatusOK:
		return true, 1, nil
	case status == http.StatusConflict:
		return false, 1, nil
	}
	return false, 1, fmt.Errorf("acquire %s: HTTP %d %s", res, status, ans)
}

func (w *planeWorker) release(res string) (int, error) {
	status, ans, err := w.call(kernel.OpRelease, w.body(res))
	if err != nil {
		return 1, err
	}
	if status != http.StatusOK {
		return 1, fmt.Errorf("release %s: HTTP %d %s", res, status, ans)
	}
	return 1, nil
}

func (w *planeWorker) close() {
	if w.raw != nil {
		w.raw.close()
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// daemon is a baseline's server process that bench started.
type daemon struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDaemon starts a baseline's server process and waits until ready
// answers nil (or 15 s pass).
func startDaemon(name string, args []string, ready func() error) (*daemon, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s is not installed (apt-get install -y %s): %w", name, debianPackage(name), err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := ready()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited before it was ready: %v", name, cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("%s not ready after 15 s: %w", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the process and waits for it.
func (d *daemon) stop() {
	d.cmd.Process.Kill()
	<-d.exited
}

func debianPackage(name string) string {
	if name == "etcd" {
		return "etcd-server"
	}
	return name
}
