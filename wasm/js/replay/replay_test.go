package replay

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// same checks that Replay agrees with kernel/scenario: the same transcript,
// or an error from both.
func same(t *testing.T, in []byte) {
	t.Helper()
	want, werr := scenario.Replay(kernel.Native, in)
	got, gerr := Replay(in)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("input %q:\nkernel/scenario error: %v\nreplay error: %v", in, werr, gerr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("input %q:\nkernel/scenario:\n%s\nreplay:\n%s", in, want, got)
	}
	if gerr != nil && !strings.HasPrefix(gerr.Error(), "scenario: ") {
		t.Fatalf("input %q: error %q does not start with scenario:", in, gerr)
	}
}

const step = `{"atMs":1000,"op":"acquire","resource":"lock:a","actorDid":"did:web:acme.example:agent:a"}`

// edges are inputs where encoding/json's rules matter.
var edges = []string{
	``, ` `, `null`, ` null `, `true`, `1`, `"x"`, `[]`, `{}`, `{"steps":null}`,
	`{"steps":[]}`, `{"steps":[]}]`, `{"steps":[]}}`, `{"steps":[]} ,`, `{"steps":[]} x`, `{"steps":[]}{}`,
	`{"steps":[]}` + "\n\t\r ", `{"steps":[]} ]]]`, `{"steps":[],}`, `{"steps":[1,]}`, `{"steps":[1 2]}`,
	`{"steps":{}}`, `{"steps":"x"}`, `{"steps":1}`, `{"steps":true}`,
	`{"STEPS":[` + step + `]}`, `{"Steps":[]}`, `{"ſteps":[]}`, `{"\u0073teps":[]}`, `{"st\u0065ps":[` + step + `]}`,
	`{"steps":[` + step + `],"steps":null}`, `{"steps":null,"steps":[` + step + `]}`, `{"steps":[1],"steps":[]}`,
	`{"rules":null,"steps":[]}`, `{"rules":{"readShared":["file:"]},"steps":[]}`, `{"RULES":{"bogus":1},"steps":[]}`,
	`{"rules":{"bogus":1},"rules":null,"steps":[]}`, `{"rules":[],"steps":[]}`, `{"rules":1,"steps":[]}`, `{"rules":"","steps":[]}`,
	`{"title":"t","description":"d","steps":[]}`, `{"title":null,"steps":[]}`, `{"title":1,"steps":[]}`, `{"TITLE":"x","Description":"y","steps":[]}`,
	`{"description":[],"steps":[]}`, `{"extra":1,"steps":[]}`, `{"steps":[],"extra":null}`, `{"":1,"steps":[]}`,
	`{"steps":[` + step + `,` + step + `]}`, `{"steps":[ ` + step + ` , 1, "x", null, [], {}, true ]}`,
	`{"steps":[{"ATMS":5,"OP":"tick"}]}`, `{"steps":[{"atMs":5,"atMs":6,"op":"tick","op":"wait"}]}`,
	`{"steps":[{"atMs": 1e3 ,"op": "tick" }]}`, `{"steps":[{"atMs":[1, 2, {"a" : "b c"}],"op":{"x" : [ ]}}]}`,
	`{"steps":[{"atMs":1,"op":"ti\u0063k"}]}`, `{"steps":[{"atMs":1,"op":"tick\"  \\ "}]}`, `{"steps":[{"aTmS":-0.5e-3,"Op":null}]}`,
	`{"steps":[{"atMs":1,"op":"tick"` + "\n}" + `]}`, `{"steps":[{"atMs":01}]}`, `{"steps":[{"atMs":-}]}`, `{"steps":[{"atMs":1.}]}`,
	`{"steps":[{"atMs":1e}]}`, `{"steps":["a` + "\x01" + `"]}`, `{"steps":["\x"]}`, `{"steps":["\u12"]}`, `{"steps":["` + "\xff\xfe" + `"]}`,
	`{"st` + "\xff" + `eps":[]}`, `{"steps":[{"a\ud800tMs":1}]}`, `{"steps":[{"\ud83d\ude00":1,"atMs":2}]}`,
	`{"steps":[tru]}`, `{"steps":[nul]}`, `{"steps":[falsey]}`, `{"steps"[]}`, `{"steps":[]`, `{"steps":[`, `{steps:[]}`,
	"\ufeff" + `{"steps":[]}`, `{"steps":[{"atMs":1,"op":"acquire","resource":"lock:x","actorDid":"did:web:acme.example:agent:a","mode":"read"}]}`,
	`{"steps":[` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `]}`,
	`{"steps":[` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `]}`,
	`{"steps":[` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `]}`,
}

func TestEdges(t *testing.T) {
	for _, in := range edges {
		same(t, []byte(in))
	}
}

func TestCorpus(t *testing.T) {
	files, err := filepath.Glob("../../../kernel/testdata/scenarios/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus scenarios (%v)", err)
	}
	for _, f := range files {
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		same(t, in)
	}
}

func TestRandom(t *testing.T) {
	for seed := range int64(2000) {
		same(t, scenario.Random(seed))
	}
}

func TestTooManySteps(t *testing.T) {
	in := []byte(`{"steps":[` + strings.Repeat("1,", MaxSteps) + `1]}`)
	same(t, in)
}

func FuzzReplay(f *testing.F) {
	for _, in := range edges {
		f.Add([]byte(in))
	}
	for seed := range int64(20) {
		f.Add(scenario.Random(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		same(t, in)
	})
}
