// Package drill runs the drills, six fixed scenarios (scenarios/*.json),
// against a live plane, and is the same code on every host: the server
// (server/drill) and the Workers front (cmd/worker). Each drill runs in a
// fresh workspace of its own with the scenario's rules, through the host's
// real request path (the REST route of each command, with the workspace's
// or the operator's key), durability (every command it made that changed
// state must be in the host's durable log, in order, with the time it ran
// at) and alarms (a tick step waits for the plane's own alarm and checks
// what it did). The host drops the workspace after the drill.
//
// The expected answers are the native kernel's replay of the same
// commands at the times the live run used (read from what the plane
// applied, its tape), alarm ticks (and a host's own cancel {} on a
// restart) included where they happened: this package
// is the one place outside the kernel's hosts' engines that makes a
// kernel.Machine, on purpose. A drill passes when every live answer
// (status and body) and every event matches; otherwise its detail shows
// the first that differs, expected beside live.
//
// It lives under kernel/ (not in a host) because both hosts run it and no
// host may import another's package. It does no I/O of its own: every
// clock read, sleep, request and storage read is its Host's.
package drill

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"net/url"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/scenario"
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
			return nil, errors.New("drill " + n + ": " + err.Error())
		}
		sc, err := scenario.Parse(b)
		if err != nil {
			return nil, errors.New("drill " + n + ": " + err.Error())
		}
		out = append(out, Drill{Name: n, JSON: b, Scenario: sc})
	}
	return out, nil
}

// Select is the drills named in names, in run order (all of them when
// names is empty); a name that is no drill is an error naming it.
func Select(names []string) ([]Drill, error) {
	drills, err := All()
	if err != nil || len(names) == 0 {
		return drills, err
	}
	var some []Drill
	for _, n := range names {
		found := false
		for _, d := range drills {
			found = found || d.Name == n
		}
		if !found {
			return nil, errors.New("no drill " + strconv.Quote(n) + "; the drills are " + joinNames())
		}
	}
	for _, d := range drills {
		for _, n := range names {
			if d.Name == n {
				some = append(some, d)
				break
			}
		}
	}
	return some, nil
}

