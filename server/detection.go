package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/detect"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// Detection routes (docs/DETECTION.md): the registered
// detectors (kernel/detect) run over the caller's workspace's ledger, up
// to a checkpoint signed for the run; each finding cites both entries
// with inclusion proofs against that checkpoint and is filed as a case,
// once however often runs repeat. A run is recorded in the ledger as an
// entry of its own (detection.run); so is each drill run (drill.run).
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
	t := s.commit.enqueue(ws, ws.loaded, rec, list)
	ws.last = t
	ws.mu.Unlock()
	<-t.done
	return t.err
}

// hostEvent starts a host event: {"type":T,"atMs":N and the fields of
// fields in order (values already JSON); the caller adds nothing more.
func hostEvent(typ string, atMs int64, fields ...string) []byte {
	b := append([]byte(`{"type":`), kernel.AppendQuote(nil, typ)...)
	b = append(b, `,"atMs":`...)
	b = strconv.AppendInt(b, atMs, 10)
	for i := 0; i+1 < len(fields); i += 2 {
		b = append(b, ',')
		b = kernel.AppendQuote(b, fields[i])
		b = append(b, ':')
		b = append(b, fields[i+1]...)
	}
	return append(b, '}')
}

// recordDrillRun puts a finished run in the ledger of the workspace that
// asked for it.
func (s *Server) recordDrillRun(ws, id, started, finished int64, passed bool, results []DrillResult) {
	drills := []byte{'['}
	for i, d := range results {
		if i > 0 {
			drills = append(drills, ',')
		}
		drills = append(drills, `{"name":`...)
		drills = kernel.AppendQuote(drills, d.Name)
		drills = append(drills, `,"passed":`...)
		drills = strconv.AppendBool(drills, d.Passed)
		if !d.Passed {
			drills = append(drills, `,"detail":`...)
			drills = kernel.AppendQuote(drills, d.Detail)
		}
		drills = append(drills, '}')
	}
	drills = append(drills, ']')
	ev := hostEvent("drill.run", finished, "runId", string(kernel.AppendQuote(nil, runID(id))),
		"startedAtMs", strconv.FormatInt(started, 10), "passed", strconv.FormatBool(passed), "drills", string(drills))
	if s.ledger == nil {
		return
	}
	if err := s.recordEvent(ws, ev); err != nil {
		s.log.Warn("drills: the run's result did not reach the ledger", "run", id, "err", err)
	}
}

// Proof is an inclusion proof of one entry, as the proof route answers it.
type Proof struct {
	Index  int64    `json:"index"`
	Size   int64    `json:"size"`
	Hashes []string `json:"hashes"`
}

// DetectionFinding is a finding as the run route answers it: the
// detector's finding, its case, and both entries with their proofs.
type DetectionFinding struct {
	detect.Finding
	Case    string       `json:"case"`
	Entries []CitedEntry `json:"entries"`
}

// CitedEntry is one entry a finding cites.
type CitedEntry struct {
	Index int64           `json:"index"`
	Data  []byte          `json:"data"` // base64 in JSON
	Event json.RawMessage `json:"event"`
	Proof Proof           `json:"proof"`
}

// DetectionRun is the answer of POST /api/v1/detection/run.
type DetectionRun struct {
	OK         bool               `json:"ok"`
	Detector   string             `json:"detector"`
	Checkpoint string             `json:"checkpoint"`
	TreeSize   int64              `json:"treeSize"`
	Findings   []DetectionFinding `json:"findings"`
}

