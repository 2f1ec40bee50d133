package detect_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/detect"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// readEntries reads a JSON-lines file; an entry's index is its line's
// position among the non-blank lines, from 0.
func readEntries(t *testing.T, name string) []detect.Entry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []detect.Entry
	for line := range bytes.Lines(b) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			out = append(out, detect.Entry{Index: int64(len(out)), Data: line})
		}
	}
	return out
}

func run(t *testing.T, entries []detect.Entry, opt detect.Options) []detect.Finding {
	t.Helper()
	d, ok := detect.Lookup(detect.LeaseOverlap)
	if !ok {
		t.Fatal("lease-overlap is not registered")
	}
	fs, err := d.Run(entries, opt)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// key is "kind A.entry B.entry @atMs".
func key(f detect.Finding) string {
	return f.Kind + " " + strconv.FormatInt(f.A.Entry, 10) + " " + strconv.FormatInt(f.B.Entry, 10) + " @" + strconv.FormatInt(f.AtMs, 10)
}

func TestCraftedEventFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"same-resource-overlap.jsonl", []string{"overlap 0 1 @2000"}},
		{"one-after-another.jsonl", nil},
		{"expiry-boundary.jsonl", []string{"overlap 1 2 @60999"}},
		{"renewal-extends-into-grant.jsonl", []string{"overlap 1 2 @40000"}},
		{"renewal-then-release.jsonl", nil},
		{"read-read-shared.jsonl", nil},
		{"read-write-shared.jsonl", []string{"overlap 0 1 @2000", "overlap 1 2 @3000"}},
		{"renewal-changes-mode.jsonl", []string{"overlap 2 1 @5000"}},
		{"later-grant-exclusive.jsonl", []string{"overlap 0 1 @2000"}},
		{"later-grant-read-shared.jsonl", nil},
		{"fence-equal.jsonl", []string{"fence 0 2 @3000"}},
		{"fence-falling.jsonl", []string{"fence 0 2 @40000"}},
		// with a class (one counter per workspace): 5 again on lock:z, 2 on lock:w
		{"fence-reused-across-resources.jsonl", []string{"fence 1 2 @3000", "fence 1 3 @4000"}},
		{"revoke-ends-a-life.jsonl", nil},
		{"split-brain-same-id.jsonl", []string{"fence 0 1 @1500", "overlap 0 1 @1500"}},
		{"merged-out-of-order.jsonl", []string{"overlap 0 3 @5000", "fence 3 2 @10000", "overlap 3 2 @10000"}},
		{"record-begins-mid-life.jsonl", []string{"overlap 0 1 @2000"}},
		{"same-agent-and-other-kinds.jsonl", nil},
	}
	files, _ := filepath.Glob("testdata/*.jsonl")
	if len(files) != len(tests) {
		t.Errorf("testdata has %d event files, the table %d: every file needs its expected findings", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".jsonl"), func(t *testing.T) {
			fs := run(t, readEntries(t, tt.file), detect.Options{})
			var got []string
			for _, f := range fs {
				got = append(got, key(f))
				if f.A.LeaseID == "" || f.B.LeaseID == "" || f.Text == "" || f.Detector != detect.LeaseOverlap {
					t.Errorf("finding lacks its leases or text: %+v", f)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("findings %q, want %q\n%s", got, tt.want, texts(fs))
			}
		})
	}
}

func texts(fs []detect.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("  " + f.Text + "\n")
	}
	return b.String()
}

func TestFindingDetails(t *testing.T) {
	fs := run(t, readEntries(t, "renewal-extends-into-grant.jsonl"), detect.Options{})
	if len(fs) != 1 {
		t.Fatalf("want one finding, got %d", len(fs))
	}
	f := fs[0]
	want := detect.Finding{Detector: "lease-overlap", Kind: "overlap", Resource: "lock:x", Class: "exclusive", AtMs: 40000,
		A:    detect.Side{LeaseID: "lease_a1", Resource: "lock:x", ActorDid: "did:web:acme.example:agent:a", Mode: "write", Fence: 1, Entry: 1, GrantEntry: 0},
		B:    detect.Side{LeaseID: "lease_b2", Resource: "lock:x", ActorDid: "did:web:acme.example:agent:b", Mode: "write", Fence: 2, Entry: 2, GrantEntry: 2},
		Text: "lock:x: lease_a1 (did:web:acme.example:agent:a, write, fence 1, entry 1) and lease_b2 (did:web:acme.example:agent:b, write, fence 2, entry 2) overlap from 40000 ms (exclusive)"}
	if f != want {
		t.Errorf("finding\n %+v\nwant\n %+v", f, want)
	}
	if fs := run(t, readEntries(t, "record-begins-mid-life.jsonl"), detect.Options{}); len(fs) != 1 || fs[0].A.GrantEntry != -1 {
		t.Errorf("a life begun by a renewal has no grant entry: %+v", fs)
	}
	// ClassOf decides for events without a class: a and b read file:q.
	ents := readEntries(t, "later-grant-exclusive.jsonl")
	shared := func(string) string { return detect.ClassReadShared }
	if fs := run(t, ents, detect.Options{ClassOf: shared}); len(fs) != 0 {
		t.Errorf("with ClassOf read-shared, read/read is not a conflict: %s", texts(fs))
	}
}

