package main

// End-to-end tests of leaseplane serve: the real subcommand on 127.0.0.1:0
// with a temporary data folder, once per engine in the engines map. The
// in-process tests drive the server's clock and alarms; the kill -9 test
// runs the built binary as a child and kills it under load.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"

	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// e2eServer is `leaseplane serve` running in this process.
type e2eServer struct {
	t      *testing.T
	addr   string // where it listens
	url    string
	key    string // the first-start key, when this start made it
	data   string
	clock  *servertest.Clock
	cancel context.CancelFunc
	done   chan int
	out    *servertest.Buffer
	errs   *servertest.Buffer
}

// serveInProcess runs serve with args and env (its ready set here) in this
// process, until stop or the end of the test; it returns once serve
// listens, with the URL and the first-start key it printed.
func serveInProcess(t *testing.T, args []string, env serveEnv) *e2eServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &e2eServer{t: t, cancel: cancel, done: make(chan int, 1), out: &servertest.Buffer{}, errs: &servertest.Buffer{}}
	addr := make(chan string, 1)
	env.ready = func(a string) { addr <- a }
	go func() { s.done <- serve(ctx, args, s.out, s.errs, env) }()
	select {
	case s.addr = <-addr:
	case code := <-s.done:
		cancel()
		t.Fatalf("serve exited %d before listening: %s", code, s.errs)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("serve did not start listening within 60 s")
	}
	s.url, s.key = servertest.ReadServeStart(strings.NewReader(s.out.String()))
	if s.url == "" {
		s.url = "http://" + s.addr
	}
	t.Cleanup(s.stop)
	return s
}

// eachEngine runs test once per engine, as a subtest, against serve
// started on a fresh data folder with a test clock.
func eachEngine(t *testing.T, test func(t *testing.T, engine string, s *e2eServer)) {
	for _, engine := range engineNames() {
		t.Run(engine, func(t *testing.T) { test(t, engine, e2eStart(t, engine, t.TempDir(), servertest.NewClock())) })
	}
}

// e2eStart runs serve on data with engine and clock.
func e2eStart(t *testing.T, engine, data string, clock *servertest.Clock) *e2eServer {
	t.Helper()
	s := serveInProcess(t, []string{"--addr", "127.0.0.1:0", "--data", data, "--engine", engine, "--log-level", "warn"},
		serveEnv{clock: clock.Now, afterFunc: clock.AfterFunc})
	s.data, s.clock = data, clock
	return s
}

// stop shuts the server down as SIGTERM would and checks it exits 0.
func (s *e2eServer) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	if code := <-s.done; code != 0 {
		s.t.Errorf("serve exited %d: %s", code, s.errs)
	}
}

type e2eAnswer struct {
	status int
	header http.Header
	raw    []byte
	m      map[string]any
}

func (a e2eAnswer) str(k string) string { s, _ := a.m[k].(string); return s }

func e2eDo(t *testing.T, method, url, key, body string) e2eAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, raw := servertest.Send(t, req)
	a := e2eAnswer{status: resp.StatusCode, header: resp.Header, raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &a.m); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %v: %s", method, url, err, raw)
		}
	}
	return a
}

func (s *e2eServer) lease(key, resource, actor string) e2eAnswer {
	s.t.Helper()
	return e2eDo(s.t, "POST", s.url+"/api/v1/acp/coordination/lease", key,
		`{"resource":"`+resource+`","actorDid":"`+actor+`"}`)
}

func (s *e2eServer) release(key, body string) e2eAnswer {
	s.t.Helper()
	return e2eDo(s.t, "POST", s.url+"/api/v1/acp/coordination/release", key, body)
}

func (s *e2eServer) wait(key string) e2eAnswer {
	s.t.Helper()
	return e2eDo(s.t, "GET", s.url+"/api/v1/acp/coordination/wait", key, "")
}

