package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/drill"
	"github.com/leaseplane/leaseplane/server/store"
)

// Drill routes.
const (
	RouteDrillsRun     = api.PathDrillsRun
	RouteDrillsRuns    = api.PathDrillsRuns
	RouteDrillsCadence = api.PathDrillsCadence
	RouteDrillsCancel  = api.PathDrillsCancel
)

// Cadence bounds: a cadence below a second would only queue runs behind
// the one going.
const (
	MinDrillCadenceMs = 1000
	MaxDrillCadenceMs = 7 * 24 * 3600 * 1000
)

// Bounds of the drill queue: runs queued or running per workspace and in
// the whole plane (429 limit_exceeded past either). Runs go one at a time,
// so a bound per workspace keeps any one operator from filling the queue,
// and the plane-wide one bounds its memory.
const (
	MaxDrillRunsPerWorkspace = 4
	MaxDrillRuns             = 64
)

// ReasonRunEnded is the 409 to cancelling a drill run that has already
// ended (finished or cancelled).
const ReasonRunEnded = "run_ended"

// LimitDrillRuns names the drill queue's bounds in a 429 limit_exceeded
// refusal.
const LimitDrillRuns = "drillRuns"

// errDrillCancelled ends the context of a run an operator cancelled.
var errDrillCancelled = errors.New("cancelled by an operator")

// drillRunner runs the drill runs one at a time. Each workspace has a
// queue of its own, in the order it asked; the next run is taken from the
// workspace that has waited longest since its last run started (round
// robin), so one workspace's backlog never holds another's behind it. It
// also asks for the runs cadences make due.
type drillRunner struct {
	s       *Server
	mu      sync.Mutex
	queues  map[int64][]*drillJob // by workspace id: the runs waiting
	queued  int                   // runs waiting, every workspace
	served  map[int64]int64       // by workspace id: turn when its last run started
	turn    int64
	running *drillJob
	cadence map[int64]*cadence // by workspace id
	wake    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
	// lastPassed is the verdict of the last finished run: 1, 0, or -1
	// before any.
	lastPassed float64
	// maxPerWorkspace and max are the bounds (the constants, but for tests).
	maxPerWorkspace, max int
	refused              int64 // asks refused past a bound
}

type drillJob struct {
	id, ws  int64
	trigger string
	// cancel ends a running run's context; ended closes when it has
	// stopped and its record is written.
	cancel context.CancelCauseFunc
	ended  chan struct{}
}

type cadence struct{ every, next int64 }

func newDrillRunner(s *Server) *drillRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &drillRunner{s: s, queues: map[int64][]*drillJob{}, served: map[int64]int64{}, cadence: map[int64]*cadence{},
		wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}), lastPassed: -1,
		maxPerWorkspace: MaxDrillRunsPerWorkspace, max: MaxDrillRuns}
}

// start loads the cadences and the runs a stop interrupted, and starts
// the runner.
func (r *drillRunner) start() error {
	st := r.s.store
	cads, err := st.DrillCadences()
	if err != nil {
		return err
	}
	now := r.s.nowMs()
	for ws, every := range cads {
		r.cadence[ws] = &cadence{every: every, next: now + every}
	}
	runs, err := st.UnfinishedDrillRuns()
	if err != nil {
		return err
	}
	for _, run := range runs {
		if err := st.RequeueDrillRun(run.ID); err != nil {
			return err
		}
		r.enqueue(&drillJob{id: run.ID, ws: run.Workspace, trigger: run.Trigger})
	}
	r.started = true
	go r.loop()
	return nil
}

// stop ends the run under way (it stays unfinished, to run again after a
// restart) and the runner.
func (r *drillRunner) stop() {
	r.cancel()
	if r.started {
		<-r.done
	}
}

