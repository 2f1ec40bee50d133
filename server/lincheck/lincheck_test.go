package lincheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leaseplane/leaseplane/server/servertest"
)

var (
	duration  = flag.Duration("lincheck.duration", 8*time.Second, "how long the clients run against the plane")
	clients   = flag.Int("lincheck.clients", 16, "concurrent clients, each one agent")
	resources = flag.Int("lincheck.resources", 4, "resources the clients share (client i uses resource i mod this)")
	killEvery = flag.Duration("lincheck.kill-every", 1500*time.Millisecond, "mean time between SIGKILLs of the plane")
)

const leaseTTLMs = 30_000

// op kinds of an input and of an output.
const (
	opAcquire = 'a'
	opRelease = 'r'

	outGrant    = 'g'
	outHeld     = 'h'
	outDeadlock = 'd'
	outReleased = 'r'
	outUnknown  = 'u'
)

type input struct {
	op       byte
	actor    string
	resource string
	// waitMs, above 0, makes an acquire a held request
	// (?waitUpToMs=waitMs): its answer, a grant or the last lease_held,
	// takes effect at one moment between its call and its return like any
	// other's, so the model judges it the same way.
	waitMs int
}

type output struct {
	kind             byte
	holder           string // grant: the lease's holder; lease_held: the holder named ("" for null)
	fence            int64
	granted, expires int64
	released         bool
}

// state is the model's view of one resource. A zero fence or expiry means
// "not known": an acquire whose outcome is unknown may have granted, with
// a fence and a time the history does not show.
type state struct {
	holder string
	fence  int64
	exp    int64
	top    int64 // the highest fence known granted on the resource
	now    int64 // the plane's latest time seen in a grant
}

func free(s state) state { return state{top: s.top, now: s.now} }

// step is the model's nondeterministic step: every state the resource may
// be in after in answered out in state s (none when it cannot be).
func step(s state, in input, out output) []state {
	switch in.op {
	case opAcquire:
		switch out.kind {
		case outUnknown:
			return []state{s, {holder: in.actor, top: s.top, now: s.now}}
		case outGrant:
			// The plane's time of the answer: a renewal keeps its
			// grantedAtMs, and every grant lives 30 s from its answer.
			g := out.expires - leaseTTLMs
			if out.holder != in.actor || g < s.now || out.granted > g {
				return nil
			}
			next := state{holder: in.actor, fence: out.fence, exp: out.expires, top: max(s.top, out.fence), now: g}
			mayLive := s.holder != "" && (s.exp == 0 || g < s.exp)
			mustLive := s.holder != "" && s.exp != 0 && g < s.exp
			if s.holder == in.actor && mayLive &&
				((s.fence != 0 && out.fence == s.fence) || (s.fence == 0 && out.fence > s.top)) {
				return []state{next} // a renewal
			}
			if out.fence > s.top && !mustLive && out.granted == g {
				return []state{next} // a new grant
			}
			return nil
		case outHeld:
			if out.holder == "" || (out.holder == s.holder && out.holder != in.actor) {
				return []state{s}
			}
			return nil
		case outDeadlock:
			return nil
		}
	case opRelease:
		switch out.kind {
		case outUnknown:
			if s.holder == in.actor {
				return []state{s, free(s)}
			}
			return []state{s}
		case outReleased:
			if s.holder == in.actor {
				return []state{free(s)} // released, or it had lapsed
			}
			if out.released {
				return nil
			}
			return []state{s}
		}
	}
	return nil
}

func model() porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var names []string
			for _, o := range h {
				r := o.Input.(input).resource
				if by[r] == nil {
					names = append(names, r)
				}
				by[r] = append(by[r], o)
			}
			var out [][]porcupine.Operation
			for _, n := range names {
				out = append(out, by[n])
			}
			return out
		},
		Init: func() []any { return []any{state{}} },
		Step: func(st, in, out any) []any {
			var next []any
			for _, s := range step(st.(state), in.(input), out.(output)) {
				next = append(next, s)
			}
			return next
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(input), out.(output)
			return fmt.Sprintf("%c %s %s -> %+v", i.op, i.actor, i.resource, o)
		},
		DescribeState: func(st any) string { return fmt.Sprintf("%+v", st.(state)) },
	}).ToModel()
}

