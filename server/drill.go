package server

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
	"github.com/leaseplane/leaseplane/server/store"
)

// The drills are six fixed scenarios, drills/*.json, run against the live
// plane: each in a fresh workspace of its own (named store.DrillPrefix+…,
// which no real workspace can be named) with the scenario's rules, through
// the real HTTP path (a listener on 127.0.0.1 serving the server's own
// handler), durability
// (every command it made must be in the durable log, in order, with the
// time it ran at) and alarms (a tick step waits for the plane's own alarm
// and checks what it did). The workspace is deleted after the drill, its
// events are neither written to the events table nor to a ledger.
//
// The expected answers are the native kernel's replay of the same
// commands at the times the live run used (read from what the plane
// applied), alarm ticks included where they fired. A drill passes when
// every live answer (status and body) and every event matches; otherwise
// its detail shows the first that differs, expected beside live.
//
// Runs are asynchronous and never overlap: one goroutine runs them in
// the order asked; a run asked (or due by cadence) while one is going
// waits for it. Every run is kept in the store; a run that a stop
// interrupted runs again from its start after the restart.

//go:embed drills/*.json
var drillFiles embed.FS

// DrillNames are the drills in the order a run runs them.
var DrillNames = []string{"two-agents-one-slot", "crashed-holder", "deadlock", "herd-of-fifty", "stale-lease-id", "operator-suspends"}

// Drill is one fixed scenario.
type Drill struct {
	Name     string
	JSON     []byte
	Scenario *scenario.Scenario
}

// Drills returns the drills, parsed, in run order.
func Drills() ([]Drill, error) {
	out := make([]Drill, 0, len(DrillNames))
	for _, n := range DrillNames {
		b, err := drillFiles.ReadFile("drills/" + n + ".json")
		if err != nil {
			return nil, fmt.Errorf("server: drill %s: %w", n, err)
		}
		sc, err := scenario.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("server: drill %s: %w", n, err)
		}
		out = append(out, Drill{Name: n, JSON: b, Scenario: sc})
	}
	return out, nil
}

// DrillResult is one drill's outcome in a run.
type DrillResult struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Detail says what matched, or the first answer that differed, with
	// the expected and the live one side by side.
	Detail string `json:"detail"`
	// Step is the index of the scenario step where it failed (absent when
	// it passed).
	Step     *int   `json:"step,omitempty"`
	Expected string `json:"expected,omitempty"`
	Live     string `json:"live,omitempty"`
}

// tapeEntry is one command a drill workspace applied, as the engine
// answered it.
type tapeEntry struct {
	op      kernel.Op
	nowMs   int64
	body    []byte
	status  int
	answer  []byte
	events  []byte
	changed bool
}

// drillGrace is how long past its due time an alarm may take to fire
// before the drill says it did not.
const drillGrace = 5 * time.Second

// drillEnv is what one run's drills share.
type drillEnv struct {
	s      *Server
	runID  int64
	base   string // http://127.0.0.1:port of the run's listener
	client *http.Client
}

