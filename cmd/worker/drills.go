//go:build js && wasm

package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall/js"
	"time"

	"github.com/syumai/workers/cloudflare"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/drill"
)

// The drills on the Workers tier: kernel/drill, the server's own run and
// replay check, hosted by the front. POST /api/v1/drills/run (an operator
// key) queues a run in the workspace's object, and PUT
// /api/v1/drills/cadence sets its cadence; the object's alarm then calls
// the front's runner route (pathDrillRunner, through the binding SELF to
// the worker itself) with a runner token and awaits it, and the front
// runs the workspace's queued runs one at a time: each drill in a fresh
// drill workspace of its own (an object named drillPrefix+…, a name no
// real workspace can have), its commands sent through the front's own
// routes with that workspace's keys, so through the key check, the
// command's decoding and the object, as every request.

// drillPrefix starts every drill workspace's name: '~' is in no real
// workspace's name (validWorkspaceName).
const drillPrefix = "~drill-"

// drillRoutes are the drill routes of the contract the front answers.
var drillRoutes = []api.Route{api.DrillsRun, api.DrillsRuns, api.DrillsCancel, api.DrillsCadence}

// routeIn is the route of table at path.
func routeIn(table []api.Route, path string) (api.Route, bool) {
	for _, rt := range table {
		if rt.Path == path {
			return rt, true
		}
	}
	return api.Route{}, false
}

// keyed checks a request to a drill or detection route: its key, the
// key's role for rt, its query and its body.
func keyed(r *http.Request, rt api.Route) (keyRecord, api.Query, []byte, reply, bool) {
	k, rep, ok := requestKey(r)
	if !ok {
		return k, api.Query{}, nil, rep, false
	}
	if no := api.Authorize(api.Key{Role: api.Role(k.role), AgentDID: k.agentDID}, rt); no != nil {
		return k, api.Query{}, nil, fromAPI(*no), false
	}
	q, err := api.ParseQuery(rt, r.URL.RawQuery)
	if err != nil {
		return k, q, nil, fromAPI(api.BadQuery(err)), false
	}
	body, rep, ok := readBody(r)
	return k, q, body, rep, ok
}

// drills answers the drill routes: the key, its role and the request are
// checked here, the runs are kept by the workspace's object.
func drills(r *http.Request, rt api.Route) reply {
	k, q, body, rep, ok := keyed(r, rt)
	if !ok {
		return rep
	}
	switch rt.Path {
	case api.PathDrillsRun:
		if err := emptyBody(body); err != nil {
			return refusal(400, kernel.ReasonInvalid, "the body must be a JSON object: "+err.Error()+" (POST "+api.PathDrillsRun+" takes {})")
		}
		return toObject(k.workspace, "/keyed/drills/add", nil, k.id)
	case api.PathDrillsRuns:
		limit, msg := drillsLimit(q)
		if msg != "" {
			return refusal(400, kernel.ReasonInvalid, msg)
		}
		return toObject(k.workspace, "/keyed/drills/runs?limit="+strconv.Itoa(limit), nil, k.id)
	case api.PathDrillsCancel:
		id, msg := cancelID(body)
		if msg != "" {
			return refusal(400, kernel.ReasonInvalid, msg)
		}
		return toObject(k.workspace, "/keyed/drills/cancel?id="+strconv.FormatInt(id, 10), nil, k.id)
	}
	every, msg := cadenceEvery(body)
	if msg != "" {
		return refusal(400, kernel.ReasonInvalid, msg)
	}
	return toObject(k.workspace, "/keyed/drills/cadence?everyMs="+strconv.FormatInt(every, 10), nil, k.id)
}

// pathDrillRunner is the route the workspace's object calls from its
// alarm (through the binding SELF) to have its queued runs run:
// ?workspace=W&token=T, T the runner token the object keeps, with the
// token's proof (runnerProof) in headerRunnerProof. It answers once the
// runs are done. Without the proof it touches no object (404); with a
// token the object does not hold it runs nothing (409).
const (
	pathDrillRunner   = "/drills/runner"
	headerRunnerProof = "X-Leaseplane-Runner"
	secretLedger      = "LEASEPLANE_LEDGER_SECRET"
)

