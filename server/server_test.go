package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/server/store"
)

type testServer struct {
	t     *testing.T
	s     *Server
	clock *servertest.Clock
	dir   string
	key   string
	fault atomic.Pointer[error]
	// ledgerFault, when set, fails every ledger write.
	ledgerFault atomic.Pointer[error]
}

func newTestServer(t *testing.T, dir string) *testServer {
	t.Helper()
	ts := &testServer{t: t, clock: servertest.NewClock(), dir: dir}
	s := mustNew(t, Config{
		DataDir:   dir,
		Engine:    kernel.Native,
		Clock:     ts.clock.Now,
		AfterFunc: ts.clock.AfterFunc,
		faults: faults{
			commit: func() error {
				if e := ts.fault.Load(); e != nil {
					return *e
				}
				return nil
			},
			ledger: func() error {
				if e := ts.ledgerFault.Load(); e != nil {
					return *e
				}
				return nil
			},
		},
	})
	ts.s = s
	key, created, err := s.Bootstrap("default")
	if err != nil {
		t.Fatal(err)
	}
	if created {
		ts.key = key
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return ts
}

// do sends one request through the server's handler.
func (ts *testServer) do(method, path, key string, body string) (int, http.Header, []byte) {
	ts.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	ts.s.Handler().ServeHTTP(w, req)
	return w.Code, w.Header(), w.Body.Bytes()
}

func (ts *testServer) lease(resource, actor string) (int, []byte) {
	st, _, b := ts.do("POST", api.PathLease, ts.key, `{"resource":"`+resource+`","actorDid":"`+actor+`"}`)
	return st, b
}

func (ts *testServer) wait() []byte {
	ts.t.Helper()
	st, _, b := ts.do("GET", api.PathWait, ts.key, "")
	if st != 200 {
		ts.t.Fatalf("wait: %d %s", st, b)
	}
	return b
}

func field(t *testing.T, b []byte, name string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("answer is not a JSON object: %v: %s", err, b)
	}
	return m[name]
}

// TestBadRequests runs malformed requests through the handler: each gets
// its status, a JSON body with ok false, the reason and an error naming
// the problem, and changes nothing.
func TestBadRequests(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	if st, b := ts.lease("lock:a", "did:example:holder"); st != 200 {
		t.Fatalf("setup lease: %d %s", st, b)
	}
	before := ts.wait()
	cases := loadBadRequests(t, "testdata/bad_requests.json", ts.key)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			req := httptest.NewRequest(c.Method, c.Path, strings.NewReader(c.Body))
			if c.Auth != "" {
				req.Header.Set("Authorization", c.Auth)
			}
			w := httptest.NewRecorder()
			ts.s.Handler().ServeHTTP(w, req)
			if w.Code != c.Status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.Status, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			b := w.Body.Bytes()
			if ok := field(t, b, "ok"); ok != false {
				t.Errorf("ok = %v in %s", ok, b)
			}
			if r := field(t, b, "reason"); r != c.Reason {
				t.Errorf("reason %v, want %s: %s", r, c.Reason, b)
			}
			msg, _ := field(t, b, "error").(string)
			if msg == "" || !strings.Contains(msg, c.ErrorHas) {
				t.Errorf("error %q does not name %q", msg, c.ErrorHas)
			}
			if c.Status == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// A wait answer carries nowMs, which is the clock: unchanged clock,
	// unchanged state, identical bytes.
	if after := ts.wait(); !bytes.Equal(before, after) {
		t.Errorf("bad requests changed state:\n%s\n%s", before, after)
	}
}

// badRequest is one row of testdata/bad_requests.json, with its
// placeholders filled in: Auth is the whole Authorization header ("" for
// none).
type badRequest struct {
	Name, Method, Path, Auth, Body string
	Status                         int
	Reason, ErrorHas               string
}