// runDrills runs the drills of one run in order; progress is called after
// each drill with the results so far.
func (s *Server) runDrills(ctx context.Context, runID int64, progress func([]DrillResult)) ([]DrillResult, error) {
	drills, err := Drills()
	if err != nil {
		return nil, err
	}
	if len(s.cfg.DrillNames) > 0 {
		var some []Drill
		for _, d := range drills {
			for _, n := range s.cfg.DrillNames {
				if d.Name == n {
					some = append(some, d)
				}
			}
		}
		drills = some
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("server: drills: listen on 127.0.0.1: %w", err)
	}
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	env := &drillEnv{s: s, runID: runID, base: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	var out []DrillResult
	for _, d := range drills {
		r, err := env.run(ctx, d)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		progress(out)
	}
	return out, nil
}

// run runs one drill. err is for what stops the whole run (the server
// stopping); a drill that fails is a result.
func (e *drillEnv) run(ctx context.Context, d Drill) (res DrillResult, err error) {
	s := e.s
	res.Name = d.Name
	now := s.nowMs()
	w, err := s.store.CreateDrillWorkspace(strconv.FormatInt(e.runID, 10)+"-"+d.Name, d.Scenario.Rules, now)
	if err != nil {
		return res, err
	}
	var ws *workspace
	defer func() {
		if derr := s.dropDrillWorkspace(w.ID, ws); derr != nil && err == nil {
			err = derr
		}
	}()
	wkey, _, err := s.store.CreateKey(w, store.RoleWorkspace, "", now)
	if err != nil {
		return res, err
	}
	okey, _, err := s.store.CreateKey(w, store.RoleOperator, "", now)
	if err != nil {
		return res, err
	}
	if ws, err = s.workspace(w.ID); err != nil {
		return res, err
	}
	ws.mu.Lock()
	ws.tape = []tapeEntry{}
	ws.mu.Unlock()
	rules, err := kernel.ParseRules(d.Scenario.Rules)
	if err != nil {
		return res, err
	}
	c := &drillCheck{ref: kernel.New(rules), ws: ws}
	fail := func(step int, detail, expected, live string) (DrillResult, error) {
		res.Passed, res.Detail, res.Expected, res.Live = false, detail, expected, live
		res.Step = &step
		return res, ctx.Err()
	}
	t0 := s.nowMs()
	var first, lag int64
	for i, step := range d.Scenario.Steps {
		cmd, err := kernel.DecodeStep(step)
		if err != nil {
			return fail(i, "step "+strconv.Itoa(i)+" does not decode: "+err.Error(), "", "")
		}
		if i == 0 {
			first = cmd.NowMs
		}
		rel := cmd.NowMs - first
		target := t0 + rel + lag
		if err := s.sleepUntil(ctx, target); err != nil {
			return res, err
		}
		where := "step " + strconv.Itoa(i) + " (" + string(cmd.Op) + " at +" + strconv.FormatInt(rel, 10) + " ms)"
		if cmd.Op == kernel.OpTick {
			// The plane's own alarms must have done, by target, all that
			// the kernel says was due by then.
			for {
				if m := c.feed(ctx, nil); m != nil {
					return fail(i, where+": "+m.detail, m.expected, m.live)
				}
				due, ok := c.ref.NextAlarm()
				if !ok || due > target {
					break
				}
				if s.nowMs() > target+drillGrace.Milliseconds() {
					exp := c.expectTick(target)
					return fail(i, where+": the plane's alarms due by then (the first at +"+strconv.FormatInt(due-t0, 10)+
						" ms) did not fire within "+drillGrace.String()+": expected what a tick by then gives, live: no alarm tick", exp, "no alarm fired")
				}
				if err := s.sleepUntil(ctx, s.nowMs()+20); err != nil {
					return res, err
				}
			}
			continue
		}
		body, err := stepBody(step)
		if err != nil {
			return fail(i, where+": "+err.Error(), "", "")
		}
		status, answer, herr := e.do(ctx, cmd.Op, body, wkey, okey)
		if herr != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return fail(i, where+": the request failed: "+herr.Error(), "", "")
		}
		live := &httpAnswer{status: status, body: answer}
		if m := c.feed(ctx, &stepAnswer{op: cmd.Op, body: body, live: live}); m != nil {
			return fail(i, where+": "+m.detail, m.expected, m.live)
		}
		if l := c.lastStepMs - (t0 + rel); l > lag {
			lag = l
		}
	}
	if m := c.durable(ctx, s); m != nil {
		return fail(len(d.Scenario.Steps)-1, m.detail, m.expected, m.live)
	}
	res.Passed = true
	res.Detail = strconv.Itoa(c.answers) + " answers and " + strconv.Itoa(c.alarms) + " alarm ticks matched the kernel's replay; " +
		strconv.Itoa(c.logged) + " commands found in the durable log"
	return res, nil
}

// drillCheck replays what a drill workspace applied through the
// reference kernel and compares.
type drillCheck struct {
	ref        *kernel.Machine
	ws         *workspace
	consumed   int
	answers    int
	alarms     int
	logged     int
	lastStepMs int64
}

