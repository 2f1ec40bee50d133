// Package drill runs the drills: six fixed scenarios, scenarios/*.json,
// against the live plane. Each runs in a fresh workspace of its own (named
// store.DrillPrefix+…, which no real workspace can be named) with the
// scenario's rules, through the real HTTP path (a listener on 127.0.0.1
// serving the server's own handler), durability (every command it made
// must be in the durable log, in order, with the time it ran at) and
// alarms (a tick step waits for the plane's own alarm and checks what it
// did). The workspace is dropped after the drill.
//
// The expected answers are the native kernel's replay of the same
// commands at the times the live run used (read from what the plane
// applied), alarm ticks included where they fired: this package is the one
// place outside the kernel that makes a kernel.Machine, on purpose. A
// drill passes when every live answer (status and body) and every event
// matches; otherwise its detail shows the first that differs, expected
// beside live.
//
// The server calls Run and reaches nothing of it but Host and Workspace;
// it queues the runs (one at a time, every run kept in the store).
package drill

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
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/scenario"
	"github.com/leaseplane/leaseplane/server/store"
)

//go:embed scenarios/*.json
var files embed.FS

// Names are the drills in the order a run runs them.
var Names = []string{"two-agents-one-slot", "crashed-holder", "deadlock", "herd-of-fifty", "stale-lease-id", "operator-suspends"}

// Drill is one fixed scenario.
type Drill struct {
	Name     string
	JSON     []byte
	Scenario *scenario.Scenario
}

// All returns the drills, parsed, in run order.
func All() ([]Drill, error) {
	out := make([]Drill, 0, len(Names))
	for _, n := range Names {
		b, err := files.ReadFile("scenarios/" + n + ".json")
		if err != nil {
			return nil, fmt.Errorf("drill %s: %w", n, err)
		}
		sc, err := scenario.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("drill %s: %w", n, err)
		}
		out = append(out, Drill{Name: n, JSON: b, Scenario: sc})
	}
	return out, nil
}