// expect checks status and reason (reason "" for ok true).
func expect(t *testing.T, what string, a e2eAnswer, status int, reason string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, a.status, status, a.raw)
	}
	if reason == "" {
		if a.m["ok"] != true {
			t.Fatalf("%s: ok is not true: %s", what, a.raw)
		}
		return
	}
	if a.m["ok"] != false || a.str("reason") != reason {
		t.Fatalf("%s: want ok false, reason %s: %s", what, reason, a.raw)
	}
	if status != 409 && a.str("error") == "" {
		t.Errorf("%s: refusal without error message: %s", what, a.raw)
	}
}

// keysCLI runs `leaseplane keys ARGS` in-process and returns the last word
// of its stdout.
func keysCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"keys"}, args...), nil, &out, &errb); code != 0 {
		t.Fatalf("keys %v: exit %d: %s", args, code, errb.String())
	}
	f := strings.Fields(out.String())
	if len(f) == 0 {
		t.Fatalf("keys %v printed nothing", args)
	}
	return f[len(f)-1]
}

const (
	didRelease = "did:web:acme.example:agent:release"
	didCost    = "did:web:acme.example:agent:cost"
)

// TestServeHTTPRows covers every route and status of docs/SERVER.md
// against the real serve, per engine. (503 on a failing disk write is in
// server's TestCommitFailure, which can inject the failure.)
func TestServeHTTPRows(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string, s *e2eServer) {
		data := s.data
		if s.key == "" || !strings.HasPrefix(s.key, "lp_") {
			t.Fatalf("first start printed no key: %s", s.out)
		}
		k := s.key
		// 200 grant, then renewal keeps id and fence.
		g := s.lease(k, "lock:deploy/production", didRelease)
		expect(t, "grant", g, 200, "")
		lease := g.m["lease"].(map[string]any)
		if lease["fence"] != 1.0 || lease["holder"] != didRelease || lease["expiresAtMs"] != 1_800_000_030_000.0 {
			t.Fatalf("grant: %s", g.raw)
		}
		s.clock.Advance(time.Second)
		r := s.lease(k, "lock:deploy/production", didRelease)
		expect(t, "renew", r, 200, "")
		if rl := r.m["lease"].(map[string]any); rl["id"] != lease["id"] || rl["fence"] != 1.0 || rl["expiresAtMs"] != 1_800_000_031_000.0 {
			t.Fatalf("renewal: %s", r.raw)
		}
		// 409 lease_held with Retry-After.
		h := s.lease(k, "lock:deploy/production", didCost)
		expect(t, "held", h, 409, "lease_held")
		if h.header.Get("Retry-After") != "1" || h.str("holder") != didRelease {
			t.Fatalf("lease_held: Retry-After %q: %s", h.header.Get("Retry-After"), h.raw)
		}
		if st := h.m["stampede"].(map[string]any); st["waitMs"] != 50.0 {
			t.Fatalf("lease_held stampede: %s", h.raw)
		}
		// 409 deadlock with Retry-After: cost holds lock:b and waits on
		// lock:deploy/production; release asking for lock:b closes the loop.
		expect(t, "cost takes lock:b", s.lease(k, "lock:b", didCost), 200, "")
		d := s.lease(k, "lock:b", didRelease)
		expect(t, "deadlock", d, 409, "deadlock")
		if d.header.Get("Retry-After") == "" || d.str("holder") != didCost || d.str("waitingOn") != "lock:deploy/production" {
			t.Fatalf("deadlock: Retry-After %q: %s", d.header.Get("Retry-After"), d.raw)
		}
		// wait 200 shows the queue and the deadlock pair.
		w := s.wait(k)
		expect(t, "wait", w, 200, "")
		if n := len(w.m["queues"].([]any)); n != 2 || len(w.m["deadlocks"].([]any)) != 1 {
			t.Fatalf("wait: %s", w.raw)
		}
		// release: 409 stale_lease for a wrong leaseId, 200 otherwise,
		// 200 released false when nothing is held.
		expect(t, "stale", s.release(k, `{"resource":"lock:deploy/production","actorDid":"`+didRelease+`","leaseId":"lease_0000000000000000"}`), 409, "stale_lease")
		rel := s.release(k, `{"resource":"lock:deploy/production","actorDid":"`+didRelease+`","leaseId":"`+lease["id"].(string)+`"}`)
		expect(t, "release", rel, 200, "")
		if rel.m["released"] != true {
			t.Fatalf("release: %s", rel.raw)
		}
		none := s.release(k, `{"resource":"lock:deploy/production","actorDid":"`+didRelease+`"}`)
		expect(t, "release nothing", none, 200, "")
		if none.m["released"] != false {
			t.Fatalf("release of nothing: %s", none.raw)
		}
		// 400, 401, 413.
		expect(t, "invalid", s.lease(k, "lock:x", "not-a-did"), 400, "invalid_request")
		expect(t, "no key", s.lease("", "lock:x", didCost), 401, "unauthorized")
		expect(t, "bad key", s.lease("lp_000000000000_AAAA", "lock:x", didCost), 401, "unauthorized")
		big := e2eDo(t, "POST", s.url+"/api/v1/acp/coordination/lease", k, `{"resource":"`+strings.Repeat("a", 10000)+`"}`)
		expect(t, "too large", big, 413, "body_too_large")
		// 403 actor_mismatch: an agent key names only its own DID.
		ak := keysCLI(t, "create", "--data", data, "--workspace", "default", "--agent", didCost)
		expect(t, "agent key, own DID", s.lease(ak, "lock:c", didCost), 200, "")
		mm := s.lease(ak, "lock:c", didRelease)
		expect(t, "agent key, other DID", mm, 403, "actor_mismatch")
		expect(t, "agent key, wait", s.wait(ak), 200, "")
		// 403 suspended, through the operator's lever.
		ok := keysCLI(t, "create", "--data", data, "--workspace", "default", "--operator")
		suspend := `{"actorDid":"` + didCost + `"}`
		expect(t, "suspend with workspace key", e2eDo(t, "POST", s.url+"/api/v1/acp/operator/suspend", k, suspend), 403, "forbidden")
		sp := e2eDo(t, "POST", s.url+"/api/v1/acp/operator/suspend", ok, suspend)
		expect(t, "suspend", sp, 200, "")
		if len(sp.m["revokedIds"].([]any)) != 2 {
			t.Fatalf("suspend revoked: %s", sp.raw)
		}
		expect(t, "suspended agent", s.lease(k, "lock:d", didCost), 403, "suspended")
		expect(t, "resume", e2eDo(t, "POST", s.url+"/api/v1/acp/operator/resume", ok, suspend), 200, "")
		expect(t, "resumed agent", s.lease(k, "lock:d", didCost), 200, "")
		// health and metrics.
		hz := e2eDo(t, "GET", s.url+"/healthz", "", "")
		expect(t, "healthz", hz, 200, "")
		if hz.str("engine") != engine {
			t.Errorf("healthz engine: %s", hz.raw)
		}
		mt := e2eDo(t, "GET", s.url+"/metrics", "", "")
		if mt.status != 200 || !bytes.Contains(mt.raw, []byte(`leaseplane_requests_total{code="409",op="acquire"}`)) {
			t.Errorf("metrics: %d %.300s", mt.status, mt.raw)
		}
	})
}