func (r *drillRunner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// enqueue puts job at the end of its workspace's queue (mu held).
func (r *drillRunner) enqueue(job *drillJob) {
	job.ended = make(chan struct{})
	r.queues[job.ws] = append(r.queues[job.ws], job)
	r.queued++
}

// next takes the run to start: the first of the workspace whose last run
// started longest ago (never first; the lower id on a tie); nil when none
// waits (mu held).
func (r *drillRunner) next() *drillJob {
	best, found := int64(0), false
	for ws := range r.queues {
		if !found || r.served[ws] < r.served[best] || (r.served[ws] == r.served[best] && ws < best) {
			best, found = ws, true
		}
	}
	if !found {
		return nil
	}
	q := r.queues[best]
	job := q[0]
	if len(q) == 1 {
		delete(r.queues, best)
	} else {
		r.queues[best] = q[1:]
	}
	r.queued--
	r.turn++
	r.served[best] = r.turn
	return job
}

// count is how many runs of ws are queued or running (mu held).
func (r *drillRunner) count(ws int64) int {
	n := len(r.queues[ws])
	if r.running != nil && r.running.ws == ws {
		n++
	}
	return n
}

// ask queues a run for workspace ws and returns its id; past a bound it
// returns the 429 to answer instead.
func (r *drillRunner) ask(ws int64, trigger string) (int64, *reply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := r.queued
	if r.running != nil {
		total++
	}
	switch {
	case r.count(ws) >= r.maxPerWorkspace:
		r.refused++
		return 0, drillLimit(r.maxPerWorkspace, "this workspace has "+strconv.Itoa(r.count(ws))+
			" drill runs queued or running (at most "+strconv.Itoa(r.maxPerWorkspace)+"); ask again once one has finished, or cancel one (POST "+
			RouteDrillsCancel+")"), nil
	case total >= r.max:
		r.refused++
		return 0, drillLimit(r.max, "the plane has "+strconv.Itoa(total)+" drill runs queued or running, every workspace's (at most "+
			strconv.Itoa(r.max)+"); ask again once one has finished"), nil
	}
	id, err := r.askLocked(ws, trigger)
	return id, nil, err
}

// queueCounts are the runs waiting and the asks refused so far (0s
// without a runner).
func (r *drillRunner) queueCounts() (queued int, refused int64) {
	if r == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queued, r.refused
}

func drillLimit(max int, msg string) *reply {
	b := append([]byte(nil), `{"ok":false,"reason":"limit_exceeded","limit":"`+LimitDrillRuns+`","max":`...)
	b = strconv.AppendInt(b, int64(max), 10)
	b = append(b, `,"error":`...)
	b = kernel.AppendQuote(b, msg)
	return &reply{status: 429, retryAfter: 1, answer: append(b, '}')}
}

func (r *drillRunner) askLocked(ws int64, trigger string) (int64, error) {
	id, err := r.s.store.AddDrillRun(ws, trigger, r.s.nowMs())
	if err != nil {
		return 0, err
	}
	r.enqueue(&drillJob{id: id, ws: ws, trigger: trigger})
	r.poke()
	return id, nil
}

// cancelRun cancels run id of workspace ws: a queued one leaves its queue,
// a running one is stopped; either is recorded as cancelled, with no
// verdict, before it returns (or ctx ends). found is false when ws has no
// such run queued or running.
func (r *drillRunner) cancelRun(ctx context.Context, ws, id int64) (found bool, err error) {
	r.mu.Lock()
	if j := r.running; j != nil && j.ws == ws && j.id == id {
		j.cancel(errDrillCancelled)
		r.mu.Unlock()
		select {
		case <-j.ended:
			return true, nil
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
	q := r.queues[ws]
	i := slices.IndexFunc(q, func(j *drillJob) bool { return j.id == id })
	if i < 0 {
		r.mu.Unlock()
		return false, nil
	}
	j := q[i]
	if len(q) == 1 {
		delete(r.queues, ws)
	} else {
		r.queues[ws] = slices.Delete(q, i, i+1)
	}
	r.queued--
	if c := r.cadence[ws]; c != nil && j.trigger == "cadence" {
		c.next = r.s.nowMs() + c.every // not again at once
	}
	r.mu.Unlock()
	close(j.ended)
	return true, r.s.store.CancelDrillRun(id, drill.ResultsJSON(nil), r.s.nowMs())
}

// setCadence sets workspace ws's cadence (0 stops it).
func (r *drillRunner) setCadence(ws, every int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.s.store.SetDrillCadence(ws, every); err != nil {
		return err
	}
	if every == 0 {
		delete(r.cadence, ws)
	} else {
		r.cadence[ws] = &cadence{every: every, next: r.s.nowMs() + every}
	}
	r.poke()
	return nil
}

func (r *drillRunner) cadenceOf(ws int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.cadence[ws]; c != nil {
		return c.every
	}
	return 0
}

func (r *drillRunner) loop() {
	defer close(r.done)
	for {
		if r.ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		now := r.s.nowMs()
		wait := int64(-1)
		for ws, c := range r.cadence {
			if r.count(ws) > 0 {
				continue
			}
			if c.next <= now {
				if _, err := r.askLocked(ws, "cadence"); err != nil {
					r.s.log.Error("drills: queueing a cadence run failed", "err", err)
					c.next = now + c.every
				}
			} else if wait < 0 || c.next-now < wait {
				wait = c.next - now
			}
		}
		job := r.next()
		var ctx context.Context
		if job != nil {
			ctx, job.cancel = context.WithCancelCause(r.ctx)
			r.running = job
		}
		r.mu.Unlock()
		if job == nil {
			var fired chan struct{}
			stop := func() bool { return false }
			if wait >= 0 {
				fired = make(chan struct{})
				ch := fired
				stop = r.s.cfg.AfterFunc(time.Duration(wait)*time.Millisecond, func() { close(ch) })
			}
			select {
			case <-r.wake:
			case <-fired:
			case <-r.ctx.Done():
			}
			stop()
			continue
		}
		r.runJob(ctx, job)
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
		job.cancel(nil)
		close(job.ended)
	}
}

func (r *drillRunner) runJob(ctx context.Context, job *drillJob) {
	s := r.s
	started := s.nowMs()
	r.mu.Lock()
	if c := r.cadence[job.ws]; c != nil && job.trigger == "cadence" {
		c.next = started + c.every
	}
	r.mu.Unlock()
	if err := s.store.StartDrillRun(job.id, started); err != nil {
		s.log.Error("drills: starting a run failed", "run", job.id, "err", err)
	}
	results, err := s.runDrills(ctx, job.id, func(sofar []drill.Result) {
		if err := s.store.SaveDrillRun(job.id, drill.ResultsJSON(sofar), 0, false); err != nil {
			s.log.Warn("drills: saving progress failed", "run", job.id, "err", err)
		}
	})
	if r.ctx.Err() != nil {
		return // interrupted by a stop: it runs again after the restart
	}
	finished := max(s.nowMs(), started)
	if context.Cause(ctx) == errDrillCancelled {
		if err := s.store.CancelDrillRun(job.id, drill.ResultsJSON(results), finished); err != nil {
			s.log.Error("drills: saving a cancelled run failed", "run", job.id, "err", err)
		}
		s.log.Info("drills: run cancelled", "run", job.id, "ms", finished-started)
		return
	}
	passed := err == nil && len(results) > 0
	for _, d := range results {
		passed = passed && d.Passed
	}
	if err != nil {
		results = append(results, drill.Result{Name: "run", Detail: "the run could not go on: " + err.Error()})
	}
	// The ledger's entry first: a run that reads finished has its
	// drill.run entry recorded (a stop between the two runs it again, and
	// the ledger then holds an entry for each time it ran).
	s.recordDrillRun(job.ws, job.id, started, finished, passed, results)
	if err := s.store.SaveDrillRun(job.id, drill.ResultsJSON(results), finished, passed); err != nil {
		s.log.Error("drills: saving a run failed", "run", job.id, "err", err)
	}
	r.mu.Lock()
	if passed {
		r.lastPassed = 1
	} else {
		r.lastPassed = 0
	}
	r.mu.Unlock()
	s.log.Info("drills: run finished", "run", job.id, "passed", passed, "ms", finished-started)
}

func (r *drillRunner) lastVerdict() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastPassed
}

// runID is how a run's id is shown.
func runID(id int64) string { return "run_" + strconv.FormatInt(id, 10) }

// keyRoute is a drill or detection route: authed's checks, then h while
// the server is open.
func (s *Server) keyRoute(rt api.Route, h keyHandler) http.Handler {
	return s.authed(rt, func(r *http.Request, k store.Key, q api.Query, body []byte) reply {
		return s.open(func() reply { return h(r, k, q, body) })
	})
}

// decodeStrict reads body (empty means {}) into v, refusing unknown
// fields; the error names the problem.
func decodeStrict(body []byte, v any) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("the body must be a JSON object: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return errors.New("the body must be one JSON object")
	}
	return nil
}

// each is f of every element of xs, in order (an empty list, not null,
// when xs is empty).
func each[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func jsonReply(v any) reply {
	b, err := json.Marshal(v)
	if err != nil {
		return refusal(500, api.ReasonInternal, "encoding the answer failed")
	}
	return reply{status: 200, answer: b}
}

func invalid(msg string) reply {
	return reply{status: 400, answer: kernel.InvalidAnswer(msg)}
}

func (s *Server) drillRoutes() {
	s.mux.Handle(RouteDrillsRun, s.keyRoute(api.DrillsRun, func(r *http.Request, k store.Key, _ api.Query, body []byte) reply {
		var req struct{}
		if err := decodeStrict(body, &req); err != nil {
			return invalid(err.Error() + " (POST " + RouteDrillsRun + " takes {})")
		}
		id, refused, err := s.drills.ask(k.WorkspaceID, "asked")
		if err != nil {
			s.log.Error("drills: queueing a run failed", "err", err)
			return unavailable(err)
		}
		if refused != nil {
			return *refused
		}
		return jsonReply(struct {
			OK bool   `json:"ok"`
			ID string `json:"id"`
		}{true, runID(id)})
	}))
	s.mux.Handle(RouteDrillsCancel, s.keyRoute(api.DrillsCancel, func(r *http.Request, k store.Key, _ api.Query, body []byte) reply {
		var req struct {
			ID *string `json:"id"`
		}
		if err := decodeStrict(body, &req); err != nil {
			return invalid(err.Error() + ` (POST ` + RouteDrillsCancel + ` takes {"id": "run_N"})`)
		}
		if req.ID == nil {
			return invalid(`id is required: the run to cancel, "run_N" as POST ` + RouteDrillsRun + ` answered it`)
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(*req.ID, "run_"), 10, 64)
		if err != nil || !strings.HasPrefix(*req.ID, "run_") || id <= 0 {
			return invalid("id must be a run's id, run_N (N from 1), as POST " + RouteDrillsRun + " answered it; got " + strconv.Quote(*req.ID))
		}
		found, err := s.drills.cancelRun(r.Context(), k.WorkspaceID, id)
		if err != nil {
			return unavailable(err)
		}
		run, ok, err := s.store.DrillRunOf(r.Context(), k.WorkspaceID, id)
		switch {
		case err != nil:
			return unavailable(err)
		case !ok:
			return refusal(404, api.ReasonNotFound, "this workspace has no drill run "+runID(id))
		case run.CancelledMs != 0 && found:
			return jsonReply(struct {
				OK  bool    `json:"ok"`
				Run runJSON `json:"run"`
			}{true, toRunJSON(run)})
		case run.CancelledMs != 0:
			return refusal(409, ReasonRunEnded, "drill run "+runID(id)+" was already cancelled")
		default:
			return refusal(409, ReasonRunEnded, "drill run "+runID(id)+" has already finished; only a queued or running run can be cancelled")
		}
	}))
	s.mux.Handle(RouteDrillsRuns, s.keyRoute(api.DrillsRuns, func(r *http.Request, k store.Key, q api.Query, body []byte) reply {
		limit := 20
		if v, ok := q.Get("limit"); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return invalid("limit must be an integer from 1 to 1000")
			}
			limit = n
		}
		runs, err := s.store.DrillRuns(r.Context(), k.WorkspaceID, limit)
		if err != nil {
			return unavailable(err)
		}
		return jsonReply(struct {
			OK      bool      `json:"ok"`
			EveryMs int64     `json:"everyMs"`
			Runs    []runJSON `json:"runs"`
		}{true, s.drills.cadenceOf(k.WorkspaceID), each(runs, toRunJSON)})
	}))
	s.mux.Handle(RouteDrillsCadence, s.keyRoute(api.DrillsCadence, func(r *http.Request, k store.Key, _ api.Query, body []byte) reply {
		var req struct {
			EveryMs json.RawMessage `json:"everyMs"`
		}
		if err := decodeStrict(body, &req); err != nil {
			return invalid(err.Error() + ` (PUT ` + RouteDrillsCadence + ` takes {"everyMs": N})`)
		}
		if req.EveryMs == nil || string(req.EveryMs) == "null" {
			return invalid("everyMs is required: the milliseconds between runs, or 0 to stop")
		}
		every, err := strconv.ParseInt(string(req.EveryMs), 10, 64)
		if err != nil || (every != 0 && (every < MinDrillCadenceMs || every > MaxDrillCadenceMs)) {
			return invalid("everyMs must be 0 (stop) or an integer from " + strconv.Itoa(MinDrillCadenceMs) +
				" to " + strconv.Itoa(MaxDrillCadenceMs))
		}
		if err := s.drills.setCadence(k.WorkspaceID, every); err != nil {
			return unavailable(err)
		}
		return jsonReply(struct {
			OK      bool  `json:"ok"`
			EveryMs int64 `json:"everyMs"`
		}{true, every})
	}))
}

