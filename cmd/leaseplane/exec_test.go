package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/client"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// execHooks replaces exec's clock, sleeper and signals for one test.
type execHooks struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
	sigs  chan os.Signal
}

func hookExec(t *testing.T, sleep func(h *execHooks, ctx context.Context, d time.Duration) error) *execHooks {
	t.Helper()
	h := &execHooks{now: time.Unix(5000, 0), sigs: make(chan os.Signal, 4)}
	oldNow, oldSleep, oldSigs := execNow, execSleep, execSignals
	execNow = func() time.Time { h.mu.Lock(); defer h.mu.Unlock(); return h.now }
	execSleep = func(ctx context.Context, d time.Duration) error {
		h.mu.Lock()
		h.slept = append(h.slept, d)
		h.mu.Unlock()
		return sleep(h, ctx, d)
	}
	execSignals = func() (<-chan os.Signal, func()) { return h.sigs, func() {} }
	t.Cleanup(func() { execNow, execSleep, execSignals = oldNow, oldSleep, oldSigs })
	return h
}

func (h *execHooks) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

// waitFile polls for a file the child writes (the child is a real process).
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("the child never wrote %s", path)
}

// queues reads wait through the CLI and decodes it.
func queues(t *testing.T) client.WaitAnswer {
	t.Helper()
	var w client.WaitAnswer
	if err := json.Unmarshal([]byte(mustCLI(t, 0, "wait")), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// notWaiting fails the test when did waits in any queue.
func notWaiting(t *testing.T, did string) {
	t.Helper()
	for _, q := range queues(t).Queues {
		for _, w := range q.Waiters {
			if w.ActorDid == did {
				t.Errorf("%s still waits on %s", did, q.Resource)
			}
		}
	}
}

func TestExecRunsChildHoldingTheLease(t *testing.T) {
	startPlane(t)
	hookExec(t, func(_ *execHooks, ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() })
	dir := t.TempDir()
	ready, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "stop")
	// The child sees the fence and lease id, and the lease is held while it runs.
	done := runExecAsync(t, "exec", "lock:deploy", "--as", "did:web:a", "--", "sh", "-c",
		`echo "fence=$LEASEPLANE_FENCE id=$LEASEPLANE_LEASE_ID res=$LEASEPLANE_RESOURCE"; touch "$0"; `+
			`while [ ! -e "$1" ]; do sleep 0.02; done; exit 7`, ready, stop)
	waitFile(t, ready)
	w := queues(t)
	if len(w.Queues) != 1 || len(w.Queues[0].Holders) != 1 || w.Queues[0].Holders[0].Holder != "did:web:a" {
		t.Fatalf("while the child runs, wait says %+v; want lock:deploy held by did:web:a", w.Queues)
	}
	held := w.Queues[0].Holders[0]
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 7 {
		t.Fatalf("exit %d, want the child's 7; stderr %q", r.code, r.errOut)
	}
	if want := "fence=1 id=" + held.ID + " res=lock:deploy\n"; r.out != want {
		t.Errorf("child's stdout %q, want %q", r.out, want)
	}
	if w := queues(t); len(w.Queues) != 0 {
		t.Errorf("after the child ended the lease is still there: %+v", w.Queues)
	}
	// A second run gets the next fence: the lease was really released and granted again.
	code, out, _ := cli(t, "exec", "lock:deploy", "--as", "did:web:b", "--", "sh", "-c", `echo "$LEASEPLANE_FENCE"`)
	if code != 0 || out != "2\n" {
		t.Errorf("second run: exit %d stdout %q, want 0 and fence 2", code, out)
	}
}

func TestExecDeadlock(t *testing.T) {
	startPlane(t)
	hookExec(t, func(*execHooks, context.Context, time.Duration) error { return nil })
	// a holds r1, b holds r2 and waits on r1: a asking for r2 closes the loop.
	mustCLI(t, 0, "lease", "r1", "--as", "did:web:a")
	mustCLI(t, 0, "lease", "r2", "--as", "did:web:b")
	mustCLI(t, 1, "lease", "r1", "--as", "did:web:b")
	marker := filepath.Join(t.TempDir(), "ran")
	code, out, errOut := cli(t, "exec", "r2", "--as", "did:web:a", "--", "touch", marker)
	if code != exitDeadlock {
		t.Fatalf("exit %d, want %d (deadlock); stderr %q", code, exitDeadlock, errOut)
	}
	want := "leaseplane exec: deadlock: did:web:b holds r2 and waits on r1, so waiting would never end"
	if !strings.Contains(errOut, want) || out != "" {
		t.Errorf("stderr %q, want it to contain %q; stdout %q", errOut, want, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although the lease was refused")
	}
	w := queues(t)
	if len(w.Deadlocks) != 1 || w.Deadlocks[0].ActorDid != "did:web:a" || w.Deadlocks[0].WaitingOn != "r1" {
		t.Errorf("deadlocks %+v", w.Deadlocks)
	}
}

// untilWaiting returns once did shows as a waiter in the queues: its
// held request has been refused once and is being held by the plane.
func untilWaiting(t *testing.T, did string) {
	t.Helper()
	for i := 0; ; i++ {
		for _, q := range queues(t).Queues {
			for _, w := range q.Waiters {
				if w.ActorDid == did {
					return
				}
			}
		}
		if i > 20000 {
			t.Fatalf("%s never showed as a waiter", did)
		}
		time.Sleep(time.Millisecond)
	}
}

// exec waits in requests the plane holds: b's release answers a's request
// with the grant, with no back-off sleep and no time passing.
func TestExecWaitsHeld(t *testing.T) {
	startPlane(t)
	mustCLI(t, 0, "lease", "r", "--as", "did:web:b")
	h := hookExec(t, func(h *execHooks, ctx context.Context, d time.Duration) error {
		<-ctx.Done() // renewal sleeps: the child ends first
		return ctx.Err()
	})
	done := runExecAsync(t, "exec", "r", "--as", "did:web:a", "--", "sh", "-c", `echo "$LEASEPLANE_FENCE"`)
	untilWaiting(t, "did:web:a")
	mustCLI(t, 0, "release", "r", "--as", "did:web:b")
	r := <-done
	if r.code != 0 || r.out != "2\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	for _, d := range h.slept {
		if d != client.DefaultRenewEvery {
			t.Errorf("slept %v while waiting, want no back-off sleeps (slept %v)", d, h.slept)
		}
	}
}

// --timeout bounds the held requests; the plane answers lease_held when
// its clock reaches the end, and exec exits 5.
func TestExecTimeoutWhileHeld(t *testing.T) {
	p := startPlane(t)
	h := hookExec(t, func(h *execHooks, ctx context.Context, d time.Duration) error { p.clock.Advance(d); return nil })
	execNow = p.clock.Now
	_ = h
	mustCLI(t, 0, "lease", "r", "--as", "did:web:b")
	marker := filepath.Join(t.TempDir(), "ran")
	done := runExecAsync(t, "exec", "r", "--as", "did:web:a", "--timeout", "1s", "--", "touch", marker)
	untilWaiting(t, "did:web:a")
	p.clock.Advance(time.Second)
	r := <-done
	if r.code != exitTimeout || !strings.Contains(r.errOut, "timed out after 1s waiting for r (held by did:web:b)") {
		t.Fatalf("exit %d stderr %q; want %d and the timeout", r.code, r.errOut, exitTimeout)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran without its lease")
	}
	notWaiting(t, "did:web:a") // the timed-out agent gave up its place
}

func TestExecTimeoutSuspendedAndUsage(t *testing.T) {
	p := startPlane(t)
	hookExec(t, func(h *execHooks, ctx context.Context, d time.Duration) error { h.advance(d); return nil })
	mustCLI(t, 0, "lease", "r", "--as", "did:web:b")
	suspend(t, p, "did:web:s")
	marker := filepath.Join(t.TempDir(), "ran")
	tests := []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"exec", "r", "--as", "did:web:s", "--", "touch", marker}, exitSuspended, "leaseplane exec: suspended"},
		{[]string{"exec", "r", "--as", "did:web:a", "--mode", "scribble", "--", "touch", marker}, exitRefused,
			"acquire refused: invalid_request (HTTP 400)"},
		{[]string{"exec", "free", "--as", "did:web:a", "--", "/nonexistent/cmd"}, exitNoStart, `cannot start "/nonexistent/cmd"`},
		{[]string{"exec", "r", "--", "true"}, exitUsage, "--as DID is required: LEASEPLANE_KEY is a workspace key"},
		{[]string{"exec", "r", "--as", "did:web:a"}, exitUsage, "want RESOURCE (and --as DID with a workspace key) and a command"},
		{[]string{"exec", "r", "s", "--as", "did:web:a", "--", "true"}, exitUsage, `want exactly one RESOURCE before --, got ["r" "s"]`},
		{[]string{"exec", "r", "--as", "did:web:a", "--timeout", "-1s", "--", "true"}, exitUsage, "--timeout -1s is negative"},
	}
	for _, tc := range tests {
		code, _, errOut := cli(t, tc.args...)
		if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("%q: exit %d stderr %q; want %d and %q", tc.args, code, errOut, tc.wantCode, tc.wantErr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a command ran without its lease")
	}
	notWaiting(t, "did:web:a") // the timed-out agent gave up its place
	// Without "--", the first word after RESOURCE starts the command.
	code, out, errOut := cli(t, "exec", "--as", "did:web:a", "other", "echo", "--as", "x")
	if code != 0 || out != "--as x\n" {
		t.Errorf("exec without --: exit %d stdout %q stderr %q", code, out, errOut)
	}
}

