package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/drill"
	"github.com/leaseplane/leaseplane/server/store"
)

// drillServer is a server on the real clock, as drills need.
type drillServer struct {
	t        *testing.T
	s        *Server
	dir      string
	key      string // workspace key of "default"
	operator string
}

func newDrillServer(t *testing.T, dir string, cfg Config) *drillServer {
	t.Helper()
	cfg.DataDir = dir
	if cfg.Engine == nil {
		cfg.Engine = kernel.Native
	}
	cfg.Clock = time.Now
	s := mustNew(t, cfg)
	ds := &drillServer{t: t, s: s, dir: dir}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	key, created, err := s.Bootstrap("default")
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Store().WorkspaceByName("default")
	if err != nil {
		t.Fatal(err)
	}
	if created {
		ds.key = key
	} else if ds.key, _, err = s.Store().CreateKey(w, store.RoleWorkspace, "", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if ds.operator, _, err = s.Store().CreateKey(w, store.RoleOperator, "", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	return ds
}

func (ds *drillServer) do(method, path, key, body string) (int, []byte) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	w := httptest.NewRecorder()
	ds.s.Handler().ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

type runView struct {
	ID           string
	Trigger      string
	StartedAtMs  *int64
	FinishedAtMs *int64
	Passed       *bool
	Drills       []drill.Result
}

func (ds *drillServer) runs() ([]runView, int64) {
	ds.t.Helper()
	st, b := ds.do("GET", RouteDrillsRuns+"?limit=1000", ds.key, "")
	if st != 200 {
		ds.t.Fatalf("GET runs: %d %s", st, b)
	}
	var v struct {
		OK      bool
		EveryMs int64
		Runs    []runView
	}
	if err := json.Unmarshal(b, &v); err != nil || !v.OK || !bytes.HasPrefix(b, []byte(`{"ok":true,"everyMs":`)) {
		ds.t.Fatalf("GET runs (want \"ok\" then \"everyMs\" first, as docs/DETECTION.md): %v %s", err, b)
	}
	return v.Runs, v.EveryMs
}

// runOnce asks for a run and waits for it to finish.
func (ds *drillServer) runOnce(timeout time.Duration) runView {
	ds.t.Helper()
	st, b := ds.do("POST", RouteDrillsRun, ds.operator, "")
	if st != 200 {
		ds.t.Fatalf("POST run: %d %s", st, b)
	}
	var a struct{ ID string }
	json.Unmarshal(b, &a)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		runs, _ := ds.runs()
		for _, r := range runs {
			if r.ID == a.ID && r.FinishedAtMs != nil {
				return r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	ds.t.Fatalf("run %s did not finish within %v", a.ID, timeout)
	return runView{}
}

func byName(r runView) map[string]drill.Result {
	m := map[string]drill.Result{}
	for _, d := range r.Drills {
		m[d.Name] = d
	}
	return m
}

func TestDrillFilesReplay(t *testing.T) {
	ds, err := drill.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 6 {
		t.Fatalf("%d drills, want the six drills", len(ds))
	}
	for _, d := range ds {
		if d.Scenario.Title == "" || d.Scenario.Description == "" {
			t.Errorf("%s: a drill needs a title and a description", d.Name)
		}
	}
}

// TestDrillsFullSet runs the six drills once against a healthy server,
// real clock and alarms (the crashed holder's lease takes its 30 s), and
// checks that the drill workspaces are gone and the real one untouched.
func TestDrillsFullSet(t *testing.T) {
	t.Parallel()
	ds := newDrillServer(t, t.TempDir(), Config{})
	st, before := ds.do("POST", api.PathLease, ds.key, `{"resource":"lock:drill/slot","actorDid":"did:web:real.example:agent:a"}`)
	if st != 200 {
		t.Fatalf("lease in the real workspace: %d %s", st, before)
	}
	run := ds.runOnce(90 * time.Second)
	if run.Passed == nil || !*run.Passed || len(run.Drills) != 6 {
		t.Fatalf("run did not pass: %+v", run)
	}
	for _, d := range run.Drills {
		if !d.Passed || !strings.Contains(d.Detail, "matched") {
			t.Errorf("%s: %+v", d.Name, d)
		}
	}
	if d := byName(run)["crashed-holder"]; !regexp.MustCompile(`answers and [1-9]\d* alarm ticks matched`).MatchString(d.Detail) {
		t.Errorf("crashed-holder saw no alarm tick: %s", d.Detail)
	}
	wss, err := ds.s.Store().Workspaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wss {
		if store.IsDrillWorkspace(w.Name) {
			t.Errorf("drill workspace %s left behind", w.Name)
		}
	}
	// The real workspace kept its own fences: its lease on the resource the
	// drills also used lapsed on its own, and the next grant there is its
	// fence 2, whatever the drill workspaces granted.
	st, after := ds.do("POST", api.PathLease, ds.key, `{"resource":"lock:drill/slot","actorDid":"did:web:real.example:agent:b"}`)
	if st != 200 || !bytes.Contains(after, []byte(`"fence":2`)) {
		t.Errorf("the real workspace's next grant: %d %s; want fence 2 after %s", st, after, before)
	}
}

// TestDrillAlarmsDisabled: a server that arms no alarm fails the
// crashed-holder drill, naming the alarm that did not fire; the drill
// before it still passes.
func TestDrillAlarmsDisabled(t *testing.T) {
	t.Parallel()
	ds := newDrillServer(t, t.TempDir(), Config{faults: faults{disableAlarms: true, drillNames: []string{"two-agents-one-slot", "crashed-holder"}}})
	run := ds.runOnce(90 * time.Second)
	m := byName(run)
	if run.Passed == nil || *run.Passed || !m["two-agents-one-slot"].Passed || m["crashed-holder"].Passed {
		t.Fatalf("want only crashed-holder to fail: %+v", run)
	}
	d := m["crashed-holder"]
	// The first alarm missed is the end of the waiting agent's claim window
	// (an alarm too since the queue's claims), before the lease's expiry;
	// the expected side is what a tick by the step's time gives: the expiry.
	if d.Step == nil || *d.Step != 2 || !strings.Contains(d.Detail, "did not fire") || d.Live != "no alarm fired" ||
		!strings.Contains(d.Expected, `"nextAlarmMs"`) || !strings.Contains(d.Expected, "coordination.expire") {
		t.Errorf("crashed-holder's failure does not name the missing alarm: %+v", d)
	}
}

// TestDrillCadence sets a 2 s cadence: runs follow each other without
// overlapping, all pass, and after a restart the cadence goes on.
func TestDrillCadence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	few := []string{"two-agents-one-slot", "stale-lease-id"}
	ds := newDrillServer(t, dir, Config{faults: faults{drillNames: few}})
	// The answer's members in the order docs/DETECTION.md gives, as the
	// Worker answers: "ok" first.
	if st, b := ds.do("PUT", RouteDrillsCadence, ds.operator, `{"everyMs":2000}`); st != 200 || string(b) != `{"ok":true,"everyMs":2000}` {
		t.Fatalf("PUT cadence: %d %s", st, b)
	}
	waitRuns := func(ds *drillServer, n int) []runView {
		deadline := time.Now().Add(90 * time.Second)
		for {
			runs, every := ds.runs()
			if every != 2000 {
				t.Fatalf("cadence %d, want 2000", every)
			}
			done := 0
			for _, r := range runs {
				if r.FinishedAtMs != nil {
					done++
				}
			}
			if done >= n {
				return runs
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d runs finished: %+v", done, n, runs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitRuns(ds, 3)
	if err := ds.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ds2 := newDrillServer(t, dir, Config{faults: faults{drillNames: few}})
	runs := waitRuns(ds2, 6)
	var prevStart int64
	for i := len(runs) - 1; i >= 0; i-- { // oldest first
		r := runs[i]
		if r.FinishedAtMs == nil {
			continue
		}
		if r.Passed == nil || !*r.Passed || len(r.Drills) != len(few) {
			t.Errorf("run %s did not pass: %+v", r.ID, r)
		}
		if r.Trigger != "cadence" {
			t.Errorf("run %s trigger %q", r.ID, r.Trigger)
		}
		if *r.StartedAtMs < prevStart {
			t.Errorf("run %s started at %d, before the previous run finished (%d)", r.ID, *r.StartedAtMs, prevStart)
		}
		prevStart = *r.FinishedAtMs
	}
	if st, b := ds2.do("PUT", RouteDrillsCadence, ds2.operator, `{"everyMs":0}`); st != 200 {
		t.Fatalf("stop cadence: %d %s", st, b)
	}
	if _, every := ds2.runs(); every != 0 {
		t.Errorf("cadence after stop: %d", every)
	}
}

func TestDrillRoutesRefuse(t *testing.T) {
	ds := newDrillServer(t, t.TempDir(), Config{faults: faults{drillNames: []string{"stale-lease-id"}}})
	w, _ := ds.s.Store().WorkspaceByName("default")
	agent, _, err := ds.s.Store().CreateKey(w, store.RoleAgent, "did:web:a.example", time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, key, body string
		status                  int
		want                    string
	}{
		{"POST", RouteDrillsRun, "", "", 401, "unauthorized"},
		{"POST", RouteDrillsRun, ds.key, "", 403, "needs an operator key"},
		{"POST", RouteDrillsRun, agent, "", 403, "needs an operator key"},
		{"GET", RouteDrillsRuns, agent, "", 403, "agent key"},
		{"GET", RouteDrillsRun, ds.operator, "", 405, "takes POST"},
		{"POST", RouteDrillsRun, ds.operator, `{"drills":1}`, 400, "unknown field"},
		{"GET", RouteDrillsRuns + "?limit=0", ds.key, "", 400, "limit must be"},
		{"PUT", RouteDrillsCadence, ds.operator, `{}`, 400, "everyMs is required"},
		{"PUT", RouteDrillsCadence, ds.operator, `{"everyMs":5}`, 400, "everyMs must be 0"},
		{"PUT", RouteDrillsCadence, ds.operator, `{"everyMs":2000.5}`, 400, "everyMs must be 0"},
		{"PUT", RouteDrillsCadence, ds.operator, `{"everyMs":"2000"}`, 400, "everyMs must be 0"},
		{"PUT", RouteDrillsCadence, ds.operator, `[1]`, 400, "the body must be a JSON object"},
		{"PUT", RouteDrillsCadence, ds.key, `{"everyMs":2000}`, 403, "needs an operator key"},
		{"POST", RouteDrillsCancel, ds.key, `{"id":"run_1"}`, 403, "needs an operator key"},
		{"POST", RouteDrillsCancel, ds.operator, `{}`, 400, "id is required"},
		{"POST", RouteDrillsCancel, ds.operator, `{"id":1}`, 400, "the body must be a JSON object"},
		{"POST", RouteDrillsCancel, ds.operator, `{"id":"run_x"}`, 400, "id must be a run's id, run_N"},
		{"POST", RouteDrillsCancel, ds.operator, `{"id":"run_0"}`, 400, "id must be a run's id, run_N"},
		{"POST", RouteDrillsCancel, ds.operator, `{"id":"run_1","now":true}`, 400, "unknown field"},
		{"POST", RouteDrillsCancel, ds.operator, `{"id":"run_99"}`, 404, "this workspace has no drill run run_99"},
		{"GET", RouteDrillsCancel, ds.operator, ``, 405, "takes POST"},
	}
	for _, tt := range tests {
		st, b := ds.do(tt.method, tt.path, tt.key, tt.body)
		if st != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s %s %q: %d %s; want %d and %q", tt.method, tt.path, tt.body, st, b, tt.status, tt.want)
		}
	}
	if runs, _ := ds.runs(); len(runs) != 0 {
		t.Errorf("refused requests made runs: %+v", runs)
	}
}

// TestDrillQueueBounds: past the plane-wide bound of runs queued or
// running (lowered to 2 here) every workspace is refused 429 naming it,
// whatever its own count; a cancel frees a place. The drill is
// crashed-holder (30 s), so no run finishes meanwhile.
func TestDrillQueueBounds(t *testing.T) {
	t.Parallel()
	ds := newDrillServer(t, t.TempDir(), Config{faults: faults{drillNames: []string{"crashed-holder"}}})
	ds.s.drills.mu.Lock()
	ds.s.drills.max = 2
	ds.s.drills.mu.Unlock()
	now := time.Now().UnixMilli()
	op := map[string]string{"default": ds.operator}
	for _, name := range []string{"b", "c"} {
		w, _, err := ds.s.Store().EnsureWorkspace(name, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if op[name], _, err = ds.s.Store().CreateKey(w, store.RoleOperator, "", now); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(ws string) (int, string) {
		st, b := ds.do("POST", RouteDrillsRun, op[ws], "{}")
		return st, string(b)
	}
	first := ""
	for _, ws := range []string{"default", "b"} {
		st, b := ask(ws)
		if st != 200 {
			t.Fatalf("run of %s: %d %s", ws, st, b)
		}
		if first == "" {
			var a struct{ ID string }
			json.Unmarshal([]byte(b), &a)
			first = a.ID
		}
	}
	st, b := ask("c")
	if st != 429 || !strings.Contains(b, `"limit":"drillRuns","max":2`) || !strings.Contains(b, "the plane has 2 drill runs queued or running") {
		t.Errorf("a third run with the plane's bound at 2: %d %s", st, b)
	}
	if q, refused := ds.s.drills.queueCounts(); refused != 1 || q > 2 {
		t.Errorf("the queue's counts: %d waiting, %d refused; want at most 2 and 1", q, refused)
	}
	if st, b := ds.do("POST", RouteDrillsCancel, ds.operator, `{"id":"`+first+`"}`); st != 200 || !strings.Contains(string(b), `"cancelledAtMs":`) {
		t.Fatalf("cancel %s: %d %s", first, st, b)
	}
	if st, b := ask("c"); st != 200 {
		t.Errorf("c's run once a place was freed: %d %s", st, b)
	}
}