// TestServeKeysAndIsolation: workspaces never see each other; a revoked key
// stops working; a restart gives back exactly the state answered.
func TestServeKeysAndIsolation(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string, s *e2eServer) {
		data := s.data
		k1 := s.key
		k2 := keysCLI(t, "create", "--data", data, "--workspace", "other", "--new-workspace", "--rules", `{"readShared":["file:"]}`)
		expect(t, "ws1 grant", s.lease(k1, "lock:shared-name", didRelease), 200, "")
		g2 := s.lease(k2, "lock:shared-name", didCost)
		expect(t, "ws2 grant of the same name", g2, 200, "")
		if g2.m["lease"].(map[string]any)["fence"] != 1.0 {
			t.Fatalf("ws2 fence: %s", g2.raw)
		}
		// read-shared rules of the second workspace.
		expect(t, "read 1", e2eDo(t, "POST", s.url+"/api/v1/acp/coordination/lease", k2, `{"resource":"file:a","actorDid":"did:ex:r1","mode":"read"}`), 200, "")
		expect(t, "read 2", e2eDo(t, "POST", s.url+"/api/v1/acp/coordination/lease", k2, `{"resource":"file:a","actorDid":"did:ex:r2","mode":"read"}`), 200, "")
		w1, w2 := s.wait(k1), s.wait(k2)
		if bytes.Contains(w1.raw, []byte(didCost)) || bytes.Contains(w1.raw, []byte("file:a")) {
			t.Fatalf("workspace 1 sees workspace 2: %s", w1.raw)
		}
		if bytes.Contains(w2.raw, []byte(didRelease)) {
			t.Fatalf("workspace 2 sees workspace 1: %s", w2.raw)
		}
		// A key of workspace 1 cannot release workspace 2's lease.
		rel := s.release(k1, `{"resource":"lock:shared-name","actorDid":"`+didCost+`"}`)
		if rel.status != 200 || rel.m["released"] != false {
			t.Fatalf("cross-workspace release: %s", rel.raw)
		}
		// keys list shows both workspaces, hashes only.
		var out bytes.Buffer
		if code := run([]string{"keys", "list", "--data", data}, nil, &out, io.Discard); code != 0 {
			t.Fatal("keys list failed")
		}
		if !strings.Contains(out.String(), "other") || strings.Contains(out.String(), k2) {
			t.Fatalf("keys list: %s", out.String())
		}
		// Revocation takes effect as soon as keys revoke returns, though
		// the server has the key cached and its clock has not moved.
		expect(t, "key about to be revoked", s.wait(k2), 200, "")
		keysCLI(t, "revoke", "--data", data, k2)
		expect(t, "revoked key", s.wait(k2), 401, "unauthorized")
		expect(t, "other key still works", s.wait(k1), 200, "")
		// Restart: the same answers.
		before := s.wait(k1).raw
		s.stop()
		s2 := e2eStart(t, engine, data, servertest.NewClock())
		if s2.key != "" {
			t.Errorf("a restart on a used data folder made a new key: %s", s2.out)
		}
		after := s2.wait(k1).raw
		if !bytes.Equal(before, after) {
			t.Fatalf("after restart:\n%s\nbefore:\n%s", after, before)
		}
	})
}