// gate makes exec's renewal sleeps wait for the test: each sleep announces
// its duration on asked and returns on wake.
type gate struct{ *servertest.Gate }

func newGate() *gate { return &gate{servertest.NewGate()} }

func (g *gate) sleep(h *execHooks, ctx context.Context, d time.Duration) error {
	if err := g.Sleep(ctx, d); err != nil {
		return err
	}
	h.advance(d)
	return nil
}

// runExecAsync runs exec in a goroutine and returns its result channel.
type execResult struct {
	code        int
	out, errOut string
}

func runExecAsync(t *testing.T, args ...string) <-chan execResult {
	done := make(chan execResult, 1)
	go func() {
		var r execResult
		var o, e strings.Builder
		r.code = run(args, strings.NewReader(""), &o, &e)
		r.out, r.errOut = o.String(), e.String()
		done <- r
	}()
	return done
}

func TestExecRenewsWhileRunning(t *testing.T) {
	p := startPlane(t)
	g := newGate()
	hookExec(t, g.sleep)
	dir := t.TempDir()
	ready, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "stop")
	done := runExecAsync(t, "exec", "lock:long", "--as", "did:web:a", "--", "sh", "-c",
		`touch "$0"; while [ ! -e "$1" ]; do sleep 0.02; done; echo "done $LEASEPLANE_FENCE"`, ready, stop)
	waitFile(t, ready)
	granted := queues(t).Queues[0].Holders[0]
	// Four renewal periods, each moving the plane's clock 25 s: 100 s in
	// all, more than three lifetimes. Each renewal keeps the lease.
	for i := range 4 {
		if d := <-g.Asked; d != client.DefaultRenewEvery {
			t.Fatalf("renewal %d waited %s, want %s", i, d, client.DefaultRenewEvery)
		}
		p.clock.Advance(25 * time.Second)
		g.Wake <- struct{}{}
	}
	<-g.Asked // the fourth renewal is answered once the next sleep starts
	w := queues(t)
	if len(w.Queues) != 1 || len(w.Queues[0].Holders) != 1 {
		t.Fatalf("after 100 s of renewals: %+v", w.Queues)
	}
	h := w.Queues[0].Holders[0]
	if h.ID != granted.ID || h.Fence != 1 || h.Holder != "did:web:a" || h.ExpiresAtMs != granted.ExpiresAtMs+100_000 {
		t.Errorf("held %+v, want %s fence 1 expiring at %d", h, granted.ID, granted.ExpiresAtMs+100_000)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 0 || r.out != "done 1\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	if w := queues(t); len(w.Queues) != 0 {
		t.Errorf("not released at the end: %+v", w.Queues)
	}
}