// Result is one drill's outcome in a run.
type Result struct {
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

// ResultsJSON encodes results for the store and the routes.
func ResultsJSON(rs []Result) []byte {
	if rs == nil {
		rs = []Result{}
	}
	b, _ := json.Marshal(rs)
	return b
}

// TapeEntry is one command a drill workspace applied, as the engine
// answered it.
type TapeEntry struct {
	Op      kernel.Op
	NowMs   int64
	Body    []byte
	Status  int
	Answer  []byte
	Events  []byte
	Changed bool // it changed state, so it must be in the durable log
}

// Host is what a run needs of the server.
type Host interface {
	// NowMs is the plane's clock; SleepUntil waits on the plane's timers
	// until it reaches ms (ctx's error when ctx ends first).
	NowMs() int64
	SleepUntil(ctx context.Context, ms int64) error
	// Handler is the server's HTTP handler, the drills' way in.
	Handler() http.Handler
	// NewWorkspace makes a drill workspace named name with rules, loads it
	// and starts recording what it applies.
	NewWorkspace(name string, rules []byte) (Workspace, error)
}

// Workspace is one drill's workspace on the plane.
type Workspace interface {
	// Keys are its workspace key and its operator key.
	Keys() (workspace, operator string)
	// Tape is what it applied from entry from on.
	Tape(from int) []TapeEntry
	// Durable waits for its last commit and reads its durable log.
	Durable(ctx context.Context) ([]store.Record, error)
	// Drop stops it (no further commands or alarms) and deletes it.
	Drop() error
}

// Grace is how long past its due time an alarm may take to fire before
// the drill says it did not.
const Grace = 5 * time.Second

// env is what one run's drills share.
type env struct {
	h      Host
	runID  int64
	base   string // http://127.0.0.1:port of the run's listener
	client *http.Client
}

// Run runs the drills of run runID in order (only those named in names,
// when it is not empty); progress is called after each drill with the
// results so far. err is for what stops the whole run (ctx ending, the
// plane stopping); a drill that fails is a result.
func Run(ctx context.Context, h Host, runID int64, names []string, progress func([]Result)) ([]Result, error) {
	drills, err := All()
	if err != nil {
		return nil, err
	}
	if len(names) > 0 {
		var some []Drill
		for _, d := range drills {
			for _, n := range names {
				if d.Name == n {
					some = append(some, d)
				}
			}
		}
		drills = some
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("drills: listen on 127.0.0.1: %w", err)
	}
	hs := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	e := &env{h: h, runID: runID, base: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	var out []Result
	for _, d := range drills {
		r, err := e.run(ctx, d)
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
func (e *env) run(ctx context.Context, d Drill) (res Result, err error) {
	h := e.h
	res.Name = d.Name
	ws, err := h.NewWorkspace(strconv.FormatInt(e.runID, 10)+"-"+d.Name, d.Scenario.Rules)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := ws.Drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	wkey, okey := ws.Keys()
	rules, err := kernel.ParseRules(d.Scenario.Rules)
	if err != nil {
		return res, err
	}
	c := &check{ref: kernel.New(rules), ws: ws}
	fail := func(step int, detail, expected, live string) (Result, error) {
		res.Passed, res.Detail, res.Expected, res.Live = false, detail, expected, live
		res.Step = &step
		return res, ctx.Err()
	}
	t0 := h.NowMs()
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
		if err := h.SleepUntil(ctx, target); err != nil {
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
				if h.NowMs() > target+Grace.Milliseconds() {
					exp := c.expectTick(target)
					return fail(i, where+": the plane's alarms due by then (the first at +"+strconv.FormatInt(due-t0, 10)+
						" ms) did not fire within "+Grace.String()+": expected what a tick by then gives, live: no alarm tick", exp, "no alarm fired")
				}
				if err := h.SleepUntil(ctx, h.NowMs()+20); err != nil {
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
	if m := c.durable(ctx); m != nil {
		return fail(len(d.Scenario.Steps)-1, m.detail, m.expected, m.live)
	}
	res.Passed = true
	res.Detail = strconv.Itoa(c.answers) + " answers and " + strconv.Itoa(c.alarms) + " alarm ticks matched the kernel's replay; " +
		strconv.Itoa(c.logged) + " commands found in the durable log"
	return res, nil
}

// check replays what a drill workspace applied through the reference
// kernel and compares.
type check struct {
	ref        *kernel.Machine
	ws         Workspace
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
func (c *check) feed(ctx context.Context, step *stepAnswer) *mismatch {
	entries := c.ws.Tape(c.consumed)
	c.consumed += len(entries)
	seen := false
	for _, te := range entries {
		if te.Op == kernel.OpTick && (step == nil || step.op != kernel.OpTick) {
			exp := c.ref.ApplyJSON(kernel.OpTick, te.NowMs, nil)
			c.alarms++
			if exp.Status != te.Status || !bytes.Equal(exp.Answer, te.Answer) {
				return &mismatch{"the alarm tick at " + strconv.FormatInt(te.NowMs, 10) + " answered differently",
					show(exp.Status, exp.Answer), show(te.Status, te.Answer)}
			}
			if events := kernel.AppendEvents(nil, exp.Events); !bytes.Equal(events, te.Events) {
				return &mismatch{"the alarm tick at " + strconv.FormatInt(te.NowMs, 10) + " emitted different events",
					string(events), string(te.Events)}
			}
			continue
		}
		if step == nil || seen || te.Op != step.op {
			return &mismatch{"the plane applied a command the drill did not send: " + string(te.Op), "", string(te.Body)}
		}
		seen = true
		exp := c.ref.ApplyJSON(step.op, te.NowMs, step.body)
		c.answers++
		c.lastStepMs = te.NowMs
		if exp.Status != step.live.status || !bytes.Equal(exp.Answer, step.live.body) {
			return &mismatch{"the answer differs", show(exp.Status, exp.Answer), show(step.live.status, step.live.body)}
		}
		if events := kernel.AppendEvents(nil, exp.Events); !bytes.Equal(events, te.Events) {
			return &mismatch{"the events differ", string(events), string(te.Events)}
		}
	}
	if step != nil && !seen {
		return &mismatch{"the plane answered without applying the command", "a command applied at the plane",
			show(step.live.status, step.live.body)}
	}
	return nil
}

// expectTick is what a tick at due would answer, without changing ref.
func (c *check) expectTick(due int64) string {
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
func (c *check) durable(ctx context.Context) *mismatch {
	tape := c.ws.Tape(0)[:c.consumed]
	recs, err := c.ws.Durable(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return &mismatch{detail: "stopped while waiting for the last commit"}
		}
		return &mismatch{detail: "reading the durable log failed: " + err.Error()}
	}
	i := 0
	for _, te := range tape {
		if !te.Changed {
			continue
		}
		want := string(te.Op) + " at " + strconv.FormatInt(te.NowMs, 10) + " " + string(te.Body)
		if i >= len(recs) {
			return &mismatch{"command " + strconv.Itoa(i+1) + " was answered but is not in the durable log", want, "missing"}
		}
		r := recs[i]
		got := r.Op + " at " + strconv.FormatInt(r.NowMs, 10) + " " + string(r.Body)
		if got != want || r.Status != te.Status {
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

// do sends one command over HTTP, to the contract's route for op (with
// the operator key where the route needs one).
func (e *env) do(ctx context.Context, op kernel.Op, body []byte, wkey, okey string) (int, []byte, error) {
	rt, ok := api.RouteOf(op)
	if !ok {
		return 0, nil, errors.New("no REST route for op " + string(op))
	}
	u := e.base + rt.Path
	var rd io.Reader
	if rt.Method == http.MethodGet {
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
	req, err := http.NewRequestWithContext(ctx, rt.Method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	key := wkey
	if rt.Access == api.OperatorKey {
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