func joinNames() string {
	s := ""
	for i, n := range Names {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
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

// ResultsJSON encodes results as the run routes show them: a JSON array
// of {name, passed, detail[, step, expected, live]}.
func ResultsJSON(rs []Result) []byte {
	b := []byte{'['}
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = kernel.AppendQuote(b, r.Name)
		b = append(b, `,"passed":`...)
		b = strconv.AppendBool(b, r.Passed)
		b = append(b, `,"detail":`...)
		b = kernel.AppendQuote(b, r.Detail)
		if r.Step != nil {
			b = append(b, `,"step":`...)
			b = strconv.AppendInt(b, int64(*r.Step), 10)
		}
		if r.Expected != "" {
			b = append(b, `,"expected":`...)
			b = kernel.AppendQuote(b, r.Expected)
		}
		if r.Live != "" {
			b = append(b, `,"live":`...)
			b = kernel.AppendQuote(b, r.Live)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// Passed is whether a run with these results passed: at least one drill,
// and every one passed.
func Passed(rs []Result) bool {
	for _, r := range rs {
		if !r.Passed {
			return false
		}
	}
	return len(rs) > 0
}

// TapeEntry is one command a drill workspace applied, as the engine
// answered it.
type TapeEntry struct {
	Op      kernel.Op
	NowMs   int64
	Body    []byte // as the host logs it: compared with Record.Body
	Status  int
	Answer  []byte
	Events  []byte
	Changed bool // it changed state, so it must be in the durable log
}

// Record is one command of a drill workspace's durable log.
type Record struct {
	Op     string
	NowMs  int64
	Body   []byte
	Status int // 0 when the host's log keeps no status
}

// Request is one command as a REST request: the contract's route for its
// op, the query (GET routes) or the body, and whether it needs the
// operator key.
type Request struct {
	Method, Path, RawQuery string
	Body                   []byte // nil for a GET
	Operator               bool
}

// RequestOf is the REST request of the command op with REST body body.
func RequestOf(op kernel.Op, body []byte) (Request, error) {
	rt, ok := api.RouteOf(op)
	if !ok {
		return Request{}, errors.New("no REST route for op " + string(op))
	}
	r := Request{Method: rt.Method, Path: rt.Path, Operator: rt.Access == api.OperatorKey}
	if rt.Method != "GET" {
		r.Body = body
		return r, nil
	}
	q := url.Values{}
	err := kernel.ScanObject(body, func(name string, raw []byte) error {
		if s, err := kernel.Unquote(raw); err == nil {
			q.Set(name, s)
		} else {
			q.Set(name, string(raw))
		}
		return nil
	})
	r.RawQuery = q.Encode()
	return r, err
}

// Host is what a run needs of the plane.
type Host interface {
	// NowMs is the plane's clock; SleepUntil waits until it reaches ms
	// (ctx's error when ctx ends first).
	NowMs() int64
	SleepUntil(ctx context.Context, ms int64) error
	// Send sends one request with the bearer key through the plane's real
	// request path and returns its answer.
	Send(ctx context.Context, r Request, key string) (status int, body []byte, err error)
	// NewWorkspace makes a drill workspace named by suffix (the host makes
	// it a name no real workspace can have) with rules, and starts
	// recording what it applies.
	NewWorkspace(ctx context.Context, suffix string, rules []byte) (Workspace, error)
}

// Workspace is one drill's workspace on the plane.
type Workspace interface {
	// Keys are its workspace key and its operator key.
	Keys() (workspace, operator string)
	// Tape is what it applied from entry from on.
	Tape(ctx context.Context, from int) ([]TapeEntry, error)
	// Durable waits for its last commit and reads its durable log.
	Durable(ctx context.Context) ([]Record, error)
	// Drop stops it (no further commands or alarms) and deletes it.
	Drop(ctx context.Context) error
}

// GraceMs is how long past its due time an alarm may take to fire before
// the drill says it did not.
const GraceMs = 5000

// Run runs the drills of run runID in order (only those named in names,
// when it is not empty); progress is called after each drill with the
// results so far. err is for what stops the whole run (ctx ending, the
// plane stopping); a drill that fails is a result.
func Run(ctx context.Context, h Host, runID int64, names []string, progress func([]Result)) ([]Result, error) {
	drills, err := Select(names)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, d := range drills {
		r, err := run(ctx, h, runID, d)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		progress(out)
	}
	return out, nil
}

// run runs one drill. err is for what stops the whole run (the plane
// stopping); a drill that fails is a result.
func run(ctx context.Context, h Host, runID int64, d Drill) (res Result, err error) {
	res.Name = d.Name
	ws, err := h.NewWorkspace(ctx, strconv.FormatInt(runID, 10)+"-"+d.Name, d.Scenario.Rules)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := ws.Drop(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = derr
		}
	}()
	wkey, okey := ws.Keys()
	rules, err := kernel.ParseRules(d.Scenario.Rules)
	if err != nil {
		return res, err
	}
	c := &check{ref: kernel.New(rules), ws: ws}
	fail := func(step int, m *mismatch) (Result, error) {
		res.Passed, res.Detail, res.Expected, res.Live = false, m.detail, m.expected, m.live
		res.Step = &step
		return res, ctx.Err()
	}
	t0 := h.NowMs()
	var first, lag int64
	for i, step := range d.Scenario.Steps {
		cmd, err := kernel.DecodeStep(step)
		if err != nil {
			return fail(i, &mismatch{detail: "step " + strconv.Itoa(i) + " does not decode: " + err.Error()})
		}
		if i == 0 {
			first = cmd.NowMs
		}
		rel := cmd.NowMs - first
		target := t0 + rel + lag
		if err := h.SleepUntil(ctx, target); err != nil {
			return res, err
		}
		where := "step " + strconv.Itoa(i) + " (" + string(cmd.Op) + " at +" + strconv.FormatInt(rel, 10) + " ms): "
		if cmd.Op == kernel.OpTick {
			// The plane's own alarms must have done, by target, all that
			// the kernel says was due by then.
			for {
				if m := c.feed(ctx, nil); m != nil {
					return fail(i, m.at(where))
				}
				due, ok := c.ref.NextAlarm()
				if !ok || due > target {
					break
				}
				if h.NowMs() > target+GraceMs {
					return fail(i, &mismatch{where + "the plane's alarms due by then (the first at +" + strconv.FormatInt(due-t0, 10) +
						" ms) did not fire within " + strconv.Itoa(GraceMs) + " ms: expected what a tick by then gives, live: no alarm tick",
						c.expectTick(target), "no alarm fired"})
				}
				if err := h.SleepUntil(ctx, h.NowMs()+20); err != nil {
					return res, err
				}
			}
			continue
		}
		body, err := stepBody(step)
		if err != nil {
			return fail(i, &mismatch{detail: where + err.Error()})
		}
		req, err := RequestOf(cmd.Op, body)
		if err != nil {
			return fail(i, &mismatch{detail: where + err.Error()})
		}
		key := wkey
		if req.Operator {
			key = okey
		}
		status, answer, herr := h.Send(ctx, req, key)
		if herr != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return fail(i, &mismatch{detail: where + "the request failed: " + herr.Error()})
		}
		if m := c.feed(ctx, &stepAnswer{op: cmd.Op, body: body, status: status, answer: answer}); m != nil {
			return fail(i, m.at(where))
		}
		if l := c.lastStepMs - (t0 + rel); l > lag {
			lag = l
		}
	}
	if m := c.durable(ctx); m != nil {
		return fail(len(d.Scenario.Steps)-1, m)
	}
	res.Passed = true
	res.Detail = strconv.Itoa(c.answers) + " answers and " + strconv.Itoa(c.alarms) + " alarm ticks"
	if c.cancels > 0 {
		res.Detail += " and " + strconv.Itoa(c.cancels) + " of the host's own cancels"
	}
	res.Detail += " matched the kernel's replay; " + strconv.Itoa(c.logged) + " commands found in the durable log"
	return res, nil
}

// check replays what a drill workspace applied through the reference
// kernel and compares.
type check struct {
	ref        *kernel.Machine
	ws         Workspace
	seen       []TapeEntry // the tape read so far
	answers    int
	alarms     int
	cancels    int
	logged     int
	lastStepMs int64
}

type stepAnswer struct {
	op     kernel.Op
	body   []byte
	status int
	answer []byte
}

type mismatch struct{ detail, expected, live string }

func (m *mismatch) at(where string) *mismatch {
	m.detail = where + m.detail
	return m
}

// feed takes the workspace's new tape entries: alarm ticks are replayed
// and compared; when step is set, exactly one entry must be that step's
// command, compared with its HTTP answer.
func (c *check) feed(ctx context.Context, step *stepAnswer) *mismatch {
	entries, err := c.ws.Tape(ctx, len(c.seen))
	if err != nil {
		return &mismatch{detail: "reading what the plane applied failed: " + err.Error()}
	}
	c.seen = append(c.seen, entries...)
	found := false
	for _, te := range entries {
		if te.Op == kernel.OpTick || te.Op == kernel.OpCancel {
			// The host's own commands: an alarm's tick, and the cancel {}
			// a host steps when it (re)starts a workspace, as a Durable
			// Object does whenever it is made again. No drill sends them.
			what := "the alarm tick"
			var body []byte
			if te.Op == kernel.OpCancel {
				what, body = "the host's own cancel", te.Body
				c.cancels++
			} else {
				c.alarms++
			}
			exp := c.ref.ApplyJSON(te.Op, te.NowMs, body)
			what += " at " + strconv.FormatInt(te.NowMs, 10)
			if exp.Status != te.Status || !bytes.Equal(exp.Answer, te.Answer) {
				return &mismatch{what + " answered differently", show(exp.Status, exp.Answer), show(te.Status, te.Answer)}
			}
			if events := kernel.AppendEvents(nil, exp.Events); !bytes.Equal(events, te.Events) {
				return &mismatch{what + " emitted different events", string(events), string(te.Events)}
			}
			continue
		}
		if step == nil || found || te.Op != step.op {
			return &mismatch{"the plane applied a command the drill did not send: " + string(te.Op), "", string(te.Body)}
		}
		found = true
		exp := c.ref.ApplyJSON(step.op, te.NowMs, step.body)
		c.answers++
		c.lastStepMs = te.NowMs
		if exp.Status != step.status || !bytes.Equal(exp.Answer, step.answer) {
			return &mismatch{"the answer differs", show(exp.Status, exp.Answer), show(step.status, step.answer)}
		}
		if events := kernel.AppendEvents(nil, exp.Events); !bytes.Equal(events, te.Events) {
			return &mismatch{"the events differ", string(events), string(te.Events)}
		}
	}
	if step != nil && !found {
		return &mismatch{"the plane answered without applying the command", "a command applied at the plane", show(step.status, step.answer)}
	}
	return nil
}

// expectTick is what a tick at due would answer, without changing ref.
func (c *check) expectTick(due int64) string {
	m, err := kernel.Restore(c.ref.Snapshot())
	if err != nil {
		return "a tick at " + strconv.FormatInt(due, 10)
	}
	r := m.ApplyJSON(kernel.OpTick, due, nil)
	return show(r.Status, r.Answer) + " events " + string(kernel.AppendEvents(nil, r.Events))
}

// durable checks that every command the drill made that changed state is
// in the workspace's durable log, in order, with its time and body (and
// its status, where the log keeps one).
func (c *check) durable(ctx context.Context) *mismatch {
	recs, err := c.ws.Durable(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return &mismatch{detail: "stopped while waiting for the last commit"}
		}
		return &mismatch{detail: "reading the durable log failed: " + err.Error()}
	}
	i := 0
	for _, te := range c.seen {
		if !te.Changed {
			continue
		}
		want := string(te.Op) + " at " + strconv.FormatInt(te.NowMs, 10) + " " + string(te.Body)
		if i >= len(recs) {
			return &mismatch{"command " + strconv.Itoa(i+1) + " was answered but is not in the durable log", want, "missing"}
		}
		r := recs[i]
		got := r.Op + " at " + strconv.FormatInt(r.NowMs, 10) + " " + string(r.Body)
		if got != want || (r.Status != 0 && r.Status != te.Status) {
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

// RunEvent is the ledger entry of a finished run on every host:
// {"type":"drill.run","atMs":finished,"runId","startedAtMs","passed",
// "drills":[{"name","passed","detail"?}]}, a failed drill's detail only.
// Hosts record it as it is, so both tiers give these bytes.
func RunEvent(runID string, startedMs, finishedMs int64, passed bool, results []Result) []byte {
	b := append([]byte(nil), `{"type":"drill.run","atMs":`...)
	b = strconv.AppendInt(b, finishedMs, 10)
	b = kernel.AppendQuote(append(b, `,"runId":`...), runID)
	b = strconv.AppendInt(append(b, `,"startedAtMs":`...), startedMs, 10)
	b = strconv.AppendBool(append(b, `,"passed":`...), passed)
	b = append(b, `,"drills":[`...)
	for i, d := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = kernel.AppendQuote(append(b, `{"name":`...), d.Name)
		b = strconv.AppendBool(append(b, `,"passed":`...), d.Passed)
		if !d.Passed {
			b = kernel.AppendQuote(append(b, `,"detail":`...), d.Detail)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
