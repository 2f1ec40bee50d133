package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel/api"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/detection"
)

func (ds *drillServer) detectionRun() detection.Run {
	ds.t.Helper()
	st, b := ds.do("POST", RouteDetectionRun, ds.operator, `{"detector":"lease-overlap"}`)
	if st != 200 {
		ds.t.Fatalf("detection run: %d %s", st, b)
	}
	var run detection.Run
	if err := json.Unmarshal(b, &run); err != nil {
		ds.t.Fatal(err)
	}
	return run
}

// TestDetectionRun runs lease-overlap over a live ledger: nothing in real
// traffic; two overlapping grants put in the record are found, each cited
// with an inclusion proof that checks against the run's checkpoint, and
// filed as one case however often the run repeats. Runs and drill runs
// are entries of their own in the ledger.
func TestDetectionRun(t *testing.T) {
	ds := newDrillServer(t, t.TempDir(), Config{faults: faults{drillNames: []string{"stale-lease-id"}}})
	for i := range 3 {
		actor := "did:web:a.example:agent:" + strconv.Itoa(i)
		if st, b := ds.do("POST", api.PathLease, ds.key, `{"resource":"lock:x","actorDid":"`+actor+`"}`); st != 200 {
			t.Fatalf("lease: %d %s", st, b)
		}
		if st, b := ds.do("POST", api.PathRelease, ds.key, `{"resource":"lock:x","actorDid":"`+actor+`"}`); st != 200 {
			t.Fatalf("release: %d %s", st, b)
		}
	}
	run := ds.detectionRun()
	if len(run.Findings) != 0 || run.TreeSize < 6 {
		t.Fatalf("a clean ledger: %d findings over %d entries", len(run.Findings), run.TreeSize)
	}

	// Two grants of one lock to two agents, recorded as a broken plane
	// would have.
	w, _ := ds.s.Store().WorkspaceByName("default")
	now := time.Now().UnixMilli()
	grant := func(actor, id string, fence, at int64) []byte {
		return []byte(`{"type":"coordination.lease","atMs":` + strconv.FormatInt(at, 10) + `,"resource":"lock:twice","actorDid":"` + actor +
			`","leaseId":"` + id + `","fence":` + strconv.FormatInt(fence, 10) + `,"mode":"write","expiresAtMs":` + strconv.FormatInt(at+30000, 10) + `,"trustDelta":0}`)
	}
	if err := ds.s.recordEvent(w.ID, grant("did:web:a.example:agent:x", "lease_one", 100, now)); err != nil {
		t.Fatal(err)
	}
	if err := ds.s.recordEvent(w.ID, grant("did:web:a.example:agent:y", "lease_two", 101, now+5)); err != nil {
		t.Fatal(err)
	}
	run = ds.detectionRun()
	if len(run.Findings) != 1 {
		t.Fatalf("want one finding, got %+v", run.Findings)
	}
	f := run.Findings[0]
	if f.Kind != "overlap" || f.A.LeaseID != "lease_one" || f.B.LeaseID != "lease_two" || len(f.Entries) != 2 || f.Case == "" {
		t.Fatalf("finding: %+v", f)
	}
	key := ds.s.Ledger().Route(context.Background(), w.ID, "key", nil)
	cp, err := kledger.Open([]byte(run.Checkpoint), strings.TrimSpace(string(key.Body)))
	if err != nil || cp.Size != run.TreeSize {
		t.Fatalf("checkpoint: %v (size %d, run says %d)", err, cp.Size, run.TreeSize)
	}
	for i, e := range f.Entries {
		if want := []int64{f.A.Entry, f.B.Entry}[i]; e.Index != want || e.Proof.Index != want || e.Proof.Size != cp.Size {
			t.Errorf("entry %d cites index %d (proof %d of %d), want %d of %d", i, e.Index, e.Proof.Index, e.Proof.Size, want, cp.Size)
		}
		var hs []kledger.Hash
		for _, h := range e.Proof.Hashes {
			x, err := kledger.ParseHash(h)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, x)
		}
		if err := kledger.CheckInclusion(hs, cp.Size, cp.Root, e.Index, kledger.LeafHash(e.Data)); err != nil {
			t.Errorf("entry %d's inclusion proof does not check: %v", e.Index, err)
		}
		if !strings.Contains(string(e.Event), `"leaseId":"`+[]string{"lease_one", "lease_two"}[i]+`"`) {
			t.Errorf("entry %d: %s", e.Index, e.Event)
		}
	}
	again := ds.detectionRun()
	if len(again.Findings) != 1 || again.Findings[0].Case != f.Case || again.TreeSize <= run.TreeSize {
		t.Errorf("a repeated run: %+v (tree %d after %d)", again.Findings, again.TreeSize, run.TreeSize)
	}
	st, b := ds.do("GET", RouteDetectionCase, ds.key, "")
	var cases struct{ Cases []detection.Case }
	if json.Unmarshal(b, &cases); st != 200 || len(cases.Cases) != 1 || cases.Cases[0].ID != f.Case || cases.Cases[0].Status != "open" ||
		cases.Cases[0].Entries[0] != f.A.Entry || cases.Cases[0].Entries[1] != f.B.Entry {
		t.Errorf("cases: %d %s", st, b)
	}

	// a drill run and the detection runs are in the ledger
	ds.runOnce(60 * time.Second)
	if err := ds.s.Ledger().Wait(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	ent := ds.s.Ledger().Route(context.Background(), w.ID, "entries", map[string][]string{"start": {"0"}, "count": {"1000"}})
	var got struct{ Entries []struct{ Data string } }
	json.Unmarshal(ent.Body, &got)
	kinds := map[string]int{}
	for _, e := range got.Entries {
		d, _ := base64.StdEncoding.DecodeString(e.Data)
		var ev struct{ Type string }
		json.Unmarshal(d, &ev)
		kinds[ev.Type]++
	}
	if kinds["detection.run"] != 3 || kinds["drill.run"] != 1 {
		t.Errorf("ledger entry kinds: %v", kinds)
	}

	for _, tt := range []struct {
		body, want string
		status     int
	}{
		{`{}`, "detector is required", 400},
		{`{"detector":"nope"}`, "not registered", 400},
		{`{"detector":"lease-overlap","x":1}`, "unknown field", 400},
	} {
		if st, b := ds.do("POST", RouteDetectionRun, ds.operator, tt.body); st != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s: %d %s", tt.body, st, b)
		}
	}
	if st, b := ds.do("POST", RouteDetectionRun, ds.key, `{"detector":"lease-overlap"}`); st != 403 {
		t.Errorf("a workspace key runs a detector: %d %s", st, b)
	}
	if st, b := ds.do("GET", RouteDetectors, ds.key, ""); st != 200 || !strings.Contains(string(b), `"name":"lease-overlap"`) {
		t.Errorf("detectors: %d %s", st, b)
	}
}

