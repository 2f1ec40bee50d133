package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// cli runs the tool in-process.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// table returns the rows of the table whose title starts with workload.
func table(out, workload string) [][]string {
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, workload+":"):
			in = true
		case line == "":
			in = false
		case in && !strings.HasPrefix(line, "target ") && !strings.Contains(line, "commits/s") && !strings.Contains(line, " by run: ") && !strings.Contains(line, " CPU per pair: ") && !strings.Contains(line, " handoff: "):
			rows = append(rows, strings.Fields(line))
		}
	}
	return rows
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// serverBinary is the leaseplane binary, built once per test process by
// the tool's own buildServer.
func serverBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "leaseplane-bench-test-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath, binErr = buildServer(dir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// requests is the server's count of op's answers with HTTP status code.
func requests(m map[string]float64, op, code string) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "leaseplane_requests_total{") && strings.Contains(k, `op="`+op+`"`) && strings.Contains(k, `code="`+code+`"`) {
			n += v
		}
	}
	return n
}

// TestProcessPlane: the default target is the real binary running serve
// on its own data folder; every pair the tool counts is one granted
// acquire and one release at the server, held and polled; the server
// stops cleanly and its folder goes.
func TestProcessPlane(t *testing.T) {
	bin := serverBinary(t)
	for _, polled := range []bool{false, true} {
		tg, err := openProcessPlane(bin, "native", planeOpts{clients: 8}, "")
		if err != nil {
			t.Fatal(err)
		}
		pid := tg.daemonPID()
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil || exe != bin {
			t.Errorf("the server process runs %q (%v), want %s", exe, err, bin)
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if args := strings.Split(string(cmdline), "\x00"); len(args) < 2 || args[1] != "serve" {
			t.Errorf("the server process's arguments are %q, want serve", args)
		}
		if !strings.HasPrefix(tg.url, "http://127.0.0.1:") || !strings.HasPrefix(tg.key, "lp_") {
			t.Errorf("URL %q and key %q from the first start's output", tg.url, tg.key)
		}
		r, err := measure(tg, "queue", polled, 8, span{pairs: 40, dur: 2 * time.Minute})
		if err != nil || r.errors != 0 {
			t.Fatalf("polled %v: %v, %d errors (%v)", polled, err, r.errors, r.firstErr)
		}
		m := tg.metrics()
		if r.pairs < 40 || r.pairs > r.made {
			t.Errorf("polled %v: %d pairs made, %d counted", polled, r.made, r.pairs)
		}
		// Each pair is one granted acquire and one release; when the run
		// stops, each client may have one more of each under way (a grant
		// it no longer waits for, a release that leaves the queue).
		for _, op := range []string{"acquire", "release"} {
			if got := requests(m, op, "200"); got < float64(r.made) || got > float64(r.made+8) {
				t.Errorf("polled %v: the server answered %v %ss with 200, the tool made %d pairs (want that many, plus at most one per client)", polled, got, op, r.made)
			}
		}
		if err := tg.close(); err != nil {
			t.Errorf("polled %v: close: %v", polled, err)
		}
		select {
		case <-tg.exited:
		default:
			t.Errorf("polled %v: the server process is still running after close", polled)
		}
		if _, err := os.Stat(tg.dir); !os.IsNotExist(err) {
			t.Errorf("polled %v: the server's folder %s is still there (%v)", polled, tg.dir, err)
		}
	}
}

// TestProcessPlaneManyHeld: with more clients than serve's default cap
// on one key's open held requests (32), every client of the queue
// workload waits in a held request at once, and none is refused: the
// tool raises the cap to its client count (its clients share one key).
func TestProcessPlaneManyHeld(t *testing.T) {
	const clients = 40
	tg, err := openProcessPlane(serverBinary(t), "native", planeOpts{clients: clients}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	r, err := measure(tg, "queue", false, clients, span{pairs: 2 * clients, dur: 2 * time.Minute})
	if err != nil || r.errors != 0 {
		t.Fatalf("%v, %d errors (%v)", err, r.errors, r.firstErr)
	}
	if got, ok := tg.metrics()["leaseplane_held_requests_refused_total"]; !ok || got != 0 {
		t.Errorf("the server refused %v held requests at its cap (metric there: %v)", got, ok)
	}
}

// TestProcessPlaneCPUProfile: --cpuprofile reaches the server process,
// which writes its profile when it stops.
func TestProcessPlaneCPUProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "server.prof")
	code, out, errOut := cli(t, "--server-binary", serverBinary(t), "--clients", "2", "--pairs", "20", "--duration", "2m", "--peers", "",
		"--workloads", "spread", "--cpuprofile", prof)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "CPU profile of leaseplane/native spread (the server process): "+prof) {
		t.Errorf("the output does not name the profile:\n%s", out)
	}
	b, err := os.ReadFile(prof)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile: %d bytes, %v; want gzip", len(b), err)
	}
}

