package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
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
)

// Cadence bounds: a cadence below a second would only queue runs behind
// the one going.
const (
	MinDrillCadenceMs = 1000
	MaxDrillCadenceMs = 7 * 24 * 3600 * 1000
)

// drillRunner runs the drill runs one at a time, in the order asked, and
// asks for the runs cadences make due.
type drillRunner struct {
	s       *Server
	mu      sync.Mutex
	queue   []drillJob
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
}

type drillJob struct {
	id, ws  int64
	trigger string
}

type cadence struct{ every, next int64 }

func newDrillRunner(s *Server) *drillRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &drillRunner{s: s, cadence: map[int64]*cadence{}, wake: make(chan struct{}, 1),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), lastPassed: -1}
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
		r.queue = append(r.queue, drillJob{id: run.ID, ws: run.Workspace, trigger: run.Trigger})
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

// ask queues a run for workspace ws and returns its id.
func (r *drillRunner) ask(ws int64, trigger string) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.askLocked(ws, trigger)
}

func (r *drillRunner) askLocked(ws int64, trigger string) (int64, error) {
	id, err := r.s.store.AddDrillRun(ws, trigger, r.s.nowMs())
	if err != nil {
		return 0, err
	}
	r.queue = append(r.queue, drillJob{id: id, ws: ws, trigger: trigger})
	r.poke()
	return id, nil
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

// pending reports whether ws has a run queued or running (mu held).
func (r *drillRunner) pending(ws int64) bool {
	if r.running != nil && r.running.ws == ws {
		return true
	}
	for _, j := range r.queue {
		if j.ws == ws {
			return true
		}
	}
	return false
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
			if r.pending(ws) {
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
		var job *drillJob
		if len(r.queue) > 0 {
			j := r.queue[0]
			r.queue = r.queue[1:]
			job = &j
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
		r.runJob(*job)
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
	}
}

func (r *drillRunner) runJob(job drillJob) {
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
	results, err := s.runDrills(r.ctx, job.id, func(sofar []drill.Result) {
		if err := s.store.SaveDrillRun(job.id, drill.ResultsJSON(sofar), 0, false); err != nil {
			s.log.Warn("drills: saving progress failed", "run", job.id, "err", err)
		}
	})
	if r.ctx.Err() != nil {
		return // interrupted by a stop: it runs again after the restart
	}
	passed := err == nil && len(results) > 0
	for _, d := range results {
		passed = passed && d.Passed
	}
	if err != nil {
		results = append(results, drill.Result{Name: "run", Detail: "the run could not go on: " + err.Error()})
	}
	finished := s.nowMs()
	if finished <= started {
		finished = started
	}
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
	s.recordDrillRun(job.ws, job.id, started, finished, passed, results)
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
		return refusal(500, ReasonInternal, "encoding the answer failed")
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
		id, err := s.drills.ask(k.WorkspaceID, "asked")
		if err != nil {
			s.log.Error("drills: queueing a run failed", "err", err)
			return unavailable(err)
		}
		return jsonReply(map[string]any{"ok": true, "id": runID(id)})
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
		return jsonReply(map[string]any{"ok": true, "everyMs": s.drills.cadenceOf(k.WorkspaceID), "runs": each(runs, toRunJSON)})
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
		return jsonReply(map[string]any{"ok": true, "everyMs": every})
	}))
}

// runJSON is a run as GET /api/v1/drills/runs shows it.
type runJSON struct {
	ID           string          `json:"id"`
	Trigger      string          `json:"trigger"`
	RequestedAt  int64           `json:"requestedAtMs"`
	StartedAtMs  *int64          `json:"startedAtMs"`
	FinishedAtMs *int64          `json:"finishedAtMs"`
	Passed       *bool           `json:"passed"`
	Drills       json.RawMessage `json:"drills"`
}

func toRunJSON(r store.DrillRun) runJSON {
	out := runJSON{ID: runID(r.ID), Trigger: r.Trigger, RequestedAt: r.RequestedMs, Drills: r.Drills}
	if r.StartedMs != 0 {
		out.StartedAtMs = &r.StartedMs
	}
	if r.FinishedMs != 0 {
		out.FinishedAtMs = &r.FinishedMs
		out.Passed = &r.Passed
	}
	if len(out.Drills) == 0 {
		out.Drills = json.RawMessage("[]")
	}
	return out
}

// Operate runs an operator action for the holder of key, exactly as its
// REST route answers it: "drills.run" is POST /api/v1/drills/run and
// "detection.run" POST /api/v1/detection/run (MCP's operator tools).
func (s *Server) Operate(ctx context.Context, key, action string, body []byte) (status int, answer []byte, err error) {
	var path string
	switch action {
	case "drills.run":
		path = RouteDrillsRun
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