// drillRunner answers pathDrillRunner.
func drillRunner(r *http.Request) reply {
	if r.Method != "POST" {
		return refusal(405, "method_not_allowed", pathDrillRunner+" takes POST")
	}
	q := r.URL.Query()
	ws, token := q.Get("workspace"), q.Get("token")
	secret := cloudflare.Getenv(secretLedger)
	if validWorkspaceName(ws) != nil || token == "" || secret == "" || !sameSecret(r.Header.Get(headerRunnerProof), runnerProof(secret, ws, token)) {
		return refusal(404, "not_found", "no drill runner: "+pathDrillRunner+" is called by a workspace's object, from its alarm")
	}
	n, rep := runDrills(ws, token)
	if rep.status != 200 {
		return rep
	}
	return reply{status: 200, body: append(strconv.AppendInt([]byte(`{"ok":true,"runs":`), int64(n), 10), '}')}
}

// testDrills is the drills a run runs in a test build's local workerd
// (the variable LEASEPLANE_TEST_DRILLS, names joined by commas, honoured
// only beside LEASEPLANE_TEST_CLOCK=1); nil, every drill, anywhere else.
func testDrills() []string {
	if cloudflare.Getenv("LEASEPLANE_TEST_CLOCK") != "1" || cloudflare.Getenv("LEASEPLANE_TEST_DRILLS") == "" {
		return nil
	}
	return strings.Split(cloudflare.Getenv("LEASEPLANE_TEST_DRILLS"), ",")
}

// runDrills runs workspace's queued drill runs, one at a time, while its
// object lets this runner (token) in: n runs; rep is the object's refusal
// when it did not let it in at all.
func runDrills(workspace, token string) (n int, rep reply) {
	names := testDrills()
	for {
		claim := toObject(workspace, "/drills/claim?token="+token, nil, "")
		id, found := runIDOf(claim)
		if !found {
			if n == 0 && claim.status != 200 {
				return 0, claim
			}
			return n, reply{status: 200}
		}
		n++
		ctx, cancel := context.WithCancel(context.Background())
		h := &drillHost{workspace: workspace, token: token, run: id, cancel: cancel}
		results, err := drill.Run(ctx, h, id, names, func(sofar []drill.Result) { h.save(sofar, false, false) })
		if ctx.Err() == nil {
			if err != nil {
				results = append(results, drill.Result{Name: "run", Detail: "the run could not go on: " + err.Error()})
			}
			h.save(results, true, err == nil && drill.Passed(results))
		}
		cancel()
	}
}

// runIDOf reads a claim's answer: the run to run, if any.
func runIDOf(rep reply) (int64, bool) {
	if rep.status != 200 {
		return 0, false
	}
	var id int64
	found := false
	kernel.ScanObject(rep.body, func(name string, raw []byte) error {
		if name == "id" {
			id, found = kernel.IntLiteral(raw)
		}
		return nil
	})
	return id, found
}

// drillHost is the front as kernel/drill's Host for one run of workspace.
type drillHost struct {
	workspace, token string
	run              int64
	cancel           context.CancelFunc
}

func (h *drillHost) runner(what, extra string, body []byte) reply {
	return toObject(h.workspace, "/drills/"+what+"?token="+h.token+"&id="+strconv.FormatInt(h.run, 10)+extra, body, "")
}

// save writes the run's results; an answer other than 200 (the run was
// cancelled, another runner took over) ends the run.
func (h *drillHost) save(results []drill.Result, finished, passed bool) {
	extra := ""
	if finished {
		extra = "&finished=1&passed=0"
		if passed {
			extra = "&finished=1&passed=1"
		}
	}
	rep := h.runner("save", extra, drill.ResultsJSON(results))
	if rep.status != 200 {
		h.cancel()
		return
	}
	if finished {
		// The run's drill.run entry in the workspace's ledger, at the
		// times the object recorded, as the server records it.
		started, _ := intMember(rep.body, "startedAtMs")
		at, _ := intMember(rep.body, "finishedAtMs")
		h.runner("record", "", drill.RunEvent("run_"+strconv.FormatInt(h.run, 10), started, at, passed, results))
	}
}

func (h *drillHost) NowMs() int64 { return time.Now().UnixMilli() }