// TestProcessPlaneLoadgenCPUProfile: --loadgen-cpuprofile profiles this
// process (the load generator) during the first leaseplane workload, beside
// --cpuprofile's profile of the server process: each is a gzipped profile
// that go tool pprof reads, and each names its own process's executable
// among its mappings (this test binary; the leaseplane binary).
func TestProcessPlaneLoadgenCPUProfile(t *testing.T) {
	dir := t.TempDir()
	srvProf, lgProf := filepath.Join(dir, "server.prof"), filepath.Join(dir, "loadgen.prof")
	bin := serverBinary(t)
	code, out, errOut := cli(t, "--server-binary", bin, "--clients", "2", "--pairs", "20", "--duration", "2m", "--peers", "",
		"--workloads", "spread,contended", "--cpuprofile", srvProf, "--loadgen-cpuprofile", lgProf)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "CPU profile of leaseplane/native spread (the load generator, this process): "+lgProf) {
		t.Errorf("the output does not name the load generator's profile:\n%s", out)
	}
	if n := strings.Count(out, "CPU profile of "); n != 2 {
		t.Errorf("the output names %d profiles, want 2 (the first workload's only):\n%s", n, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ file, exe string }{{lgProf, self}, {srvProf, bin}} {
		b, err := os.ReadFile(p.file)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %d bytes, not gzip: %v", p.file, len(b), err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("%s: %v", p.file, err)
		}
		if !bytes.Contains(raw, []byte(p.exe)) {
			t.Errorf("%s does not name %s among its mappings: not that process's profile", p.file, p.exe)
		}
		if top, err := exec.Command("go", "tool", "pprof", "-top", p.file).CombinedOutput(); err != nil {
			t.Errorf("go tool pprof -top %s: %v\n%s", p.file, err, top)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "x.prof")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients", "0"}, "--clients 0: want 1 to 10000"},
		{[]string{"--engines", "steam"}, `unknown engine "steam"`},
		{[]string{"--peers", "zookeeper"}, `unknown peer "zookeeper"`},
		{[]string{"--workloads", "spread,chaos"}, `unknown workload "chaos"`},
		{[]string{"--workloads", ""}, "name at least one"},
		{[]string{"--engines", "", "--peers", ""}, "no targets"},
		{[]string{"--duration", "0s"}, "want a positive duration"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--runs", "0"}, "--runs 0: want 1 to 100"},
		{[]string{"--pairs", "-1"}, "--pairs -1: want 0"},
		{[]string{"--queue-waits", "spin"}, `unknown queue wait "spin"`},
		{[]string{"--in-process", "--server-binary", "/x"}, "choose one"},
		{[]string{"--in-process", "--loadgen-cpuprofile", prof}, "--loadgen-cpuprofile and --in-process: choose one"},
		{[]string{"--cpuprofile", prof, "--loadgen-cpuprofile", prof}, "name the same file"},
		{[]string{"--loadgen-cpuprofile", "/no/such/dir/x.prof"}, "--loadgen-cpuprofile: open /no/such/dir/x.prof"},
	} {
		code, _, errOut := cli(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, errOut := cli(t, "-h"); code != 0 || !strings.Contains(errOut, "usage: leaseplane-bench") {
		t.Errorf("-h: exit %d stderr %q", code, errOut)
	}
}

// TestRawHTTP checks the bench's HTTP client against net/http's server.
func TestRawHTTP(t *testing.T) {
	var auths []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auths = append(auths, r.Header.Get("Authorization"))
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.WriteHeader(http.StatusConflict)
			w.Write(b)
		case "/chunked":
			w.Write([]byte("a"))
			w.(http.Flusher).Flush()
			w.Write([]byte("b"))
		}
	}))
	defer ts.Close()
	c, err := newRawHTTP(ts.URL, "k1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for i := range 3 {
		status, ans, err := c.do("POST", "/echo", []byte(`{"n":`+strconv.Itoa(i)+`}`))
		if err != nil || status != 409 || string(ans) != `{"n":`+strconv.Itoa(i)+`}` {
			t.Fatalf("request %d: %d %q %v", i, status, ans, err)
		}
		if i == 1 {
			// The server drops idle connections; the client redials once.
			ts.CloseClientConnections()
		}
	}
	if len(auths) != 3 || auths[0] != "Bearer k1" {
		t.Errorf("Authorization headers %q", auths)
	}
	if _, _, err := c.do("GET", "/chunked", nil); err == nil || !strings.Contains(err.Error(), "Transfer-Encoding chunked") {
		t.Errorf("chunked answer: err %v", err)
	}
	if _, err := newRawHTTP("https://x", ""); err == nil {
		t.Error("https URL accepted")
	}
}

// TestProcCPUShortRun: a process that has run less than one 10 ms clock
// tick still reads more than zero (its threads' schedstat), so the server's
// part of a short row's CPU is not dropped; and the reading never goes back.
func TestProcCPUShortRun(t *testing.T) {
	first := procCPU(os.Getpid())
	if first <= 0 {
		t.Fatalf("procCPU of this process = %v, want > 0", first)
	}
	x := 0
	for i := range 1_000_000 {
		x += i % 7
	}
	if second := procCPU(os.Getpid()); second < first || x == 0 {
		t.Errorf("procCPU went from %v to %v after more work", first, second)
	}
	if got := procCPU(1 << 30); got != 0 {
		t.Errorf("procCPU of no process = %v, want 0", got)
	}
}
