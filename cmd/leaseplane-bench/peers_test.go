//go:build external

package main

// The tests that measure against the peers: a real redis-server and etcd
// (make test-bench-tool installs them and sets the tag).

import (
	"regexp"
	"strings"
	"testing"
)

// checkRows checks a workload's table: the rows named in order, each with
// pairs and no errors, and each peer's ratio to itself 1.00×.
func checkRows(t *testing.T, out, workload string, targets []string) {
	t.Helper()
	rows := table(out, workload)
	if len(rows) != len(targets) {
		t.Fatalf("%s: %d rows, want %d:\n%s", workload, len(rows), len(targets), out)
	}
	for i, f := range rows {
		// target pairs/s p50 p99 max CPU/pair ×etcd ×redis errors
		if len(f) != 9 || f[0] != targets[i] || f[1] == "0" || f[8] != "0" {
			t.Errorf("%s row %q: want %s with pairs and no errors", workload, f, targets[i])
		}
		if f[0] == "etcd" && f[6] != "1.00×" || f[0] == "redis" && f[7] != "1.00×" {
			t.Errorf("%s row %q: a peer's ratio to itself is not 1.00×", workload, f)
		}
	}
}

// TestBenchRuns runs a tiny load of every workload against `leaseplane
// serve` as its own process (both engines, queue held and polled) and
// every peer, each through its own client library, and checks the tables'
// shape, that pairs were made and that nothing failed; figures are not
// asserted. Each row counts 20 pairs (--pairs), not a time: a durable peer
// on a loaded machine is slower, never empty; the 2 m watchdog fails a
// row that has not made them.
func TestBenchRuns(t *testing.T) {
	code, out, errOut := cli(t, "--server-binary", serverBinary(t), "--clients", "4", "--pairs", "20", "--duration", "2m", "--engines", "native,wasm",
		"--peers", "redis,redis-aof,etcd", "--bare")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "leaseplane serve as its own process") {
		t.Errorf("the header does not say the plane ran as its own process:\n%s", out)
	}
	peers := []string{"bare-map", "redis", "redis-aof", "etcd"}
	for _, w := range []string{"spread", "contended"} {
		checkRows(t, out, w, append([]string{"leaseplane/native", "leaseplane/wasm"}, peers...))
	}
	checkRows(t, out, "queue", append([]string{"leaseplane/native/held", "leaseplane/native/polled", "leaseplane/wasm/held", "leaseplane/wasm/polled"}, peers...))
	if !strings.Contains(out, "leaseplane/native ") || !strings.Contains(out, " commands per commit, ") {
		t.Errorf("no commit line for leaseplane:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^leaseplane/native +CPU per pair: .* in the server process, .* in the load generator$`).MatchString(out) {
		t.Errorf("no line splitting leaseplane's CPU between its server process and the load generator:\n%s", out)
	}
	for _, g := range []string{"spread: pairs/s ≥ 2× etcd's Mutex", "spread: p99 ≤ etcd's", "spread: pairs/s ≥ 0.5× Redis's",
		"queue held: pairs/s ≥ 8× etcd's Mutex", "queue held: p99 to a grant ≤ ½ etcd's", "queue polled: pairs/s ≥ 0.15× etcd's Mutex"} {
		if !strings.Contains(out, g) {
			t.Errorf("goal %q missing:\n%s", g, out)
		}
	}
}

// TestBenchInProcess: --in-process runs the server inside the tool, and
// its rows say so.
func TestBenchInProcess(t *testing.T) {
	code, out, errOut := cli(t, "--in-process", "--clients", "4", "--pairs", "20", "--duration", "2m", "--peers", "etcd", "--workloads", "spread,queue")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "inside this process (--in-process)") {
		t.Errorf("the header does not say the plane ran in this process:\n%s", out)
	}
	checkRows(t, out, "spread", []string{"leaseplane/native/in-process", "etcd"})
	checkRows(t, out, "queue", []string{"leaseplane/native/in-process/held", "leaseplane/native/in-process/polled", "etcd"})
}

// TestBenchRunsMedian: with --runs 3 each row is measured three times
// (three figures by run) and the goals say they are medians.
func TestBenchRunsMedian(t *testing.T) {
	code, out, errOut := cli(t, "--server-binary", serverBinary(t), "--runs", "3", "--clients", "2", "--pairs", "10", "--duration", "2m",
		"--peers", "etcd", "--workloads", "spread")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	checkRows(t, out, "spread", []string{"leaseplane/native", "etcd"})
	for _, name := range []string{"leaseplane/native", "etcd"} {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` +by run: pairs/s ([^;]*);`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no figures by run for %s:\n%s", name, out)
		}
		if n := len(strings.Split(m[1], ", ")); n != 3 {
			t.Errorf("%s: %d figures by run, want 3: %q", name, n, m[0])
		}
	}
	if !strings.Contains(out, "goals, first leaseplane target, medians of 3 runs:") {
		t.Errorf("goals do not say they are medians:\n%s", out)
	}
}