// TestServeLapseWithoutTraffic: a lease lapses at its time with nothing
// asked; its expire event with trust -5 is in the ledger.
func TestServeLapseWithoutTraffic(t *testing.T) {
	eachEngine(t, func(t *testing.T, engine string, s *e2eServer) {
		data, clock := s.data, s.clock
		expect(t, "grant", s.lease(s.key, "lock:nap", didRelease), 200, "")
		clock.Advance(30 * time.Second) // the alarm fires; no lease command
		mt := e2eDo(t, "GET", s.url+"/metrics", "", "")
		if !bytes.Contains(mt.raw, []byte("leaseplane_alarm_ticks_total 1")) {
			t.Errorf("alarm did not tick once: %.2000s", mt.raw)
		}
		s.stop()
		st := servertest.OpenStore(t, data)
		defer st.Close()
		w := servertest.Workspace(t, st, "default")
		es, err := st.LedgerEntries(context.Background(), w.ID, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 2 || !bytes.HasPrefix(es[1].Data, []byte(`{"type":"coordination.expire","atMs":1800000030000,`)) ||
			!bytes.Contains(es[1].Data, []byte(`"trustDelta":-5`)) {
			t.Fatalf("ledger entries after the lapse: %+v", es)
		}
		snap, _, _, err := st.Load(context.Background(), w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(snap, []byte(`"holder":"`+didRelease)) || !bytes.Contains(snap, []byte(`"trust":{"`+didRelease+`":-5}`)) {
			t.Fatalf("state after the lapse: %s", snap)
		}
	})
}

// child is `leaseplane serve` as a separate process.
type child struct {
	cmd      *exec.Cmd
	url, key string
}

// startChild runs the binary on data with the kernel build engine.
func startChild(t *testing.T, engine, data string) *child {
	t.Helper()
	return startChildArgs(t, data, "--engine", engine, "--log-level", "warn")
}

// startChildArgs runs the binary on data with the extra serve flags args
// (a later flag overrides an earlier one).
func startChildArgs(t *testing.T, data string, args ...string) *child {
	t.Helper()
	return startChildBin(t, servertest.Binary(t), data, args...)
}

// startChildBin is startChildArgs of the binary bin (servertest.TestBinary
// for the test-only flags).
func startChildBin(t *testing.T, bin, data string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--log-level", "error"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if c.url, c.key = servertest.ReadServeStart(out); c.url == "" {
		t.Fatalf("serve printed no URL")
	}
	go io.Copy(io.Discard, out)
	return c
}

// loadClient is the load tests' HTTP client: a request to a killed server
// fails in bounded time.
var loadClient = &http.Client{Timeout: 10 * time.Second}

// loadCall sends body to url+path with key, as a load test's client does:
// a failed exchange is returned, not fatal, for the server may be dying.
func loadCall(url, key, method, path, body string) (int, []byte, error) {
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := loadClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// loadPost is loadCall of a POST answered with a JSON object.
func loadPost(url, key, path, body string) (int, map[string]any, error) {
	st, b, err := loadCall(url, key, "POST", path, body)
	var m map[string]any
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	return st, m, err
}

type grant struct {
	resource, holder, id string
	fence                int64
}

// TestServeKill9 kills the server with SIGKILL under load, restarts it on
// the same data folder and checks that every lease it had answered granted
// (and not released) is still held with the same id and fence, that no
// fence was granted twice, and that new grants continue above every fence
// answered before.
func TestServeKill9(t *testing.T) {
	for _, engine := range engineNames() {
		t.Run(engine, func(t *testing.T) { stopUnderLoad(t, engine, syscall.SIGKILL) })
	}
}

// TestServeSIGTERMUnderLoad stops the server gracefully under load: it
// exits 0, no request gets a 5xx, and the restart finds every answered
// grant.
func TestServeSIGTERMUnderLoad(t *testing.T) {
	for _, engine := range engineNames() {
		t.Run(engine, func(t *testing.T) { stopUnderLoad(t, engine, syscall.SIGTERM) })
	}
}

// stopUnderLoad runs 16 clients of acquire+release against a child
// server, stops it with sig, restarts it on the same folder and checks
// what it kept.
func stopUnderLoad(t *testing.T, engine string, sig syscall.Signal) {
	data := t.TempDir()
	c := startChild(t, engine, data)
	key := c.key
	const clients, resources = 16, 6
	type clientState struct {
		lastGrant *grant // acknowledged and not acknowledged released
		inflight  string // "acquire" or "release" while a request is out
		inflRes   string
	}
	var mu sync.Mutex
	var grants []grant
	fivexx := 0
	states := make([]clientState, clients)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	post := func(path, body string) (int, map[string]any, error) {
		st, m, err := loadPost(c.url, key, path, body)
		if st >= 500 {
			mu.Lock()
			fivexx++
			mu.Unlock()
		}
		return st, m, err
	}
	// Grants that are never released: each must survive the kill.
	var holds []grant
	for i := 0; i < 4; i++ {
		res, did := fmt.Sprintf("lock:keep%d", i), fmt.Sprintf("did:example:keeper%d", i)
		st, m, err := post("/api/v1/acp/coordination/lease", `{"resource":"`+res+`","actorDid":"`+did+`"}`)
		if err != nil || st != 200 {
			t.Fatalf("keeper grant: %d %v %v", st, m, err)
		}
		l := m["lease"].(map[string]any)
		holds = append(holds, grant{res, did, l["id"].(string), int64(l["fence"].(float64))})
	}
	servertest.RunClients(&wg, clients, stop, func(i, n int) bool {
		did := fmt.Sprintf("did:example:worker%d", i)
		res := fmt.Sprintf("lock:r%d", (i+n)%resources)
		body := `{"resource":"` + res + `","actorDid":"` + did + `"}`
		mu.Lock()
		states[i].inflight, states[i].inflRes = "acquire", res
		mu.Unlock()
		st, m, err := post("/api/v1/acp/coordination/lease", body)
		if err != nil {
			return false // the server is gone; the request stays in flight
		}
		mu.Lock()
		states[i].inflight = ""
		if st == 200 {
			l := m["lease"].(map[string]any)
			g := grant{res, did, l["id"].(string), int64(l["fence"].(float64))}
			grants = append(grants, g)
			states[i].lastGrant = &g
			states[i].inflight, states[i].inflRes = "release", res
		}
		mu.Unlock()
		if st != 200 {
			return true
		}
		st, _, err = post("/api/v1/acp/coordination/release", body)
		if err != nil {
			return false
		}
		mu.Lock()
		states[i].inflight = ""
		if st == 200 {
			states[i].lastGrant = nil
		}
		mu.Unlock()
		return true
	})
	// Stop once the load has run a while: at least 1 s and 200 grants, at
	// most 10 s (a slow machine).
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(grants)
		mu.Unlock()
		if n >= 200 && time.Since(start) >= time.Second {
			break
		}
	}
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	werr := c.cmd.Wait()
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if sig == syscall.SIGTERM {
		if werr != nil {
			t.Fatalf("serve after SIGTERM: %v (want exit status 0)", werr)
		}
		if fivexx > 0 {
			t.Fatalf("%d requests were answered 5xx during the graceful stop", fivexx)
		}
	}
	if len(grants) < 20 {
		t.Fatalf("only %d grants before the kill: the load did not run", len(grants))
	}
	// Nothing granted twice: (resource, fence) and lease ids unique.
	maxFence := map[string]int64{}
	seen := map[string]bool{}
	for _, g := range grants {
		k := fmt.Sprintf("%s#%d", g.resource, g.fence)
		if seen[k] {
			t.Fatalf("fence %d of %s granted twice", g.fence, g.resource)
		}
		seen[k] = true
		maxFence[g.resource] = max(maxFence[g.resource], g.fence)
	}
	c2 := startChild(t, engine, data)
	if c2.key != "" {
		t.Fatal("restart made a new first key: the data folder was lost")
	}
	c = c2
	req, _ := http.NewRequest("GET", c.url+"/api/v1/acp/coordination/wait", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := loadClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		Queues []struct {
			Resource string
			Holders  []struct {
				ID, Holder string
				Fence      int64
			}
		}
	}
	json.NewDecoder(resp.Body).Decode(&w)
	resp.Body.Close()
	held := map[string]grant{} // by resource
	for _, q := range w.Queues {
		for _, h := range q.Holders {
			held[q.Resource] = grant{q.Resource, h.Holder, h.ID, h.Fence}
		}
	}
	kept := 0
	for _, g := range holds {
		if held[g.resource] != g {
			t.Errorf("%s was granted %s (fence %d) before the kill; after the restart the holder is %+v",
				g.holder, g.resource, g.fence, held[g.resource])
		}
		delete(held, g.resource)
		kept++
	}
	for i, st := range states {
		did := fmt.Sprintf("did:example:worker%d", i)
		if g := st.lastGrant; g != nil {
			h, ok := held[g.resource]
			switch {
			case ok && h == *g:
				kept++
			case st.inflight == "release" && (!ok || h.fence > g.fence):
				// the release was applied (and maybe another grant
				// followed); the answers were lost to the kill
			default:
				t.Errorf("%s was granted %s (fence %d, %s) and did not release it; after the restart the holder is %+v",
					did, g.resource, g.fence, g.id, h)
			}
		}
	}
	for res, h := range held {
		i := 0
		fmt.Sscanf(h.holder, "did:example:worker%d", &i)
		st := states[i]
		if st.lastGrant != nil && *st.lastGrant == h {
			continue
		}
		if st.inflight == "acquire" && st.inflRes == res && h.fence > maxFence[res] {
			continue // granted but its answer was lost to the kill
		}
		t.Errorf("after the restart %s holds %s with fence %d, which no answer granted", h.holder, res, h.fence)
	}
	// New grants continue above every fence answered before.
	for r := 0; r < resources; r++ {
		res := fmt.Sprintf("lock:r%d", r)
		if h, ok := held[res]; ok {
			if st, _, err := post("/api/v1/acp/coordination/release", `{"resource":"`+res+`","actorDid":"`+h.holder+`"}`); err != nil || st != 200 {
				t.Fatalf("release %s after restart: %d %v", res, st, err)
			}
		}
		// The workers that waited keep their claims (admitted waiters, within
		// their back-off window) for up to 1.8 s: ask as a client does, again
		// after each waitMs, until they are over.
		st, m, err := post("/api/v1/acp/coordination/lease", `{"resource":"`+res+`","actorDid":"did:example:after"}`)
		for deadline := time.Now().Add(5 * time.Second); err == nil && st == 409 && m["holder"] == nil && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			st, m, err = post("/api/v1/acp/coordination/lease", `{"resource":"`+res+`","actorDid":"did:example:after"}`)
		}
		if err != nil || st != 200 {
			t.Fatalf("grant %s after restart: %d %v %v", res, st, m, err)
		}
		if f := int64(m["lease"].(map[string]any)["fence"].(float64)); f <= maxFence[res] {
			t.Errorf("%s: fence %d after restart, but %d was answered before the kill", res, f, maxFence[res])
		}
		// Let go before asking for the next lock: holding this one while
		// workers' claims stand on the next would close a wait cycle.
		post("/api/v1/acp/coordination/release", `{"resource":"`+res+`","actorDid":"did:example:after"}`)
	}
	t.Logf("%d grants before %v; %d unreleased grants all kept", len(grants), sig, kept)
}