func loadBadRequests(t *testing.T, path, key string) []badRequest {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Cases []badRequest }
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for i := range file.Cases {
		c := &file.Cases[i]
		switch c.Auth {
		case "":
			c.Auth = "Bearer " + key
		case "-":
			c.Auth = ""
		case "@hugekey":
			c.Auth = "Bearer lp_" + strings.Repeat("a", 5000)
		}
		switch c.Body {
		case "@big":
			c.Body = `{"resource":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `","actorDid":"did:example:a"}`
		case "@longresource":
			c.Body = `{"resource":"` + strings.Repeat("r", 257) + `","actorDid":"did:example:a"}`
		}
	}
	if len(file.Cases) < 20 {
		t.Fatalf("%s has only %d cases", path, len(file.Cases))
	}
	return file.Cases
}

// TestCommitFailure: when the disk write fails, the command is answered
// 503 unavailable, nothing is granted, and the workspace comes back from
// disk exactly as it was.
func TestCommitFailure(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	if st, b := ts.lease("lock:a", "did:example:one"); st != 200 {
		t.Fatalf("lease: %d %s", st, b)
	}
	ts.clock.Advance(time.Second)
	before := ts.wait()
	diskFull := errors.New("disk I/O error (injected)")
	ts.fault.Store(&diskFull)
	ts.clock.Advance(time.Second)
	st, h, b := ts.do("POST", api.PathLease, ts.key, `{"resource":"lock:b","actorDid":"did:example:two"}`)
	if st != 503 || field(t, b, "reason") != "unavailable" || h.Get("Retry-After") == "" {
		t.Fatalf("lease during a failing disk: %d %v %s", st, h, b)
	}
	if !strings.Contains(field(t, b, "error").(string), "nothing was granted") {
		t.Errorf("503 error does not say nothing was granted: %s", b)
	}
	ts.fault.Store(nil)
	// The machine was reloaded: lock:b is not held, lock:a still is.
	st, h, b = ts.do("GET", api.PathWait, ts.key, "")
	if st != 200 {
		t.Fatalf("wait after failure: %d %s", st, b)
	}
	var w struct {
		Queues []struct {
			Resource string
			Holders  []struct{ Holder string }
		}
	}
	json.Unmarshal(b, &w)
	if len(w.Queues) != 1 || w.Queues[0].Resource != "lock:a" {
		t.Fatalf("after the failed commit the queues are %s (before: %s)", b, before)
	}
	if st, b := ts.lease("lock:b", "did:example:two"); st != 200 || field(t, b, "lease").(map[string]any)["fence"] != 2.0 {
		// One fence counter per workspace: lock:a took 1; the failed grant's 2
		// was never committed, so the reloaded machine gives 2 again.
		t.Fatalf("lease after recovery: %d %s", st, b)
	}
}