// TestModel: the model itself accepts what a plane may answer and refuses
// a second holder, a fence that does not rise and time that goes back.
func TestModel(t *testing.T) {
	g := func(actor string, fence, at int64) output {
		return output{kind: outGrant, holder: actor, fence: fence, granted: at, expires: at + leaseTTLMs}
	}
	a := func(actor string) input { return input{op: opAcquire, actor: actor, resource: "r"} }
	r := func(actor string) input { return input{op: opRelease, actor: actor, resource: "r"} }
	cases := []struct {
		name string
		s    state
		in   input
		out  output
		ok   bool
	}{
		{"first grant", state{}, a("x"), g("x", 1, 100), true},
		{"second holder while the first is live", state{"x", 1, 30100, 1, 100}, a("y"), g("y", 2, 200), false},
		{"grant after the first lapsed", state{"x", 1, 30100, 1, 100}, a("y"), g("y", 2, 30100), true},
		{"renewal keeps the fence", state{"x", 1, 30100, 1, 100}, a("x"), g("x", 1, 200), true},
		{"renewal with another fence", state{"x", 1, 30100, 1, 100}, a("x"), g("x", 2, 200), false},
		{"fence that does not rise", state{top: 5, now: 100}, a("x"), g("x", 5, 200), false},
		{"time that goes back", state{top: 1, now: 100}, a("x"), g("x", 2, 99), false},
		{"new grant's expiry not 30 s on", state{}, a("x"), output{kind: outGrant, holder: "x", fence: 1, granted: 1, expires: 2 + leaseTTLMs}, false},
		{"renewal 30 s from its answer", state{"x", 1, 30100, 1, 100}, a("x"), output{kind: outGrant, holder: "x", fence: 1, granted: 100, expires: 30200}, true},
		{"held by the holder", state{"x", 1, 30100, 1, 100}, a("y"), output{kind: outHeld, holder: "x"}, true},
		{"held by another", state{"x", 1, 30100, 1, 100}, a("y"), output{kind: outHeld, holder: "z"}, false},
		{"held by no one, claims stand", state{}, a("y"), output{kind: outHeld}, true},
		{"deadlock on one resource", state{}, a("y"), output{kind: outDeadlock}, false},
		{"release of a lease not held", state{"x", 1, 30100, 1, 100}, r("y"), output{kind: outReleased, released: true}, false},
		{"release of the held lease", state{"x", 1, 30100, 1, 100}, r("x"), output{kind: outReleased, released: true}, true},
		{"grant after an unknown grant", state{holder: "x", top: 1, now: 100}, a("y"), g("y", 3, 200), true},
	}
	for _, c := range cases {
		if got := len(step(c.s, c.in, c.out)) > 0; got != c.ok {
			t.Errorf("%s: legal %v, want %v", c.name, got, c.ok)
		}
	}
}

