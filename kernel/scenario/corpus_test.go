package scenario_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// update rewrites the golden transcripts from the kernel's current answers:
//
//	go test ./kernel/scenario -run TestCorpus -update
//
// Commit only diffs you can explain.
var update = flag.Bool("update", false, "rewrite kernel/testdata/scenarios/*.golden")

const corpusDir = "../testdata/scenarios"

// minCorpus is the least number of scenarios the corpus must hold.
const minCorpus = 40

// referenceExamples are the four examples every host shows; they must exist
// under these names.
var referenceExamples = []string{
	"two-release-agents",
	"crashed-holder",
	"breaking-a-deadlock",
	"thundering-herd",
}

func corpusFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestCorpus replays every scenario natively and compares the transcript
// with its golden file byte for byte.
func TestCorpus(t *testing.T) {
	files := corpusFiles(t)
	if len(files) < minCorpus {
		t.Errorf("corpus holds %d scenarios, want at least %d", len(files), minCorpus)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := scenario.Replay(kernel.Native, in)
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			golden := strings.TrimSuffix(file, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./kernel/scenario -run TestCorpus -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("transcript differs from %s:\n%s", golden, firstDiff(want, got))
			}
		})
	}
}

// firstDiff shows the first line where want and got differ.
func firstDiff(want, got []byte) string {
	wl := strings.Split(string(want), "\n")
	gl := strings.Split(string(got), "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n want: " + w + "\n  got: " + g
		}
	}
	return "(same lines, different bytes)"
}

// corpusMeta is what the corpus checks read from a scenario besides its
// steps.
type corpusMeta struct {
	Title       string            `json:"title"`
	Description string            `json:"description"`
	Steps       []json.RawMessage `json:"steps"`
}

// transcript is the part of a transcript the checks read.
type transcript struct {
	Steps []struct {
		Op     json.RawMessage `json:"op"`
		Answer struct {
			OK     bool   `json:"ok"`
			Reason string `json:"reason"`
		} `json:"answer"`
		Events  []json.RawMessage `json:"events"`
		Held    string            `json:"held"`
		Answers []struct {
			AskID  string `json:"askId"`
			Answer struct {
				OK     bool   `json:"ok"`
				Reason string `json:"reason"`
			} `json:"answer"`
		} `json:"answers"`
	} `json:"steps"`
	Trust map[string]float64 `json:"trust"`
}

// TestCorpusScenariosAreMeaningful checks that every scenario has a title
// and a description for people, at least one step, and something to show:
// a step that changes state or is refused (a scenario of empty waits proves
// nothing). Titles are unique, since the playground's menu lists them.
func TestCorpusScenariosAreMeaningful(t *testing.T) {
	titles := map[string]string{}
	for _, file := range corpusFiles(t) {
		name := filepath.Base(file)
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var meta corpusMeta
		if err := json.Unmarshal(in, &meta); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.TrimSpace(meta.Title) == "" || strings.TrimSpace(meta.Description) == "" {
			t.Errorf("%s: title and description are required (people read them in the playground)", name)
		}
		if other, dup := titles[meta.Title]; dup {
			t.Errorf("%s: title %q is also the title of %s", name, meta.Title, other)
		}
		titles[meta.Title] = name
		if len(meta.Steps) == 0 {
			t.Errorf("%s: no steps", name)
			continue
		}
		tr, ok := replayed(t, name, in)
		if !ok {
			continue
		}
		if len(tr.Steps) != len(meta.Steps) {
			t.Errorf("%s: transcript has %d steps, scenario %d", name, len(tr.Steps), len(meta.Steps))
		}
		interesting := false
		for _, s := range tr.Steps {
			if len(s.Events) > 0 || !s.Answer.OK {
				interesting = true
			}
		}
		if !interesting {
			t.Errorf("%s: no step emits an event or is refused", name)
		}
	}
}

// replayed is the transcript of scenario name (in) replayed natively; when
// the replay fails or its transcript does not decode, the test fails and
// ok is false.
func replayed(t *testing.T, name string, in []byte) (tr transcript, ok bool) {
	t.Helper()
	out, err := scenario.Replay(kernel.Native, in)
	if err != nil {
		t.Errorf("%s: replay: %v", name, err)
		return tr, false
	}
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Errorf("%s: transcript is not JSON: %v", name, err)
		return tr, false
	}
	return tr, true
}

// TestCorpusVerdicts checks that every scenario of the corpus (the four
// reference examples among them) has pinned verdicts and gives them.
func TestCorpusVerdicts(t *testing.T) {
	for _, name := range referenceExamples {
		if _, ok := verdicts[name]; !ok {
			t.Errorf("reference example %s has no pinned verdicts", name)
		}
	}
	for _, file := range corpusFiles(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		if _, ok := verdicts[name]; !ok {
			t.Errorf("scenario %s has no pinned verdicts in verdicts_test.go", name)
		}
	}
	for name, want := range verdicts {
		in, err := os.ReadFile(filepath.Join(corpusDir, name+".json"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		tr, ok := replayed(t, name, in)
		if !ok {
			continue
		}
		var got []string
		for _, s := range tr.Steps {
			// A step that made a held ask is "held"; the asks that ended
			// during a step follow its verdict, each as +verdict.
			v := s.Answer.Reason
			switch {
			case s.Held != "":
				v = "held"
			case s.Answer.OK:
				v = "ok"
			}
			for _, a := range s.Answers {
				if a.Answer.OK {
					v += "+ok"
				} else {
					v += "+" + a.Answer.Reason
				}
			}
			got = append(got, v)
		}
		if g := compressVerdicts(got); g != want {
			t.Errorf("%s: verdicts\n got: %s\nwant: %s", name, g, want)
		}
	}
}

// compressVerdicts writes verdicts as verdicts_test.go does: a run of n
// equal ones as verdict*n.
func compressVerdicts(v []string) string {
	var parts []string
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && v[j] == v[i] {
			j++
		}
		if j-i == 1 {
			parts = append(parts, v[i])
		} else {
			parts = append(parts, v[i]+"*"+strconv.Itoa(j-i))
		}
		i = j
	}
	return strings.Join(parts, " ")
}