// SleepUntil sleeps in steps of at most a second; after each whole second
// it asks the object whether the run was cancelled.
func (h *drillHost) SleepUntil(ctx context.Context, ms int64) error {
	for {
		d := ms - h.NowMs()
		if d <= 0 {
			return ctx.Err()
		}
		step := min(d, 1000)
		if err := sleep(ctx, step); err != nil {
			return err
		}
		if step == 1000 {
			rep := h.runner("state", "", nil)
			if rep.status != 200 || bytes.Contains(rep.body, []byte(`"cancelled":true`)) || bytes.Contains(rep.body, []byte(`"busy":true`)) {
				h.cancel()
			}
		}
	}
}

// sleep waits ms on a JavaScript timer of the runner's own: Go's timers in
// this one runtime share one JavaScript timeout, set in whichever
// request's context the runtime last went idle in, and workerd drops a
// request's timers when that request ends, so a sleeping runner would
// never wake. A timer set here is set while the runner runs, in the
// context of the runner's request, which the object's alarm awaits.
func sleep(ctx context.Context, ms int64) error {
	done := make(chan struct{})
	var cb js.Func
	cb = js.FuncOf(func(js.Value, []js.Value) any {
		cb.Release()
		close(done)
		return nil
	})
	js.Global().Get("setTimeout").Invoke(cb, ms)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send sends one request through the front's own routes, as a client's.
func (h *drillHost) Send(ctx context.Context, r drill.Request, key string) (int, []byte, error) {
	u := "https://drill" + r.Path
	if r.RawQuery != "" {
		u += "?" + r.RawQuery
	}
	var body *bytes.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rep, _ := answer(req)
	return rep.status, rep.body, nil
}

// NewWorkspace makes a drill workspace (its object wiped first, for a run
// that an ended runner left) with a workspace key and an operator key.
func (h *drillHost) NewWorkspace(ctx context.Context, suffix string, rules []byte) (drill.Workspace, error) {
	name := drillPrefix + h.workspace + "-" + suffix
	d := &drillWorkspace{name: name}
	if err := d.object("/drill/drop", nil); err != nil {
		return nil, err
	}
	if err := d.object("/create?drill=1&name="+url.QueryEscape(name), rules); err != nil {
		return nil, err
	}
	ks, err := openKeys()
	if err != nil {
		return nil, err
	}
	for _, role := range []string{roleWorkspace, roleOperator} {
		id, key, rep := makeKey(ks, name, role, "")
		if rep.status != 200 {
			d.Drop(ctx)
			return nil, errors.New("drill workspace key: " + string(rep.body))
		}
		d.ids = append(d.ids, id)
		d.keys = append(d.keys, key)
	}
	return d, nil
}

// drillWorkspace is one drill's workspace: its object and two keys.
type drillWorkspace struct {
	name      string
	ids, keys []string
}

func (d *drillWorkspace) object(path string, body []byte) error {
	_, err := d.answer(path, body)
	return err
}

func (d *drillWorkspace) answer(path string, body []byte) ([]byte, error) {
	rep := toObject(d.name, path, body, "")
	if rep.status != 200 {
		return nil, errors.New("drill workspace " + path + ": " + strconv.Itoa(rep.status) + " " + string(rep.body))
	}
	return rep.body, nil
}

func (d *drillWorkspace) Keys() (string, string) { return d.keys[0], d.keys[1] }

func (d *drillWorkspace) Tape(_ context.Context, from int) ([]drill.TapeEntry, error) {
	b, err := d.answer("/drill/tape?from="+strconv.Itoa(from), nil)
	if err != nil {
		return nil, err
	}
	return parseTape(b)
}

// Durable reads the object's log: the object writes a command's row
// before its answer leaves, so there is no commit to wait for.
func (d *drillWorkspace) Durable(context.Context) ([]drill.Record, error) {
	b, err := d.answer("/drill/log", nil)
	if err != nil {
		return nil, err
	}
	return parseLog(b)
}

// Drop deletes the keys' records and wipes the object (its storage and
// alarm).
func (d *drillWorkspace) Drop(context.Context) error {
	if ks, err := openKeys(); err == nil {
		for _, id := range d.ids {
			ks.Delete(idName(id))
		}
	}
	return d.object("/drill/drop", nil)
}

// isDrillPath: the drill routes' prefix.
func isDrillPath(path string) bool { return strings.HasPrefix(path, "/api/v1/drills/") }