func TestDrillAndCaseGauges(t *testing.T) {
	ds := newDrillServer(t, t.TempDir(), Config{faults: faults{drillNames: []string{"stale-lease-id"}}})
	metrics := func() string {
		_, b := ds.do("GET", "/metrics", "", "")
		return string(b)
	}
	if m := metrics(); !strings.Contains(m, "leaseplane_drill_last_passed -1") || !strings.Contains(m, "leaseplane_detection_open_cases 0") {
		t.Fatalf("before any run:\n%s", m)
	}
	ds.runOnce(60 * time.Second)
	w, _ := ds.s.Store().WorkspaceByName("default")
	at := time.Now().UnixMilli()
	for _, a := range []string{"x", "y"} {
		ev := `{"type":"coordination.lease","atMs":` + strconv.FormatInt(at, 10) + `,"resource":"lock:g","actorDid":"did:web:` + a +
			`.example","leaseId":"lease_` + a + `","fence":7,"mode":"write","expiresAtMs":` + strconv.FormatInt(at+30000, 10) + `,"trustDelta":0}`
		if err := ds.s.recordEvent(w.ID, []byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	ds.detectionRun()
	if m := metrics(); !strings.Contains(m, "leaseplane_drill_last_passed 1") || !strings.Contains(m, "leaseplane_detection_open_cases 2") {
		t.Errorf("after a passing run and an overlap with an equal fence:\n%s", m)
	}
}
