// Package detection runs the detectors of kernel/detect over a
// workspace's ledger, up to a checkpoint signed for the run; each finding
// cites both entries with inclusion proofs against that checkpoint and is
// filed as a case, once however often runs repeat; each run is recorded in
// the workspace's ledger as an entry of its own (detection.run). The server
// calls it through Service, and it reaches the server only through Host.
package detection

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/detect"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// Host is what a run needs of the server.
type Host interface {
	// Open loads workspace ws, and so opens its ledger, when it is not yet.
	Open(ws int64) error
	// Record appends a host event (one JSON object, type and atMs first)
	// to ws's command log, so it becomes a ledger entry, and waits for its
	// commit.
	Record(ws int64, event []byte) error
	// NowMs is the plane's clock.
	NowMs() int64
}

// Service runs detectors and answers cases. Ledger is nil on a server
// without a ledger (a run is then refused).
type Service struct {
	Ledger *ledger.Ledger
	Store  *store.Store
	Host   Host
	Log    *slog.Logger
}

// Proof is an inclusion proof of one entry, as the proof route answers it.
type Proof struct {
	Index  int64    `json:"index"`
	Size   int64    `json:"size"`
	Hashes []string `json:"hashes"`
}

// Finding is a finding as the run route answers it: the
// detector's finding, its case, and both entries with their proofs.
type Finding struct {
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

// Run is the answer of POST /api/v1/detection/run.
type Run struct {
	OK         bool      `json:"ok"`
	Detector   string    `json:"detector"`
	Checkpoint string    `json:"checkpoint"`
	TreeSize   int64     `json:"treeSize"`
	Findings   []Finding `json:"findings"`
}

// run runs detector d over workspace ws's ledger.
func (s *Service) run(ctx context.Context, ws int64, d detect.Detector) (Run, error) {
	out := Run{OK: true, Detector: d.Name, Findings: []Finding{}}
	if s.Ledger == nil {
		return out, errors.New("this server runs without a ledger")
	}
	if err := s.Host.Open(ws); err != nil { // opens its ledger too
		return out, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.Ledger.Wait(wctx, ws)
	cancel()
	if err != nil {
		return out, errors.New("the ledger has not caught up: " + err.Error())
	}
	key := s.Ledger.Route(ctx, ws, "key", nil)
	note := s.Ledger.Route(ctx, ws, "checkpoint", nil)
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
		es, err := s.Store.LedgerEntries(ctx, ws, start, int(n))
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
	w, err := s.Store.WorkspaceByID(ws)
	if err != nil {
		return out, err
	}
	rules, _ := kernel.ParseRules(w.Rules)
	fs, err := d.Run(entries, detect.OptionsFor(rules))
	if err != nil {
		return out, err
	}
	now := s.Host.NowMs()
	var caseIDs []string
	for _, f := range fs {
		fj, _ := json.Marshal(f)
		c, err := s.Store.FileCase(ctx, store.Case{Workspace: ws, Detector: d.Name, Key: f.Key(), EntryA: f.A.Entry, EntryB: f.B.Entry,
			Finding: fj, FirstSeenMs: now, LastSeenMs: now})
		if err != nil {
			return out, err
		}
		df := Finding{Finding: f, Case: caseID(c.ID)}
		caseIDs = append(caseIDs, df.Case)
		for _, idx := range []int64{f.A.Entry, f.B.Entry} {
			pr := s.Ledger.Route(ctx, ws, "proof", map[string][]string{"index": {strconv.FormatInt(idx, 10)}, "size": {strconv.FormatInt(cp.Size, 10)}})
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
	if err := s.Host.Record(ws, detect.RunEvent(now, d.Name, cp.Size, len(fs), caseIDs)); err != nil {
		s.Log.Warn("detection: the run did not reach the ledger", "err", err)
	}
	return out, nil
}

func caseID(id int64) string { return "case_" + strconv.FormatInt(id, 10) }

// Run runs the detector named name over workspace ws's ledger, files its
// findings as cases and records the run in the ledger.
func (s *Service) Run(ctx context.Context, ws int64, name string) (Run, error) {
	d, ok := detect.Lookup(name)
	if !ok {
		return Run{}, errors.New("detector " + strconv.Quote(name) + " is not registered")
	}
	return s.run(ctx, ws, d)
}

// Case is a case as GET /api/v1/detection/cases shows it.
type Case struct {
	ID          string          `json:"id"`
	Detector    string          `json:"detector"`
	Status      string          `json:"status"`
	Entries     []int64         `json:"entries"`
	FirstSeenMs int64           `json:"firstSeenAtMs"`
	LastSeenMs  int64           `json:"lastSeenAtMs"`
	Finding     json.RawMessage `json:"finding"`
}

func toCase(c store.Case) Case {
	return Case{ID: caseID(c.ID), Detector: c.Detector, Status: c.Status, Entries: []int64{c.EntryA, c.EntryB},
		FirstSeenMs: c.FirstSeenMs, LastSeenMs: c.LastSeenMs, Finding: c.Finding}
}

// Cases is the workspace's cases: every one, or those of status ("open").
func (s *Service) Cases(ctx context.Context, ws int64, status string) ([]Case, error) {
	cs, err := s.Store.Cases(ctx, ws, status)
	if err != nil {
		return nil, err
	}
	out := make([]Case, 0, len(cs))
	for _, c := range cs {
		out = append(out, toCase(c))
	}
	return out, nil
}