func TestUnreadableEntries(t *testing.T) {
	tests := []struct{ data, want string }{
		{`not json`, "entry 3: "},
		{`[1,2]`, "entry 3: an event must be a JSON object"},
		{`{"atMs":1}`, "the event has no type"},
		{`{"type":"coordination.lease","atMs":1.5}`, "atMs must be an integer"},
		{`{"type":"coordination.lease","atMs":1,"resource":"r","actorDid":"did:x:y","leaseId":"l","fence":1,"expiresAtMs":2}`, "coordination.lease event has no mode"},
		{`{"type":"coordination.release","atMs":1,"resource":"r","actorDid":"did:x:y"}`, "has no leaseId"},
		{`{"type":"coordination.lease","atMs":1,"resource":"r","class":"shared","actorDid":"did:x:y","leaseId":"l","fence":1,"mode":"read","expiresAtMs":2}`, "class must be exclusive or read-shared"},
		{`{"type":"coordination.lease","atMs":1,"resource":"r","actorDid":"did:x:y","leaseId":"l","fence":1,"mode":"grab","expiresAtMs":2}`, "mode must be read, write or delete"},
		{`{"type":"coordination.lease","type":"x","atMs":1}`, "duplicate field"},
		{`{"type":7,"atMs":1}`, "type must be a string"},
	}
	d, _ := detect.Lookup(detect.LeaseOverlap)
	for _, tt := range tests {
		_, err := d.Run([]detect.Entry{{Index: 3, Data: []byte(tt.data)}}, detect.Options{})
		var ee *detect.EntryError
		if err == nil || !errors.As(err, &ee) || ee.Index != 3 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want an EntryError at 3 containing %q", tt.data, err, tt.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	ds := detect.Detectors()
	if len(ds) == 0 || ds[0].Name != "lease-overlap" || ds[0].Summary == "" {
		t.Fatalf("registry: %+v", ds)
	}
	if _, ok := detect.Lookup("no-such"); ok {
		t.Error("Lookup found a detector that does not exist")
	}
}

// events replays a scenario in the native kernel and returns its events
// as entries. The kernel's events carry their class, so the detector
// needs no rules.
func events(t *testing.T, scen []byte) ([]detect.Entry, detect.Options) {
	t.Helper()
	s, err := scenario.Parse(scen)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := kernel.ParseRules(s.Rules)
	if err != nil {
		t.Fatal(err)
	}
	m := kernel.New(rules)
	var out []detect.Entry
	for _, step := range s.Steps {
		res := m.StepJSON(step)
		for _, ev := range res.Events {
			out = append(out, detect.Entry{Index: int64(len(out)), Data: bytes.Clone(ev.JSON)})
		}
	}
	return out, detect.Options{}
}

// longRun is a scenario of n steps over a few agents and resources (some
// read-shared), with time moving forward in short and lease-scale steps,
// so that leases are granted, renewed, released, revoked and lapse.
func longRun(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	agents := []string{"did:web:a.example", "did:web:b.example", "did:web:c.example", "did:web:d.example", "did:web:e.example"}
	resources := []string{"lock:x", "lock:y", "file:q", "file:r"}
	modes := []string{"read", "read", "write", "delete", ""}
	var b strings.Builder
	b.WriteString(`{"rules":{"readShared":["file:"]},"steps":[`)
	now := int64(1000)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if rng.IntN(20) == 0 {
			now += int64(20000 + rng.IntN(15000))
		} else {
			now += int64(rng.IntN(2000))
		}
		a := agents[rng.IntN(len(agents))]
		r := resources[rng.IntN(len(resources))]
		at := `{"atMs":` + strconv.FormatInt(now, 10)
		switch p := rng.IntN(100); {
		case p < 60:
			b.WriteString(at + `,"op":"acquire","resource":"` + r + `","actorDid":"` + a + `"`)
			if m := modes[rng.IntN(len(modes))]; m != "" {
				b.WriteString(`,"mode":"` + m + `"`)
			}
			b.WriteByte('}')
		case p < 85:
			b.WriteString(at + `,"op":"release","resource":"` + r + `","actorDid":"` + a + `"}`)
		case p < 92:
			b.WriteString(at + `,"op":"tick"}`)
		case p < 96:
			b.WriteString(at + `,"op":"suspend","actorDid":"` + a + `"}`)
		default:
			b.WriteString(at + `,"op":"resume","actorDid":"` + a + `"}`)
		}
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// TestNothingInKernelRuns: the kernel's own events, from the seeded
// random scenarios and from long runs, hold no finding.
func TestNothingInKernelRuns(t *testing.T) {
	kinds := map[string]int{}
	check := func(name string, scen []byte) {
		ents, opt := events(t, scen)
		for _, e := range ents {
			ev, err := detect.ParseEvent(e.Data)
			if err != nil {
				t.Fatalf("%s: the kernel's event %s does not parse: %v", name, e.Data, err)
			}
			kinds[ev.Type]++
			if strings.HasPrefix(ev.Type, "coordination.") && ev.Class == "" {
				t.Fatalf("%s: the kernel's event %s has no class", name, e.Data)
			}
		}
		if fs := run(t, ents, opt); len(fs) > 0 {
			t.Fatalf("%s: a clean kernel run has findings:\n%s", name, texts(fs))
		}
	}
	for seed := range int64(2000) {
		check("scenario.Random("+strconv.FormatInt(seed, 10)+")", scenario.Random(seed))
	}
	for seed := range uint64(5) {
		check("longRun("+strconv.FormatUint(seed, 10)+")", longRun(seed, 20000))
	}
	for _, k := range []string{detect.TypeLease, detect.TypeRenew, detect.TypeRelease, detect.TypeExpire, detect.TypeRevoke} {
		if kinds[k] < 100 {
			t.Errorf("the runs gave only %d %s events: too few to mean anything", kinds[k], k)
		}
	}
}

// TestFindsWhatIsTakenAway: dropping an end event from a clean run that
// another grant followed makes the lives overlap, and the detector says
// so, citing that other grant.
func TestFindsWhatIsTakenAway(t *testing.T) {
	ents, opt := events(t, longRun(7, 3000))
	found := 0
	for i, e := range ents {
		ev, _ := detect.ParseEvent(e.Data)
		if ev.Type != detect.TypeRelease || !strings.HasPrefix(ev.Resource, "lock:") {
			continue
		}
		// the next grant on the same resource, by another agent, before
		// the released lease would have expired
		for _, later := range ents[i+1:] {
			nv, _ := detect.ParseEvent(later.Data)
			if nv.Resource != ev.Resource || nv.Type != detect.TypeLease {
				continue
			}
			if nv.ActorDid != ev.ActorDid && nv.AtMs < ev.ExpiresAtMs {
				cut := slices.Delete(slices.Clone(ents), i, i+1)
				fs := run(t, cut, opt)
				if !slices.ContainsFunc(fs, func(f detect.Finding) bool {
					return f.Kind == detect.KindOverlap && f.B.Entry == later.Index && f.A.LeaseID == ev.LeaseID
				}) {
					t.Fatalf("without entry %d (%s), the grant at entry %d overlaps it; found:\n%s", e.Index, e.Data, later.Index, texts(fs))
				}
				found++
			}
			break
		}
		if found == 20 {
			break
		}
	}
	if found < 5 {
		t.Fatalf("only %d releases followed by another's grant in the run", found)
	}
}

func TestFindingAppendJSONIsEncodingJSONs(t *testing.T) {
	f := detect.Finding{Detector: "lease-overlap", Kind: "overlap", Resource: `lock:"q"`, Class: "exclusive", AtMs: 5,
		A: detect.Side{LeaseID: "lease_a", Resource: "lock:x", ActorDid: "did:web:a", Mode: "write", Fence: 1, Entry: 2, GrantEntry: -1},
		B: detect.Side{LeaseID: "lease_b", Resource: "lock:x", ActorDid: "did:web:b", Mode: "read", Fence: 3, Entry: 4, GrantEntry: 4}, Text: "two\nlines"}
	want, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.AppendJSON(nil); string(got) != string(want) {
		t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
	}
	rules, err := kernel.ParseRules([]byte(`{"readShared":["file:"]}`))
	if err != nil {
		t.Fatal(err)
	}
	o := detect.OptionsFor(rules)
	if o.ClassOf("file:a") != detect.ClassReadShared || o.ClassOf("lock:a") != detect.ClassExclusive {
		t.Fatal("OptionsFor")
	}
}

// TestListJSONIsEncodingJSONs: the detectors' list, which both hosts
// answer as it is, is what encoding/json writes for it, ok first.
func TestListJSONIsEncodingJSONs(t *testing.T) {
	want, err := json.Marshal(struct {
		OK        bool              `json:"ok"`
		Detectors []detect.Detector `json:"detectors"`
	}{true, detect.Detectors()})
	if err != nil {
		t.Fatal(err)
	}
	if got := detect.ListJSON(); string(got) != string(want) {
		t.Fatalf("ListJSON:\n got %s\nwant %s", got, want)
	}
}

// TestRunEvent pins the detection.run entry's bytes (docs/DETECTION.md),
// which both hosts record.
func TestRunEvent(t *testing.T) {
	for _, c := range []struct {
		cases []string
		want  string
	}{
		{nil, `{"type":"detection.run","atMs":5,"detector":"lease-overlap","treeSize":9,"findings":0,"cases":[]}`},
		{[]string{"case_1", "case_2"}, `{"type":"detection.run","atMs":5,"detector":"lease-overlap","treeSize":9,"findings":2,"cases":["case_1","case_2"]}`},
	} {
		if got := string(detect.RunEvent(5, "lease-overlap", 9, len(c.cases), c.cases)); got != c.want {
			t.Fatalf("RunEvent:\n got %s\nwant %s", got, c.want)
		}
	}
}