// runDetector runs detector d over workspace ws's ledger.
func (s *Server) runDetector(ctx context.Context, ws int64, d detect.Detector) (DetectionRun, error) {
	out := DetectionRun{OK: true, Detector: d.Name, Findings: []DetectionFinding{}}
	if s.ledger == nil {
		return out, errors.New("this server runs without a ledger")
	}
	if _, err := s.workspace(ws); err != nil { // opens its ledger too
		return out, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.ledger.Wait(wctx, ws)
	cancel()
	if err != nil {
		return out, errors.New("the ledger has not caught up: " + err.Error())
	}
	key := s.ledger.Route(ctx, ws, "key", nil)
	note := s.ledger.Route(ctx, ws, "checkpoint", nil)
	if key.Status != 200 || note.Status != 200 {
		return out, errors.New("the ledger gives no checkpoint now")
	}
	cp, err := kledger.Open(note.Body, strings.TrimSpace(string(key.Body)))
	if err != nil {
		return out, err
	}
	out.Checkpoint, out.TreeSize = string(note.Body), cp.Size
	var entries []detect.Entry
	for start := int64(0); start < cp.Size; {
		n := min(int64(1000), cp.Size-start)
		es, err := s.store.LedgerEntries(ctx, ws, start, int(n))
		if err != nil {
			return out, err
		}
		if len(es) == 0 {
			return out, errors.New("the ledger's entries from " + strconv.FormatInt(start, 10) + " are gone")
		}
		for _, e := range es {
			entries = append(entries, detect.Entry{Index: e.Index, Data: e.Data})
		}
		start += int64(len(es))
	}
	w, err := s.store.WorkspaceByID(ws)
	if err != nil {
		return out, err
	}
	rules, _ := kernel.ParseRules(w.Rules)
	classOf := func(res string) string {
		for _, p := range rules.ReadShared {
			if strings.HasPrefix(res, p) {
				return detect.ClassReadShared
			}
		}
		return detect.ClassExclusive
	}
	fs, err := d.Run(entries, detect.Options{ClassOf: classOf})
	if err != nil {
		return out, err
	}
	now := s.nowMs()
	var caseIDs []string
	for _, f := range fs {
		fj, _ := json.Marshal(f)
		c, err := s.store.FileCase(ctx, store.Case{Workspace: ws, Detector: d.Name, Key: f.Key(), EntryA: f.A.Entry, EntryB: f.B.Entry,
			Finding: fj, FirstSeenMs: now, LastSeenMs: now})
		if err != nil {
			return out, err
		}
		df := DetectionFinding{Finding: f, Case: caseID(c.ID)}
		caseIDs = append(caseIDs, df.Case)
		for _, idx := range []int64{f.A.Entry, f.B.Entry} {
			pr := s.ledger.Route(ctx, ws, "proof", map[string][]string{"index": {strconv.FormatInt(idx, 10)}, "size": {strconv.FormatInt(cp.Size, 10)}})
			if pr.Status != 200 {
				return out, errors.New("no inclusion proof of entry " + strconv.FormatInt(idx, 10) + ": " + string(pr.Body))
			}
			var p Proof
			if err := json.Unmarshal(pr.Body, &p); err != nil {
				return out, err
			}
			data := entries[idx].Data
			df.Entries = append(df.Entries, CitedEntry{Index: idx, Data: data, Event: json.RawMessage(data), Proof: p})
		}
		out.Findings = append(out.Findings, df)
	}
	ids, _ := json.Marshal(caseIDs)
	if caseIDs == nil {
		ids = []byte("[]")
	}
	ev := hostEvent("detection.run", now, "detector", string(kernel.AppendQuote(nil, d.Name)),
		"treeSize", strconv.FormatInt(cp.Size, 10), "findings", strconv.Itoa(len(fs)), "cases", string(ids))
	if err := s.recordEvent(ws, ev); err != nil {
		s.log.Warn("detection: the run did not reach the ledger", "err", err)
	}
	return out, nil
}

func caseID(id int64) string { return "case_" + strconv.FormatInt(id, 10) }

func (s *Server) detectionRoutes() {
	s.mux.Handle(RouteDetectors, s.keyRoute(api.Detectors, func(r *http.Request, k store.Key, _ api.Query, body []byte) reply {
		return jsonReply(map[string]any{"ok": true, "detectors": detect.Detectors()})
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
		run, err := s.DetectionRun(r.Context(), k.WorkspaceID, d.Name)
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
		cs, err := s.store.Cases(r.Context(), k.WorkspaceID, status)
		if err != nil {
			return unavailable(err)
		}
		return jsonReply(map[string]any{"ok": true, "cases": each(cs, toCaseJSON)})
	}))
}

// DetectionRun runs the detector named name over workspace ws's ledger,
// files its findings as cases and records the run in the ledger.
func (s *Server) DetectionRun(ctx context.Context, ws int64, name string) (DetectionRun, error) {
	d, ok := detect.Lookup(name)
	if !ok {
		return DetectionRun{}, errors.New("detector " + strconv.Quote(name) + " is not registered")
	}
	return s.runDetector(ctx, ws, d)
}

// CaseJSON is a case as GET /api/v1/detection/cases shows it.
type CaseJSON struct {
	ID          string          `json:"id"`
	Detector    string          `json:"detector"`
	Status      string          `json:"status"`
	Entries     []int64         `json:"entries"`
	FirstSeenMs int64           `json:"firstSeenAtMs"`
	LastSeenMs  int64           `json:"lastSeenAtMs"`
	Finding     json.RawMessage `json:"finding"`
}

func toCaseJSON(c store.Case) CaseJSON {
	return CaseJSON{ID: caseID(c.ID), Detector: c.Detector, Status: c.Status, Entries: []int64{c.EntryA, c.EntryB},
		FirstSeenMs: c.FirstSeenMs, LastSeenMs: c.LastSeenMs, Finding: c.Finding}
}

// OpenCases is the workspace's open cases (the operator page).
func (s *Server) OpenCases(ctx context.Context, ws int64) ([]CaseJSON, error) {
	cs, err := s.store.Cases(ctx, ws, "open")
	if err != nil {
		return nil, err
	}
	out := make([]CaseJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, toCaseJSON(c))
	}
	return out, nil
}