func TestExecStopsChildWhenLeaseIsLost(t *testing.T) {
	p := startPlane(t)
	g := newGate()
	hookExec(t, g.sleep)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	done := runExecAsync(t, "exec", "r", "--as", "did:web:a", "--", "sh", "-c",
		`trap 'echo stopped; exit 9' TERM; touch "$0"; while :; do sleep 0.02; done`, ready)
	waitFile(t, ready)
	<-g.Asked
	// The plane hears nothing for 31 s: the alarm takes the lease back,
	// and its expiry on the events stream stops the child while the
	// renewal still sleeps.
	p.clock.Advance(31 * time.Second)
	r := <-done
	if r.code != exitLost || r.out != "stopped\n" {
		t.Fatalf("exit %d stdout %q stderr %q; want %d and the child's trap output", r.code, r.out, r.errOut, exitLost)
	}
	for _, want := range []string{
		"lost the lease on r: it expired",
		"the command exited with status 9 after it was stopped",
	} {
		if strings.Count(r.errOut, want) != 1 {
			t.Errorf("stderr %q does not say %q once", r.errOut, want)
		}
	}
	mustCLI(t, 0, "lease", "r", "--as", "did:web:b")
	w := queues(t)
	if len(w.Queues) != 1 || w.Queues[0].Holders[0].Holder != "did:web:b" || len(w.Queues[0].Waiters) != 0 {
		t.Errorf("queues %+v, want r held by b alone", w.Queues)
	}
}