// TestServeBadInput runs the server's table of malformed requests
// (server/testdata/bad_requests.json) against the real serve: each gets its
// status and a JSON refusal with its reason and an error naming the
// problem, and none changes state.
func TestServeBadInput(t *testing.T) {
	raw, err := os.ReadFile("../../server/testdata/bad_requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name, Method, Path, Auth, Body string
			Status                         int
			Reason, ErrorHas               string
		}
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	eachEngine(t, func(t *testing.T, engine string, s *e2eServer) {
		expect(t, "setup", s.lease(s.key, "lock:a", didRelease), 200, "")
		before := s.wait(s.key).raw
		for _, c := range file.Cases {
			auth, body := c.Auth, c.Body
			switch auth {
			case "":
				auth = "Bearer " + s.key
			case "-":
				auth = ""
			case "@hugekey":
				auth = "Bearer lp_" + strings.Repeat("a", 5000)
			}
			switch body {
			case "@big":
				body = `{"resource":"` + strings.Repeat("x", 9000) + `","actorDid":"did:example:a"}`
			case "@longresource":
				body = `{"resource":"` + strings.Repeat("r", 257) + `","actorDid":"did:example:a"}`
			}
			req, _ := http.NewRequest(c.Method, s.url+c.Path, strings.NewReader(body))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, b := servertest.Send(t, req)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%s: body is not JSON: %s", c.Name, b)
				continue
			}
			msg, _ := m["error"].(string)
			if resp.StatusCode != c.Status || m["ok"] != false || m["reason"] != c.Reason || !strings.Contains(msg, c.ErrorHas) || msg == "" {
				t.Errorf("%s: %d %s; want %d %s naming %q", c.Name, resp.StatusCode, b, c.Status, c.Reason, c.ErrorHas)
			}
		}
		if after := s.wait(s.key).raw; !bytes.Equal(before, after) {
			t.Errorf("bad input changed state:\n%s\n%s", before, after)
		}
	})
}