type stepAnswer struct {
	op   kernel.Op
	body []byte
	live *httpAnswer
}

type httpAnswer struct {
	status int
	body   []byte
}

type mismatch struct{ detail, expected, live string }

// feed takes the workspace's new tape entries: alarm ticks are replayed
// and compared; when step is set, exactly one entry must be that step's
// command, compared with its HTTP answer.
func (c *drillCheck) feed(ctx context.Context, step *stepAnswer) *mismatch {
	c.ws.mu.Lock()
	entries := append([]tapeEntry(nil), c.ws.tape[c.consumed:]...)
	c.consumed = len(c.ws.tape)
	c.ws.mu.Unlock()
	seen := false
	for _, te := range entries {
		if te.op == kernel.OpTick && (step == nil || step.op != kernel.OpTick) {
			exp := c.ref.ApplyJSON(kernel.OpTick, te.nowMs, nil)
			c.alarms++
			if exp.Status != te.status || !bytes.Equal(exp.Answer, te.answer) {
				return &mismatch{"the alarm tick at " + strconv.FormatInt(te.nowMs, 10) + " answered differently",
					show(exp.Status, exp.Answer), show(te.status, te.answer)}
			}
			if events := kernel.AppendEvents(nil, exp.Events); !bytes.Equal(events, te.events) {
				return &mismatch{"the alarm tick at " + strconv.FormatInt(te.nowMs, 10) + " emitted different events",
					string(events), string(te.events)}
			}
			continue
		}
		if step == nil || seen || te.op != step.op {
			return &mismatch{"the plane applied a command the drill did not send: " + string(te.op), "", string(te.body)}
		}
		seen = true
		exp := c.ref.ApplyJSON(step.op, te.nowMs, step.body)
		c.answers++
		c.lastStepMs = te.nowMs
		if exp.Status != step.live.status || !bytes.Equal(exp.Answer, step.live.body) {
			return &mismatch{"the answer differs", show(exp.Status, exp.Answer), show(step.live.status, step.live.body)}
		}
		if events := kernel.AppendEvents(nil, exp.Events); !bytes.Equal(events, te.events) {
			return &mismatch{"the events differ", string(events), string(te.events)}
		}
	}
	if step != nil && !seen {
		return &mismatch{"the plane answered without applying the command", "a command applied at the plane",
			show(step.live.status, step.live.body)}
	}
	return nil
}

// expectTick is what a tick at due would answer, without changing ref.
func (c *drillCheck) expectTick(due int64) string {
	snap := c.ref.Snapshot()
	m, err := kernel.Restore(snap)
	if err != nil {
		return "a tick at " + strconv.FormatInt(due, 10)
	}
	r := m.ApplyJSON(kernel.OpTick, due, nil)
	return show(r.Status, r.Answer) + " events " + string(kernel.AppendEvents(nil, r.Events))
}

// durable checks that every command the drill made that changed state is
// in the workspace's durable log, in order, with its time and body.
func (c *drillCheck) durable(ctx context.Context, s *Server) *mismatch {
	c.ws.mu.Lock()
	last := c.ws.last
	tape := append([]tapeEntry(nil), c.ws.tape[:c.consumed]...)
	c.ws.mu.Unlock()
	if last != nil {
		select {
		case <-last.done:
		case <-ctx.Done():
			return &mismatch{detail: "stopped while waiting for the last commit"}
		}
	}
	recs, err := s.store.LogSince(ctx, c.ws.id, 0)
	if err != nil {
		return &mismatch{detail: "reading the durable log failed: " + err.Error()}
	}
	i := 0
	for _, te := range tape {
		if !te.changed {
			continue
		}
		want := string(te.op) + " at " + strconv.FormatInt(te.nowMs, 10) + " " + string(te.body)
		if i >= len(recs) {
			return &mismatch{"command " + strconv.Itoa(i+1) + " was answered but is not in the durable log", want, "missing"}
		}
		r := recs[i]
		got := r.Op + " at " + strconv.FormatInt(r.NowMs, 10) + " " + string(r.Body)
		if got != want || r.Status != te.status {
			return &mismatch{"the durable log's command " + strconv.Itoa(i+1) + " differs from what was applied", want, got}
		}
		i++
	}
	c.logged = i
	return nil
}

