package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/detect"
	kdrill "github.com/leaseplane/leaseplane/kernel/drill"
	"github.com/leaseplane/leaseplane/server/detection"
	"github.com/leaseplane/leaseplane/server/drill"
	"github.com/leaseplane/leaseplane/server/store"
)

// Detection routes (docs/DETECTION.md): the registered detectors
// (kernel/detect) run over the caller's workspace's ledger by package
// server/detection, which records each run in the ledger as an entry of its
// own (detection.run) through recordEvent; so is each drill run
// (drill.run).
const (
	RouteDetectors     = api.PathDetectors
	RouteDetectionRun  = api.PathDetectionRun
	RouteDetectionCase = api.PathDetectionCases
)

// HostOp is the log op of an entry the host adds to a workspace's record
// (a drill's result, a detector's run): logged with the commands, in
// their order, so the ledger derives it from the log as it derives the
// kernel's events; replay passes it by.
const HostOp = "host"

// recordEvent appends a host event (one JSON object with type and atMs
// first) to workspace ws's log, so that it becomes a ledger entry, and
// waits for its commit.
func (s *Server) recordEvent(wsID int64, event []byte) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return errShutdown
	}
	ws, err := s.workspace(wsID)
	if err != nil {
		return err
	}
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		return errShutdown
	}
	if ws.needsReload() {
		if err := s.load(ws); err != nil {
			ws.mu.Unlock()
			return err
		}
	}
	events := append(append([]byte{'['}, event...), ']')
	list, err := kernel.ParseEvents(events)
	if err != nil {
		ws.mu.Unlock()
		return err
	}
	ws.seq++
	rec := store.Record{Workspace: ws.id, Seq: ws.seq, NowMs: s.nowMs(), Op: HostOp, Body: []byte("{}"), Status: 200, Events: events,
		Semantics: kernel.Semantics}
	ws.sinceSnap++
	t := s.commit.enqueue(ws, ws.loaded, rec, list, false)
	ws.last = t
	ws.mu.Unlock()
	<-t.done
	return t.err
}

// recordDrillRun puts a finished run in the ledger of the workspace that
// asked for it (kernel/drill.RunEvent: the same bytes on every host).
func (s *Server) recordDrillRun(ws, id, started, finished int64, passed bool, results []drill.Result) {
	if s.ledger == nil {
		return
	}
	if err := s.recordEvent(ws, kdrill.RunEvent(runID(id), started, finished, passed, results)); err != nil {
		s.log.Warn("drills: the run's result did not reach the ledger", "run", id, "err", err)
	}
}

func (s *Server) detectionRoutes() {
	s.mux.Handle(RouteDetectors, s.keyRoute(api.Detectors, func(r *http.Request, k store.Key, _ api.Query, body []byte) reply {
		return reply{status: 200, answer: detect.ListJSON()}
	}))
	s.mux.Handle(RouteDetectionRun, s.keyRoute(api.DetectionRun, func(r *http.Request, k store.Key, _ api.Query, body []byte) reply {
		var req struct {
			Detector *string `json:"detector"`
		}
		if err := decodeStrict(body, &req); err != nil {
			return invalid(err.Error() + ` (POST ` + RouteDetectionRun + ` takes {"detector": NAME})`)
		}
		if req.Detector == nil {
			return invalid("detector is required (the detectors: GET " + RouteDetectors + ")")
		}
		d, ok := detect.Lookup(*req.Detector)
		if !ok {
			return invalid("detector " + strconv.Quote(*req.Detector) + " is not registered (the detectors: GET " + RouteDetectors + ")")
		}
		run, err := s.detection().Run(r.Context(), k.WorkspaceID, d.Name)
		if err != nil {
			s.log.Error("detection run failed", "workspace", k.Workspace, "err", err)
			return unavailable(err)
		}
		return jsonReply(run)
	}))
	s.mux.Handle(RouteDetectionCase, s.keyRoute(api.DetectionCases, func(r *http.Request, k store.Key, q api.Query, body []byte) reply {
		status, _ := q.Get("status")
		if status != "" && status != "open" {
			return invalid(`status must be "open" or absent (every case)`)
		}
		cs, err := s.detection().Cases(r.Context(), k.WorkspaceID, status)
		if err != nil {
			return unavailable(err)
		}
		return jsonReply(struct {
			OK    bool `json:"ok"`
			Cases any  `json:"cases"`
		}{true, cs})
	}))
}

// detection is the detectors' service over this server (package
// server/detection, behind detectionHost).
func (s *Server) detection() *detection.Service {
	return &detection.Service{Ledger: s.ledger, Store: s.store, Host: detectionHost{s}, Log: s.log}
}

// detectionHost is what detection needs of the server.
type detectionHost struct{ s *Server }

func (h detectionHost) Open(ws int64) error {
	_, err := h.s.workspace(ws)
	return err
}

func (h detectionHost) Record(ws int64, event []byte) error { return h.s.recordEvent(ws, event) }

func (h detectionHost) NowMs() int64 { return h.s.nowMs() }

// DetectionRun runs the detector named name over workspace ws's ledger,
// files its findings as cases and records the run in the ledger.
func (s *Server) DetectionRun(ctx context.Context, ws int64, name string) (detection.Run, error) {
	return s.detection().Run(ctx, ws, name)
}

// OpenCases is the workspace's open cases (the operator page).
func (s *Server) OpenCases(ctx context.Context, ws int64) ([]detection.Case, error) {
	return s.detection().Cases(ctx, ws, "open")
}