// BenchmarkServeCallPair is one acquire and one release through
// (*server.Server).Call, the durable path every REST and MCP request takes
// after HTTP parsing (key check, the kernel, group commit to SQLite with
// fsync), per engine. 64 goroutines run at once, each on its own resource,
// so commits are shared.
func BenchmarkServeCallPair(b *testing.B) {
	for _, engine := range engineNames() {
		b.Run(engine, func(b *testing.B) {
			f, err := engines[engine]()
			if err != nil {
				b.Fatal(err)
			}
			s, err := server.New(server.Config{DataDir: b.TempDir(), Engine: f, Clock: time.Now})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			key, _, err := s.Bootstrap("bench")
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1)
				body := []byte(fmt.Sprintf(`{"resource":"lock:bench/%d","actorDid":"did:example:bench%d"}`, i, i))
				ctx := context.Background()
				for pb.Next() {
					if st, a, _ := s.Call(ctx, key, kernel.OpAcquire, body); st != 200 {
						b.Fatalf("acquire: %d %s", st, a)
					}
					if st, a, _ := s.Call(ctx, key, kernel.OpRelease, body); st != 200 {
						b.Fatalf("release: %d %s", st, a)
					}
				}
			})
		})
	}
}

// TestServePortInUse starts serve on an address another listener holds: it
// exits 1, says how to pick another address, and creates nothing, so the
// next start on a free address is still the first and prints the key.
func TestServePortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	data := filepath.Join(t.TempDir(), "data")
	var out, errs servertest.Buffer
	code := serve(context.Background(), []string{"--addr", busy.Addr().String(), "--data", data},
		&out, &errs, serveEnv{clock: servertest.NewClock().Now})
	if code != 1 {
		t.Fatalf("serve on a busy port exited %d, want 1", code)
	}
	for _, want := range []string{busy.Addr().String() + " is already in use", "nothing was created", "--addr", "LEASEPLANE_ADDR=", "make run ADDR="} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs.String())
		}
	}
	if strings.Contains(out.String(), "LEASEPLANE_KEY") {
		t.Errorf("a key was printed although serve never listened: %s", out.String())
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data folder was created (%v) although serve never listened", err)
	}
	s := e2eStart(t, "native", data, servertest.NewClock())
	if !strings.HasPrefix(s.key, "lp_") {
		t.Fatalf("the start after the busy port printed no first key:\n%s", s.out)
	}
	expect(t, "the key works", s.lease(s.key, "lock:a", didRelease), 200, "")
}