func show(status int, body []byte) string { return strconv.Itoa(status) + " " + string(body) }

// stepBody is a step without atMs and op: the REST body of its command.
func stepBody(step []byte) ([]byte, error) {
	b := []byte{'{'}
	n := 0
	err := kernel.ScanObject(step, func(name string, raw []byte) error {
		if name == "atMs" || name == "op" {
			return nil
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = kernel.AppendQuote(b, name)
		b = append(b, ':')
		b = kernel.AppendCompact(b, raw)
		return nil
	})
	return append(b, '}'), err
}

// drillRoutes maps a drill step's op to its REST route and whether it
// needs the operator key.
var drillRoutes = map[kernel.Op]struct {
	method, path string
	operator     bool
}{
	kernel.OpAcquire: {http.MethodPost, RouteLease, false},
	kernel.OpRelease: {http.MethodPost, RouteRelease, false},
	kernel.OpWait:    {http.MethodGet, RouteWait, false},
	kernel.OpSuspend: {http.MethodPost, RouteSuspend, true},
	kernel.OpResume:  {http.MethodPost, RouteResume, true},
	kernel.OpForget:  {http.MethodPost, RouteForget, true},
}

// do sends one command over HTTP.
func (e *drillEnv) do(ctx context.Context, op kernel.Op, body []byte, wkey, okey string) (int, []byte, error) {
	rt, ok := drillRoutes[op]
	if !ok {
		return 0, nil, errors.New("no REST route for op " + string(op))
	}
	u := e.base + rt.path
	var rd io.Reader
	if rt.method == http.MethodGet {
		q := url.Values{}
		err := kernel.ScanObject(body, func(name string, raw []byte) error {
			if s, err := kernel.Unquote(raw); err == nil {
				q.Set(name, s)
			} else {
				q.Set(name, string(raw))
			}
			return nil
		})
		if err != nil {
			return 0, nil, err
		}
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
	} else {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, rt.method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	key := wkey
	if rt.operator {
		key = okey
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}

// sleepUntil waits until the server's clock reaches ms, on the server's
// timers.
func (s *Server) sleepUntil(ctx context.Context, ms int64) error {
	for {
		d := ms - s.nowMs()
		if d <= 0 {
			return ctx.Err()
		}
		ch := make(chan struct{})
		stop := s.cfg.AfterFunc(time.Duration(d)*time.Millisecond, func() { close(ch) })
		select {
		case <-ch:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
}

// dropDrillWorkspace stops a drill workspace (no further commands or
// alarms), waits for its last commit and deletes it from memory, the key
// cache and the store.
func (s *Server) dropDrillWorkspace(id int64, ws *workspace) error {
	if ws != nil {
		ws.mu.Lock()
		ws.disarm()
		ws.closed = true
		last := ws.last
		ws.mu.Unlock()
		if last != nil {
			<-last.done
		}
		ws.mu.Lock()
		if ws.eng != nil {
			ws.eng.Close()
			ws.eng = nil
		}
		ws.tape = nil
		ws.mu.Unlock()
	}
	s.wsMu.Lock()
	delete(s.workspaces, id)
	s.metrics.workspaces.Set(float64(len(s.workspaces)))
	s.wsMu.Unlock()
	s.keys.mu.Lock()
	for k, e := range s.keys.entries {
		if e.key.WorkspaceID == id {
			delete(s.keys.entries, k)
		}
	}
	s.keys.mu.Unlock()
	return s.store.DeleteDrillWorkspace(id)
}

// drillsJSON encodes results for the store and the routes.
func drillsJSON(rs []DrillResult) []byte {
	if rs == nil {
		rs = []DrillResult{}
	}
	b, _ := json.Marshal(rs)
	return b
}