// acquireRequests is how many acquire requests (grants, renewals and
// refusals) the plane has answered, from its /metrics.
func acquireRequests(t *testing.T, p *testPlane) int {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "leaseplane_requests_total{") && strings.Contains(line, `op="acquire"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			n += int(v)
		}
	}
	return n
}

// TestExecStopsChildOnSuspend: an operator's suspend stops exec's command
// through the events stream, with no renewal sent between the suspend
// and the stop (the plane's count of acquire requests does not move), and
// exec says so once.
func TestExecStopsChildOnSuspend(t *testing.T) {
	p := startPlane(t)
	// Renewals would wait for ever: only the stream can stop the child.
	hookExec(t, func(_ *execHooks, ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() })
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	done := runExecAsync(t, "exec", "lock:deploy", "--as", "did:web:a", "--", "sh", "-c",
		`trap 'echo stopped; exit 9' TERM; touch "$0"; while :; do sleep 0.02; done`, ready)
	waitFile(t, ready)
	before := acquireRequests(t, p)
	suspend(t, p, "did:web:a")
	r := <-done
	if after := acquireRequests(t, p); after != before {
		t.Errorf("%d acquire requests between the suspend and the stop, want none", after-before)
	}
	if r.code != exitLost || r.out != "stopped\n" {
		t.Fatalf("exit %d stdout %q stderr %q; want %d and the child's trap output", r.code, r.out, r.errOut, exitLost)
	}
	if want := "lost the lease on lock:deploy: the plane revoked it"; strings.Count(r.errOut, want) != 1 {
		t.Errorf("stderr %q does not say %q once", r.errOut, want)
	}
}

func TestExecKillsChildThatIgnoresTERM(t *testing.T) {
	p := startPlane(t)
	g := newGate()
	hookExec(t, g.sleep)
	old := execKillGrace
	execKillGrace = 50 * time.Millisecond
	t.Cleanup(func() { execKillGrace = old })
	ready := filepath.Join(t.TempDir(), "ready")
	done := runExecAsync(t, "exec", "r", "--as", "did:web:a", "--", "sh", "-c",
		`trap '' TERM; touch "$0"; while :; do sleep 0.02; done`, ready)
	waitFile(t, ready)
	<-g.Asked
	p.clock.Advance(31 * time.Second) // lapses: the expiry comes on the events stream
	r := <-done
	if r.code != exitLost || !strings.Contains(r.errOut, "lost the lease on r: it expired") ||
		!strings.Contains(r.errOut, "the command exited with status 137 after it was stopped") {
		t.Fatalf("exit %d stderr %q; want %d, the expiry and SIGKILL's 137", r.code, r.errOut, exitLost)
	}
	// The re-granted lease was given back too.
	if w := queues(t); len(w.Queues) != 0 {
		t.Errorf("queues %+v, want none", w.Queues)
	}
}

func TestExecForwardsSignals(t *testing.T) {
	startPlane(t)
	g := newGate()
	h := hookExec(t, g.sleep)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	done := runExecAsync(t, "exec", "r", "--as", "did:web:a", "--", "sh", "-c",
		`trap 'echo got TERM; exit 7' TERM; touch "$0"; while :; do sleep 0.02; done`, ready)
	waitFile(t, ready)
	h.sigs <- syscall.SIGTERM
	r := <-done
	if r.code != 7 || r.out != "got TERM\n" {
		t.Fatalf("exit %d stdout %q stderr %q, want the child's 7 after its TERM trap", r.code, r.out, r.errOut)
	}
	if w := queues(t); len(w.Queues) != 0 {
		t.Errorf("not released after the signal: %+v", w.Queues)
	}

	// A child killed by the signal gives 128+N.
	done = runExecAsync(t, "exec", "r", "--as", "did:web:a", "--", "sh", "-c", `touch "$0"; exec sleep 60`, ready+"2")
	waitFile(t, ready+"2")
	h.sigs <- syscall.SIGINT
	if r := <-done; r.code != 128+int(syscall.SIGINT) {
		t.Errorf("killed by SIGINT: exit %d stderr %q", r.code, r.errOut)
	}
}

func TestExecInterruptedWhileWaiting(t *testing.T) {
	startPlane(t)
	mustCLI(t, 0, "lease", "r", "--as", "did:web:b")
	h := hookExec(t, func(_ *execHooks, ctx context.Context, d time.Duration) error {
		<-ctx.Done()
		return ctx.Err()
	})
	done := runExecAsync(t, "exec", "r", "--as", "did:web:a", "--", "echo", "ran")
	untilWaiting(t, "did:web:a")
	h.sigs <- syscall.SIGINT
	r := <-done
	if r.code != 130 || r.out != "" || !strings.Contains(r.errOut, "interrupted by interrupt while waiting for r") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	w := queues(t)
	if len(w.Queues) != 1 || len(w.Queues[0].Waiters) != 0 {
		t.Errorf("did:web:a should have left the queue: %+v", w.Queues)
	}
}