// TestServeEnvironment: LEASEPLANE_ADDR and LEASEPLANE_DATA are serve's
// defaults for --addr and --data.
func TestServeEnvironment(t *testing.T) {
	data := filepath.Join(t.TempDir(), "fromenv")
	t.Setenv("LEASEPLANE_ADDR", "127.0.0.1:0")
	t.Setenv("LEASEPLANE_DATA", data)
	s := serveInProcess(t, []string{"--log-level", "warn"}, serveEnv{clock: servertest.NewClock().Now})
	if !strings.Contains(s.out.String(), "serving on http://"+s.addr) {
		t.Errorf("stdout does not name the address it listens on (%s):\n%s", s.addr, s.out)
	}
	s.stop()
	if _, err := os.Stat(filepath.Join(data, "leaseplane.db")); err != nil {
		t.Errorf("LEASEPLANE_DATA was not used: %v", err)
	}
}

// TestServeCPUProfile: --cpuprofile writes a CPU profile (gzip-compressed
// protobuf, as runtime/pprof writes it) once serve stops; a profile path
// that cannot be created stops serve before it serves, naming the flag.
func TestServeCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	s := serveInProcess(t, []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--log-level", "warn", "--cpuprofile", prof},
		serveEnv{clock: time.Now})
	for range 20 {
		resp, err := http.Get(s.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	s.stop()
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatalf("no profile after serve stopped: %v", err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile is %d bytes, not gzip: % x", len(b), b[:min(len(b), 8)])
	}

	var out, errs servertest.Buffer
	bad := filepath.Join(dir, "missing", "cpu.prof")
	code := serve(context.Background(), []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data2"), "--cpuprofile", bad}, &out, &errs, serveEnv{clock: time.Now})
	if code != 2 || !strings.Contains(errs.String(), "--cpuprofile "+bad) {
		t.Errorf("unwritable profile: exit %d, stderr %q; want 2 naming --cpuprofile", code, errs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "data2")); err == nil {
		t.Errorf("serve created its data folder although its profile could not be written")
	}
}
