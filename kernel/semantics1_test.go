package kernel_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// TestSemantics1ReplaysLikeRelease010 replays scenarios of leaseplane
// 0.1.0's corpus (kernel/testdata/semantics1, with the transcripts 0.1.0
// wrote) on machines set to semantics 1: every acquire and release answers
// as 0.1.0 did (the same verdicts, lease ids and fences; the human error
// text aside), which is what lets a host replay a log 0.1.0 wrote.
func TestSemantics1ReplaysLikeRelease010(t *testing.T) {
	files, _ := filepath.Glob("testdata/semantics1/*.json")
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata/semantics1")
	}
	for _, file := range files {
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		golden, err := os.ReadFile(strings.TrimSuffix(file, ".json") + ".golden")
		if err != nil {
			t.Fatal(err)
		}
		var old struct {
			Steps []struct {
				Op     string         `json:"op"`
				Answer map[string]any `json:"answer"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(golden, &old); err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		rules, _ := kernel.ParseRules(s.Rules)
		m := kernel.New(rules)
		if err := m.SetSemantics(1); err != nil {
			t.Fatal(err)
		}
		for i, st := range s.Steps {
			r := m.StepJSON(st)
			if op := old.Steps[i].Op; op != "acquire" && op != "release" {
				continue
			}
			var got map[string]any
			json.Unmarshal(r.Answer, &got)
			want := old.Steps[i].Answer
			delete(got, "error")
			delete(want, "error")
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s step %d: semantics 1 answered\n%s\n0.1.0 answered\n%v", filepath.Base(file), i, r.Answer, want)
			}
		}
		if err := m.SetSemantics(kernel.Semantics); err != nil {
			t.Fatal(err)
		}
		if err := m.CheckInvariants(); err != nil {
			t.Fatalf("%s: after moving to semantics %d: %v", file, kernel.Semantics, err)
		}
	}
}

func TestSetSemantics(t *testing.T) {
	m := kernel.New(kernel.Rules{})
	m.StepJSON([]byte(`{"atMs":1,"op":"acquire","resource":"r","actorDid":"did:x:a"}`))
	if err := m.SetSemantics(1); err == nil {
		t.Error("semantics 1 accepted on a machine that granted under semantics 2")
	}
	if err := m.SetSemantics(4); err == nil {
		t.Error("semantics 4 accepted")
	}
	if err := m.SetSemantics(2); err != nil {
		t.Error(err)
	}
	if err := m.SetSemantics(kernel.Semantics); err != nil {
		t.Error(err)
	}
}