// TestLinearizableUnderKillsAndFailedCommits is the check: clients against
// the real binary, SIGKILLed and restarted at random moments, with a
// failpoint failing about one commit in twenty. It reports 0 violations.
func TestLinearizableUnderKillsAndFailedCommits(t *testing.T) {
	if *clients < 16 && !testing.Short() {
		t.Fatalf("-lincheck.clients %d: the check runs at least 16", *clients)
	}
	p := startPlane(t, "fail-commits")
	h := run(t, p, *duration, *killEvery)
	t.Logf("%d operations (%d unknown, %d answered 503), %d kills, %d grants, %d refusals; %d held requests, %d of them granted",
		len(h.ops), h.unknown, h.unavailable, p.kills, h.grants, h.refusals, h.held, h.heldGrants)
	if p.kills == 0 || h.grants == 0 || h.refusals == 0 || h.heldGrants == 0 {
		t.Fatalf("the run did not exercise the plane: %d kills, %d grants, %d refusals, %d held requests granted", p.kills, h.grants, h.refusals, h.heldGrants)
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model(), h.ops, 5*time.Minute)
	t.Logf("porcupine: %s in %s", res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Ok {
		writeVisualization(t, info)
		dumpIllegal(t, h.ops)
		t.Fatalf("the history is not linearizable: %s", res)
	}
}

// TestCheckFindsADoubleGrant runs the binary with a fault that answers
// lease_held refusals as grants: the check must report the violation.
func TestCheckFindsADoubleGrant(t *testing.T) {
	p := startPlane(t, "grant-twice")
	h := run(t, p, 2*time.Second, 0)
	res := porcupine.CheckOperationsTimeout(model(), h.ops, time.Minute)
	t.Logf("%d operations with the grant-twice fault: %s", len(h.ops), res)
	if res != porcupine.Illegal {
		t.Fatalf("a plane that grants twice was judged %s; want Illegal", res)
	}
}

func writeVisualization(t *testing.T, info porcupine.LinearizationInfo) {
	f, err := os.CreateTemp("", "lincheck-*.html")
	if err != nil {
		return
	}
	defer f.Close()
	if err := porcupine.Visualize(model(), info, f); err == nil {
		t.Logf("visualization of the history: %s", f.Name())
	}
}

// history is what the clients saw.
type history struct {
	mu                                     sync.Mutex
	ops                                    []porcupine.Operation
	unknown, unavailable, grants, refusals int
	held, heldGrants                       int // held requests recorded, and those answered a grant
}

// run drives p with the clients for d, killing it every killEvery on
// average (never when 0).
func run(t *testing.T, p *plane, d, killEvery time.Duration) *history {
	t.Helper()
	h := &history{}
	epoch := time.Now()
	clock := func() int64 { return time.Since(epoch).Nanoseconds() }
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client(ctx, p, h, clock, i)
		}()
	}
	if killEvery > 0 {
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(rand.Int64N(int64(2 * killEvery)))):
				p.kill(t)
				p.start(t)
			}
		}
	}
	wg.Wait()
	return h
}

func client(ctx context.Context, p *plane, h *history, clock func() int64, i int) {
	actor := fmt.Sprintf("did:example:lincheck:agent-%d", i)
	resource := fmt.Sprintf("lock:lincheck/%d", i%*resources)
	hc := &http.Client{Timeout: 10 * time.Second}
	for ctx.Err() == nil {
		in := input{op: opAcquire, actor: actor, resource: resource}
		if rand.IntN(3) == 0 { // a third of the acquires are held requests
			in.waitMs = 100 + rand.IntN(1400)
		}
		out, ok := call(p, hc, h, clock, i, in)
		switch {
		case !ok:
			time.Sleep(20 * time.Millisecond)
		case out.kind == outGrant:
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			if rand.IntN(8) > 0 { // now and then, renew instead
				call(p, hc, h, clock, i, input{op: opRelease, actor: actor, resource: resource})
			}
		case out.kind == outHeld:
			time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond)
		}
	}
}