// TestAlarmLapsesWithoutTraffic: a lease lapses at its time with no request
// at all; the expire event with its -5 trust change reaches the events
// table and the tick is in the log.
func TestAlarmLapsesWithoutTraffic(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, dir)
	if st, b := ts.lease("lock:a", "did:example:sleepy"); st != 200 {
		t.Fatalf("lease: %d %s", st, b)
	}
	ts.clock.Advance(29999 * time.Millisecond)
	ts.clock.Advance(time.Millisecond) // the alarm fires here; no request
	ws := ts.s.workspaces[1]
	ws.mu.Lock()
	snap, err := ws.eng.Snapshot()
	ws.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap, []byte(`"holder":"did:example:sleepy"`)) {
		t.Fatalf("lease still held after its alarm: %s", snap)
	}
	if !bytes.Contains(snap, []byte(`"did:example:sleepy":-5`)) {
		t.Errorf("trust not -5 after the lapse: %s", snap)
	}
	if err := ts.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := servertest.OpenStore(t, dir)
	defer st.Close()
	// The ledger holds the events (the events table is written only
	// without a ledger).
	es, err := st.LedgerEntries(context.Background(), 1, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range es {
		typ, _ := kledger.EntryLease(e.Data)
		types = append(types, typ)
	}
	if strings.Join(types, ",") != "coordination.lease,coordination.expire" {
		t.Fatalf("events %v", types)
	}
	if exp := es[1].Data; !bytes.Contains(exp, []byte(`"atMs":1800000030000,`)) || !bytes.Contains(exp, []byte(`"trustDelta":-5`)) {
		t.Errorf("expire event %s", exp)
	}
	_, _, recs, err := st.Load(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = recs // the shutdown snapshot covers them; the log's content is checked in the store tests
}

// TestRestartRecovers: state answered before a shutdown (snapshot) and
// before a crash (log only) is the state after the restart.
func TestRestartRecovers(t *testing.T) {
	for _, snapEvery := range []int{1000, 3} {
		dir := t.TempDir()
		clock := servertest.NewClock()
		cfg := Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc, SnapshotEvery: snapEvery}
		s := mustNew(t, cfg)
		key := mustBootstrap(t, s, "default")
		ctx := context.Background()
		for i, r := range []string{"a", "b", "c", "d", "e"} {
			clock.Advance(time.Duration(i) * time.Millisecond)
			if st, b, _ := s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"`+r+`","actorDid":"did:example:x"}`)); st != 200 {
				t.Fatalf("acquire %s: %d %s", r, st, b)
			}
		}
		s.Call(ctx, key, kernel.OpRelease, []byte(`{"resource":"c","actorDid":"did:example:x"}`))
		s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"a","actorDid":"did:example:y"}`))
		// A waiter, a deadlock pair, a suspended agent: all in the state.
		s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"b","actorDid":"did:example:y"}`))
		s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"z","actorDid":"did:example:y"}`))
		s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"z","actorDid":"did:example:x"}`))
		op, _, _ := s.store.CreateKey(store.Workspace{ID: 1, Name: "default"}, store.RoleOperator, "", 0)
		if st, b, _ := s.Call(ctx, op, kernel.OpSuspend, []byte(`{"actorDid":"did:example:w"}`)); st != 200 {
			t.Fatalf("suspend: %d %s", st, b)
		}
		_, want, _ := s.Call(ctx, key, kernel.OpWait, nil)
		wantSnap := snapshotOf(t, s)
		// A crash: no shutdown, no final snapshot. Only the log (and the
		// periodic snapshots, let finish here so that one is there)
		// remain.
		s.commit.stop()
		s.snaps.stop()
		s.events.stop()
		s.store.Close()
		s.unlock() // the OS drops a dead process's lock
		s2 := mustNew(t, cfg)
		if _, snapSeq, recs, err := s2.store.Load(ctx, 1); err != nil || (snapEvery == 3) != (snapSeq > 0) || len(recs) == 0 {
			t.Fatalf("snapshot every %d: snapshot at %d, %d commands after it, %v", snapEvery, snapSeq, len(recs), err)
		}
		if got := snapshotOf(t, s2); !bytes.Equal(got, wantSnap) {
			t.Errorf("snapshot every %d: state after restart\n%s\nwant\n%s", snapEvery, got, wantSnap)
		}
		_, got, _ := s2.Call(ctx, key, kernel.OpWait, nil)
		if !bytes.Equal(got, want) {
			t.Errorf("snapshot every %d: after restart\n%s\nwant\n%s", snapEvery, got, want)
		}
		s2.Shutdown(ctx)
	}
}

// snapshotOf is the whole state of workspace 1: leases, fences, waiters,
// deadlock pairs, trust and suspensions.
func snapshotOf(t *testing.T, s *Server) []byte {
	t.Helper()
	b := engineSnapshot(t, s, 1)
	for _, must := range []string{`"did:example:x":0.5`, `"waiters":[{`, `"suspended":["did:example:w"]`} {
		if !bytes.Contains(b, []byte(must)) {
			t.Fatalf("the test's state lacks %s: %s", must, b)
		}
	}
	return b
}

// FuzzRequest sends arbitrary bodies, methods and keys through the
// handler: never a panic or a 5xx, always a JSON answer with ok, and a
// reason on every refusal.
func FuzzRequest(f *testing.F) {
	f.Add(uint8(0), `{"resource":"lock:a","actorDid":"did:example:a"}`, true)
	f.Add(uint8(1), `{"resource":"lock:a","actorDid":"did:example:a","leaseId":"lease_1"}`, true)
	f.Add(uint8(2), ``, true)
	f.Add(uint8(3), `{"actorDid":"did:example:a"}`, true)
	f.Add(uint8(0), `{"resource":"\ud800","actorDid":"did:x:1","mode":null,"ttlMs":1e99}`, false)
	f.Add(uint8(0), `{"resource":"r","resource":"r"}`, true)
	f.Add(uint8(1), `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`, true)
	dir := f.TempDir()
	clock := servertest.NewClock()
	s, err := New(Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc})
	if err != nil {
		f.Fatal(err)
	}
	key, _, err := s.Bootstrap("default")
	if err != nil {
		f.Fatal(err)
	}
	routes := []struct{ method, path string }{
		{"POST", api.PathLease}, {"POST", api.PathRelease}, {"GET", api.PathWait}, {"POST", api.PathSuspend},
		{"PUT", api.PathLease}, {"POST", "/api/v1/nope"},
	}
	f.Fuzz(func(t *testing.T, route uint8, body string, withKey bool) {
		r := routes[int(route)%len(routes)]
		req := httptest.NewRequest(r.method, r.path, strings.NewReader(body))
		if withKey {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, w.Code, w.Body)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Fatalf("%q: answer is not a JSON object: %s", body, w.Body)
		}
		if _, ok := m["ok"]; !ok {
			t.Fatalf("%q: answer without ok: %s", body, w.Body)
		}
		if w.Code >= 400 {
			if _, ok := m["reason"]; !ok {
				t.Fatalf("%q: refusal without reason: %s", body, w.Body)
			}
			if w.Code != 409 {
				if _, ok := m["error"]; !ok {
					t.Fatalf("%q: %d without error: %s", body, w.Code, w.Body)
				}
			}
		}
		clock.Advance(time.Millisecond)
	})
}

// TestDataDirLocked: a second server on the same data folder is refused,
// and the folder is free again after Shutdown.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	clock := servertest.NewClock()
	cfg := Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc}
	s := mustNew(t, cfg)
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "in use by another leaseplane serve") {
		t.Fatalf("second server on one folder: %v", err)
	}
	s.Shutdown(context.Background())
	s2, err := New(cfg)
	if err != nil {
		t.Fatalf("after shutdown: %v", err)
	}
	s2.Shutdown(context.Background())
}

// panicky is kernel.Native whose engines panic on a command whose resource
// has "boom" and fail on one with "trap", as a kernel bug or a trapped
// WebAssembly instance would. The server steps every command (Step).
var panicky = kernel.WrapFactory(kernel.Native, "panicky", func(e kernel.Engine) kernel.Engine { return panickyEngine{e} })

type panickyEngine struct{ kernel.Engine }

func (e panickyEngine) Step(c kernel.Command) (kernel.Ready, error) {
	if strings.Contains(c.Resource, "boom") {
		half := c
		half.Resource = strings.ReplaceAll(c.Resource, "boom", "half")
		e.Engine.Step(half)
		panic("kernel bug")
	}
	if strings.Contains(c.Resource, "trap") {
		return kernel.Ready{}, errors.New("wasm trap")
	}
	return e.Engine.Step(c)
}

// TestEngineFailure: an engine that panics or fails mid-command is answered
// 503, and the workspace is rebuilt from disk: the half-applied command
// leaves no trace.
func TestEngineFailure(t *testing.T) {
	clock := servertest.NewClock()
	s := mustNew(t, Config{DataDir: t.TempDir(), Engine: panicky, Clock: clock.Now, AfterFunc: clock.AfterFunc})
	defer s.Shutdown(context.Background())
	key, _, _ := s.Bootstrap("default")
	ctx := context.Background()
	if st, b, _ := s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"lock:a","actorDid":"did:example:a"}`)); st != 200 {
		t.Fatalf("acquire: %d %s", st, b)
	}
	_, before, _ := s.Call(ctx, key, kernel.OpWait, nil)
	for _, res := range []string{"lock:boom", "lock:trap"} {
		st, b, err := s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"`+res+`","actorDid":"did:example:b"}`))
		if err != nil || st != 503 || !bytes.Contains(b, []byte(`"reason":"unavailable"`)) {
			t.Fatalf("%s: %d %s %v", res, st, b, err)
		}
		if _, after, _ := s.Call(ctx, key, kernel.OpWait, nil); !bytes.Equal(after, before) {
			t.Fatalf("after a failed %s:\n%s\nwant\n%s", res, after, before)
		}
	}
}

// TestAlarmAfterRenewal: a renewal moves the lapse; the timer armed for the
// old time finds nothing due, sends no tick, and the lease lapses at the
// new time.
func TestAlarmAfterRenewal(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	ticks := func() float64 {
		mfs, _ := ts.s.metrics.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "leaseplane_alarm_ticks_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}
	if st, b := ts.lease("lock:a", "did:example:a"); st != 200 {
		t.Fatalf("lease: %d %s", st, b)
	}
	ts.clock.Advance(10 * time.Second)
	if st, b := ts.lease("lock:a", "did:example:a"); st != 200 {
		t.Fatalf("renew: %d %s", st, b)
	}
	ts.clock.Advance(20 * time.Second) // the first grant's time: nothing due
	if n := ticks(); n != 0 {
		t.Fatalf("%v ticks before anything was due", n)
	}
	ws := ts.s.workspaces[1]
	ws.mu.Lock()
	at := ws.alarmAt
	ws.mu.Unlock()
	if at != 1_800_000_040_000 {
		t.Fatalf("alarm armed for %d, want the renewed expiry 1800000040000", at)
	}
	ts.clock.Advance(10 * time.Second)
	if n := ticks(); n != 1 {
		t.Fatalf("%v ticks after the renewed expiry, want 1", n)
	}
	if bytes.Contains(ts.wait(), []byte("lock:a")) {
		t.Fatal("the lease outlived its renewed expiry")
	}
}

// TestGroupCommit: commands that arrive while a commit is under way share
// the next one. The first commit is held until 31 more commands wait in
// the queue; they then go to disk in one transaction.
func TestGroupCommit(t *testing.T) {
	clock := servertest.NewClock()
	var commits atomic.Int32 // set to 1 after Bootstrap, which logs no command
	hold := make(chan struct{})
	s := mustNew(t, Config{DataDir: t.TempDir(), Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc,
		faults: faults{commit: func() error {
			if commits.Add(1) == 2 { // the first command's commit
				<-hold
			}
			return nil
		}}})
	defer s.Shutdown(context.Background())
	key, _, _ := s.Bootstrap("default")
	commits.Store(1)
	ctx := context.Background()
	var wg sync.WaitGroup
	call := func(i int) {
		defer wg.Done()
		body := []byte(fmt.Sprintf(`{"resource":"lock:%d","actorDid":"did:example:a%d"}`, i, i))
		if st, b, _ := s.Call(ctx, key, kernel.OpAcquire, body); st != 200 {
			t.Errorf("acquire %d: %d %s", i, st, b)
		}
	}
	wg.Add(1)
	go call(0)
	for commits.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 32; i++ {
		wg.Add(1)
		go call(i)
	}
	for len(s.commit.in) < 31 {
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	if n := commits.Load() - 1; n != 2 {
		t.Fatalf("32 commands took %d commits, want 2 (1, then 31 together)", n)
	}
}

// TestClockOnlyCommandsNotLogged: a wait (or tick) when nothing is due
// only moves the clock and is not logged (no fsync); one that lapses
// something is. After a crash the state and the answers are the same.
func TestClockOnlyCommandsNotLogged(t *testing.T) {
	dir := t.TempDir()
	clock := servertest.NewClock()
	cfg := Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc}
	s := mustNew(t, cfg)
	key := mustBootstrap(t, s, "default")
	ctx := context.Background()
	logged := func(s *Server) int {
		t.Helper()
		_, _, recs, err := s.store.Load(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	for _, r := range []string{"a", "b"} {
		if st, b, _ := s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"`+r+`","actorDid":"did:example:x"}`)); st != 200 {
			t.Fatalf("acquire %s: %d %s", r, st, b)
		}
	}
	// A waiter on b, lapsing 30 s after its request.
	clock.Advance(10 * time.Second)
	if st, b, _ := s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"b","actorDid":"did:example:y"}`)); st != 409 {
		t.Fatalf("acquire b as y: %d %s", st, b)
	}
	// Past y's claim (its back-off window ends 2050 ms after its request,
	// an alarm of its own): the wait that passes it may be logged.
	clock.Advance(3 * time.Second)
	s.Call(ctx, key, kernel.OpWait, nil)
	base := logged(s)
	for range 5 {
		clock.Advance(time.Second)
		if st, b, _ := s.Call(ctx, key, kernel.OpWait, nil); st != 200 || !bytes.Contains(b, []byte(`"did:example:y"`)) {
			t.Fatalf("wait: %d %s", st, b)
		}
	}
	if n := logged(s); n != base {
		t.Errorf("5 waits with nothing due logged %d commands, want none", n-base)
	}
	// Past the leases' expiry (30 s after the grants), before the waiter's
	// lapse (30 s after its request, at 40 s): the wait lapses the leases
	// and is logged.
	clock.Advance(17 * time.Second)
	_, want, _ := s.Call(ctx, key, kernel.OpWait, nil)
	if n := logged(s); n != base+1 {
		t.Errorf("a wait that lapsed leases logged %d commands, want 1", n-base)
	}
	if bytes.Contains(want, []byte(`"holders":[{`)) || !bytes.Contains(want, []byte(`"did:example:y"`)) {
		t.Fatalf("after the expiry, want no holders and y still waiting: %s", want)
	}
	clock.Advance(time.Second)
	_, want, _ = s.Call(ctx, key, kernel.OpWait, nil)
	wantSnap, err := func() ([]byte, error) {
		ws, err := s.workspace(1)
		if err != nil {
			return nil, err
		}
		ws.mu.Lock()
		defer ws.mu.Unlock()
		return ws.eng.Snapshot()
	}()
	if err != nil {
		t.Fatal(err)
	}
	// A crash: only the log remains.
	s.commit.stop()
	s.snaps.stop()
	s.events.stop()
	s.store.Close()
	s.unlock()
	s2 := mustNew(t, cfg)
	defer s2.Shutdown(ctx)
	if _, got, _ := s2.Call(ctx, key, kernel.OpWait, nil); !bytes.Equal(got, want) {
		t.Errorf("wait after restart\n%s\nwant\n%s", got, want)
	}
	ws, err := s2.workspace(1)
	if err != nil {
		t.Fatal(err)
	}
	ws.mu.Lock()
	got, err := ws.eng.Snapshot()
	ws.mu.Unlock()
	if err != nil || !bytes.Equal(got, wantSnap) {
		t.Errorf("state after restart (%v)\n%s\nwant\n%s", err, got, wantSnap)
	}
}