// runJSON is a run as GET /api/v1/drills/runs shows it.
type runJSON struct {
	ID           string `json:"id"`
	Trigger      string `json:"trigger"`
	RequestedAt  int64  `json:"requestedAtMs"`
	StartedAtMs  *int64 `json:"startedAtMs"`
	FinishedAtMs *int64 `json:"finishedAtMs"`
	// CancelledAtMs is set when an operator cancelled the run (then
	// finishedAtMs is the same and passed stays null).
	CancelledAtMs *int64          `json:"cancelledAtMs"`
	Passed        *bool           `json:"passed"`
	Drills        json.RawMessage `json:"drills"`
}

func toRunJSON(r store.DrillRun) runJSON {
	out := runJSON{ID: runID(r.ID), Trigger: r.Trigger, RequestedAt: r.RequestedMs, Drills: r.Drills}
	if r.StartedMs != 0 {
		out.StartedAtMs = &r.StartedMs
	}
	switch {
	case r.CancelledMs != 0:
		out.FinishedAtMs, out.CancelledAtMs = &r.FinishedMs, &r.CancelledMs
	case r.FinishedMs != 0:
		out.FinishedAtMs = &r.FinishedMs
		out.Passed = &r.Passed
	}
	if len(out.Drills) == 0 {
		out.Drills = json.RawMessage("[]")
	}
	return out
}

// Operate runs an operator action for the holder of key, exactly as its
// REST route answers it: "drills.run" is POST /api/v1/drills/run,
// "drills.cancel" POST /api/v1/drills/cancel and "detection.run" POST
// /api/v1/detection/run (MCP's operator tools).
func (s *Server) Operate(ctx context.Context, key, action string, body []byte) (status int, answer []byte, err error) {
	var path string
	switch action {
	case "drills.run":
		path = RouteDrillsRun
	case "drills.cancel":
		path = RouteDrillsCancel
	case "detection.run":
		path = RouteDetectionRun
	default:
		return 0, nil, errors.New("server: no operator action " + strconv.Quote(action))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	rec := &recorder{header: http.Header{}}
	s.handler.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = 200
	}
	return rec.status, rec.body.Bytes(), nil
}

// recorder is the ResponseWriter Operate passes the handler.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