// call sends one request and records it; ok is false when it was not
// recorded (not sent, or answered 503: no effect).
func call(p *plane, hc *http.Client, h *history, clock func() int64, id int, in input) (output, bool) {
	route := "/api/v1/acp/coordination/lease"
	if in.op == opRelease {
		route = "/api/v1/acp/coordination/release"
	}
	if in.waitMs > 0 {
		route += "?waitUpToMs=" + strconv.Itoa(in.waitMs)
	}
	body := `{"resource":"` + in.resource + `","actorDid":"` + in.actor + `"}`
	req, _ := http.NewRequest(http.MethodPost, p.url()+route, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.key)
	callAt := clock()
	resp, err := hc.Do(req)
	var out output
	var raw []byte
	if err == nil {
		raw, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	retAt := clock()
	var oe *net.OpError
	switch {
	case err != nil && errors.As(err, &oe) && oe.Op == "dial":
		return out, false // never sent
	case err != nil && errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		out.kind = outUnknown
		retAt = math.MaxInt64 // it may still take effect
	case err != nil:
		// The connection broke: the process died, so whatever the request
		// did, it did before now.
		out.kind = outUnknown
	case resp.StatusCode == 503:
		h.mu.Lock()
		h.unavailable++
		h.mu.Unlock()
		return out, false
	default:
		var a struct {
			OK     bool    `json:"ok"`
			Reason string  `json:"reason"`
			Holder *string `json:"holder"`
			Lease  struct {
				Holder      string `json:"holder"`
				Fence       int64  `json:"fence"`
				GrantedAtMs int64  `json:"grantedAtMs"`
				ExpiresAtMs int64  `json:"expiresAtMs"`
			} `json:"lease"`
			Released bool `json:"released"`
		}
		if jerr := json.Unmarshal(raw, &a); jerr != nil {
			panic(fmt.Sprintf("%s answered %d %s", route, resp.StatusCode, raw))
		}
		switch {
		case in.op == opRelease && resp.StatusCode == 200:
			out = output{kind: outReleased, released: a.Released}
		case resp.StatusCode == 200 && a.OK:
			out = output{kind: outGrant, holder: a.Lease.Holder, fence: a.Lease.Fence, granted: a.Lease.GrantedAtMs, expires: a.Lease.ExpiresAtMs}
		case resp.StatusCode == 409 && a.Reason == "lease_held":
			out = output{kind: outHeld}
			if a.Holder != nil {
				out.holder = *a.Holder
			}
		case resp.StatusCode == 409 && a.Reason == "deadlock":
			out = output{kind: outDeadlock}
		default:
			panic(fmt.Sprintf("%s answered %d %s", route, resp.StatusCode, raw))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if in.waitMs > 0 {
		h.held++
		if out.kind == outGrant {
			h.heldGrants++
		}
	}
	switch out.kind {
	case outUnknown:
		h.unknown++
	case outGrant:
		h.grants++
	case outHeld, outDeadlock:
		h.refusals++
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: id, Input: in, Call: callAt, Output: out, Return: retAt})
	return out, true
}

// plane is the leaseplane binary serving one data folder on one address.
type plane struct {
	bin, data, fault string
	addr             string
	key              string
	kills            int

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (p *plane) url() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "http://" + p.addr
}

func startPlane(t *testing.T, fault string) *plane {
	p := &plane{bin: servertest.TestBinary(t), data: t.TempDir(), fault: fault, addr: "127.0.0.1:0"}
	p.start(t)
	t.Cleanup(func() { p.kill(t) })
	return p
}

// start runs the binary and waits until it listens; the first start takes
// the key it prints and the port it picked.
func (p *plane) start(t *testing.T) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(p.bin, "serve", "--addr", strings.TrimPrefix(p.url(), "http://"), "--data", p.data, "--log-level", "error", "--test-fault", p.fault)
		stdout, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan bool, 1)
		go func() {
			u, k := servertest.ReadServeStart(stdout)
			if k != "" {
				p.key = k
			}
			if u != "" {
				p.mu.Lock()
				p.addr = strings.TrimPrefix(u, "http://")
				p.mu.Unlock()
			}
			ready <- u != ""
			io.Copy(io.Discard, stdout)
		}()
		var ok bool
		select {
		case ok = <-ready:
		case <-time.After(60 * time.Second):
		}
		if ok {
			p.mu.Lock()
			p.cmd = cmd
			p.mu.Unlock()
			return
		}
		cmd.Process.Kill()
		cmd.Wait()
		if attempt == 5 {
			t.Fatalf("leaseplane serve did not start: %s", stderr.String())
		}
		time.Sleep(200 * time.Millisecond) // the port may not be free yet
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *plane) kill(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p.cmd = nil
	p.kills++
}
