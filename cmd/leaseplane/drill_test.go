package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// startServeAt runs `leaseplane serve` on data; stop ends it (cleanup
// does too). out is what it printed.
func startServeAt(t *testing.T, data string, flags ...string) (url string, out *servertest.Buffer, stop func()) {
	t.Helper()
	s := serveInProcess(t, append([]string{"--addr", "127.0.0.1:0", "--data", data, "--log-level", "warn"}, flags...), serveEnv{clock: time.Now})
	return s.url, s.out, s.stop
}

// startTestServe runs the binary built for tests (servertest.TestBinary,
// which takes --test-fault and --test-drills) with extra serve flags and
// returns its URL and an operator key.
func startTestServe(t *testing.T, flags ...string) (url, operator string) {
	t.Helper()
	data := t.TempDir()
	c := startChildBin(t, servertest.TestBinary(t), data, flags...)
	return c.url, keysCLI(t, "create", "--data", data, "--workspace", firstWorkspace, "--operator")
}

func TestDrillVerb(t *testing.T) {
	url, op := startTestServe(t, "--test-drills", "two-agents-one-slot,deadlock,stale-lease-id")
	t.Setenv("LEASEPLANE_URL", url)
	t.Setenv("LEASEPLANE_KEY", op)
	code, out, errOut := cli(t, "drill", "--wait")
	if code != 0 || !strings.Contains(out, "pass  deadlock") || !strings.Contains(out, "passed in") {
		t.Fatalf("drill --wait on a healthy plane: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "leaseplane drill: waiting for run run_1") {
		t.Errorf("drill --wait said nothing while it waited: stderr %q", errOut)
	}
	code, out, _ = cli(t, "drill")
	if code != 0 || !strings.HasPrefix(out, "drill run run_2 asked") {
		t.Errorf("drill: exit %d %q", code, out)
	}
}

// TestDrillVerbFaultyEngine: a server whose engine answers one verdict
// wrong (--test-fault wrong-deadlock) fails the deadlock drill, and only
// it, showing the two answers.
func TestDrillVerbFaultyEngine(t *testing.T) {
	url, op := startTestServe(t, "--test-fault", "wrong-deadlock", "--test-drills", "two-agents-one-slot,deadlock,stale-lease-id")
	t.Setenv("LEASEPLANE_URL", url)
	t.Setenv("LEASEPLANE_KEY", op)
	code, out, errOut := cli(t, "drill", "--wait")
	if code != 1 {
		t.Fatalf("drill --wait on a faulty plane: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"pass  two-agents-one-slot", "FAIL  deadlock", "step 3 (acquire at +300 ms): the answer differs",
		`expected: 409 {"ok":false,"reason":"deadlock"`, `live:     409 {"ok":false,"reason":"lease_held"`, "pass  stale-lease-id", "FAILED"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDrillVerbRefusedAndUsage(t *testing.T) {
	p := startPlane(t) // LEASEPLANE_KEY is a workspace key: not enough
	_ = p
	if code, _, errOut := cli(t, "drill"); code != 1 || !strings.Contains(errOut, "needs an operator key") {
		t.Errorf("drill with a workspace key: exit %d, %q", code, errOut)
	}
	if code, _, _ := cli(t, "drill", "extra"); code != 2 {
		t.Errorf("drill extra: exit %d", code)
	}
	if code, out := help(servertest.TestBinary(t), "--test-fault", "bogus", "--data", t.TempDir()); code != 2 || !strings.Contains(out, `--test-fault "bogus": want no-alarms`) {
		t.Errorf("serve --test-fault bogus on the test binary: exit %d: %s", code, out)
	}
}
