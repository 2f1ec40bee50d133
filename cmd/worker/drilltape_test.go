package main

import (
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel/api"
)

func TestParseTapeAndLog(t *testing.T) {
	tape, err := parseTape([]byte(`[{"op":"acquire","nowMs":5,"body":"AQI=","status":200,"answer":{"ok":true},"events":[{"type":"x"}],"changed":true},` +
		`{"op":"tick","nowMs":9,"body":"","status":200,"answer":null,"events":[],"changed":false}]`))
	if err != nil || len(tape) != 2 {
		t.Fatalf("%d entries, %v", len(tape), err)
	}
	a, b := tape[0], tape[1]
	if a.Op != "acquire" || a.NowMs != 5 || string(a.Body) != "\x01\x02" || a.Status != 200 || string(a.Answer) != `{"ok":true}` ||
		string(a.Events) != `[{"type":"x"}]` || !a.Changed {
		t.Fatalf("first entry: %+v", a)
	}
	if b.Op != "tick" || len(b.Body) != 0 || string(b.Answer) != "null" || b.Changed {
		t.Fatalf("second entry: %+v", b)
	}
	for _, bad := range []string{`{}`, `[{"nowMs":"x"}]`, `[{"body":"!!"}]`} {
		if _, err := parseTape([]byte(bad)); err == nil {
			t.Errorf("parseTape(%s) took it", bad)
		}
	}
	log, err := parseLog([]byte(`[{"op":"release","nowMs":7,"body":"AQI="}]`))
	if err != nil || len(log) != 1 || log[0].Op != "release" || log[0].NowMs != 7 || string(log[0].Body) != "\x01\x02" || log[0].Status != 0 {
		t.Fatalf("parseLog: %+v %v", log, err)
	}
}

func TestDrillRouteBodies(t *testing.T) {
	for _, ok := range []string{"", " ", "{}"} {
		if err := emptyBody([]byte(ok)); err != nil {
			t.Errorf("emptyBody(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{`{"x":1}`, `[]`, `nope`} {
		if err := emptyBody([]byte(bad)); err == nil {
			t.Errorf("emptyBody(%q) took it", bad)
		}
	}
	if id, msg := cancelID([]byte(`{"id":"run_12"}`)); id != 12 || msg != "" {
		t.Fatalf("cancelID: %d %q", id, msg)
	}
	for body, want := range map[string]string{`{}`: "id is required", `{"id":"run_0"}`: "run_N", `{"id":7}`: "must be a string",
		`{"id":"run_1","x":1}`: `unknown field "x"`, `x`: "must be a JSON object"} {
		if _, msg := cancelID([]byte(body)); !strings.Contains(msg, want) {
			t.Errorf("cancelID(%s) = %q, want it to say %q", body, msg, want)
		}
	}
	for raw, want := range map[string]int{"": 20, "limit=1": 1, "limit=1000": 1000} {
		q, err := api.ParseQuery(api.DrillsRuns, raw)
		if err != nil {
			t.Fatal(err)
		}
		if n, msg := drillsLimit(q); n != want || msg != "" {
			t.Errorf("limit %q: %d %q", raw, n, msg)
		}
	}
	for _, raw := range []string{"limit=0", "limit=1001", "limit=x"} {
		q, _ := api.ParseQuery(api.DrillsRuns, raw)
		if _, msg := drillsLimit(q); msg == "" {
			t.Errorf("limit %q taken", raw)
		}
	}
}

// TestRunnerProof pins the runner token's proof (drills.mjs computes the
// same with WebCrypto): HMAC-SHA256 under the ledger secret.
func TestRunnerProof(t *testing.T) {
	if got := runnerProof("ledger secret", "acme", "00ff"); got != "97a55ac4471997d668fd534632e25d705871d73ae3ce6b9bd693d4a089b4024c" {
		t.Fatalf("runnerProof = %s", got)
	}
	if runnerProof("other secret", "acme", "00ff") == runnerProof("ledger secret", "acme", "00ff") {
		t.Fatal("the proof does not depend on the secret")
	}
}
