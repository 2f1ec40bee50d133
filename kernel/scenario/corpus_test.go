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
		Events []json.RawMessage `json:"events"`
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
		out, err := scenario.Replay(kernel.Native, in)
		if err != nil {
			t.Errorf("%s: replay: %v", name, err)
			continue
		}
		var tr transcript
		if err := json.Unmarshal(out, &tr); err != nil {
			t.Errorf("%s: transcript is not JSON: %v", name, err)
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

// TestCorpusReferenceExamples checks that the four reference examples exist
// and show what they are named for.
func TestCorpusReferenceExamples(t *testing.T) {
	reasons := func(name string) []string {
		t.Helper()
		in, err := os.ReadFile(filepath.Join(corpusDir, name+".json"))
		if err != nil {
			t.Fatalf("reference example %s: %v", name, err)
		}
		out, err := scenario.Replay(kernel.Native, in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var tr transcript
		if err := json.Unmarshal(out, &tr); err != nil {
			t.Fatal(err)
		}
		var rs []string
		for _, s := range tr.Steps {
			if s.Answer.OK {
				rs = append(rs, "ok")
			} else {
				rs = append(rs, s.Answer.Reason)
			}
		}
		return rs
	}
	has := func(rs []string, want string) int {
		n := 0
		for _, r := range rs {
			if r == want {
				n++
			}
		}
		return n
	}
	for _, name := range referenceExamples {
		rs := reasons(name)
		switch name {
		case "two-release-agents":
			if has(rs, "lease_held") == 0 || rs[0] != "ok" {
				t.Errorf("%s: want a grant then lease_held, got %v", name, rs)
			}
		case "crashed-holder":
			if has(rs, "lease_held") == 0 || has(rs, "ok") < 2 {
				t.Errorf("%s: want a grant, a refusal and a later grant, got %v", name, rs)
			}
		case "breaking-a-deadlock":
			if has(rs, "deadlock") != 1 {
				t.Errorf("%s: want exactly one deadlock, got %v", name, rs)
			}
		case "thundering-herd":
			if has(rs, "lease_held") < 49 {
				t.Errorf("%s: want at least 49 lease_held refusals, got %d", name, has(rs, "lease_held"))
			}
		}
	}
}
