package drill_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/drill"
)

// plane is an in-memory plane on a clock of its own: a native machine per
// workspace, its alarms fired as the clock passes them.
type plane struct {
	now  int64
	ws   map[string]*space // by key
	made int
	// wrongAt, when set, answers that command (1 = the first sent) with
	// another body, as a broken plane would.
	wrongAt, sent int
	// noAlarms keeps the alarms from firing.
	noAlarms bool
	// restarts makes the workspace again before each alarm, as a Durable
	// Object is: it steps cancel {} first (which lapses what was due).
	restarts bool
}

type space struct {
	m       *kernel.Machine
	tape    []drill.TapeEntry
	log     []drill.Record
	dropped bool
}

func (p *plane) NowMs() int64 { return p.now }

func (p *plane) SleepUntil(_ context.Context, ms int64) error {
	for _, s := range p.ws {
		for !p.noAlarms && !s.dropped {
			at, ok := s.m.NextAlarm()
			if !ok || at > ms {
				break
			}
			p.now = max(p.now, at)
			if p.restarts {
				s.apply(kernel.OpCancel, p.now, []byte("{}"))
				p.now++
			}
			s.apply(kernel.OpTick, p.now, nil)
		}
	}
	p.now = max(p.now, ms)
	return nil
}

func (s *space) apply(op kernel.Op, now int64, body []byte) kernel.Result {
	r := s.m.ApplyJSON(op, now, body)
	s.tape = append(s.tape, drill.TapeEntry{Op: op, NowMs: now, Body: body, Status: r.Status, Answer: r.Answer,
		Events: kernel.AppendEvents(nil, r.Events), Changed: r.Changed})
	if r.Changed {
		s.log = append(s.log, drill.Record{Op: string(op), NowMs: now, Body: body, Status: r.Status})
	}
	return r
}

func (p *plane) Send(_ context.Context, r drill.Request, key string) (int, []byte, error) {
	s := p.ws[strings.TrimPrefix(key, "op:")]
	if s == nil || s.dropped {
		return 401, nil, nil
	}
	rt, ok := api.LeaseRoute(r.Path)
	if !ok || rt.Method != r.Method || r.Operator != strings.HasPrefix(key, "op:") {
		return 0, nil, errors.New("bad request " + r.Method + " " + r.Path)
	}
	body := r.Body
	if body == nil {
		q, err := api.ParseQuery(rt, r.RawQuery)
		if err != nil {
			return 0, nil, err
		}
		if body, err = api.WaitBody(q); err != nil {
			return 0, nil, err
		}
	}
	p.sent++
	p.now++
	res := s.apply(rt.Op, p.now, body)
	if p.sent == p.wrongAt {
		return res.Status, []byte(`{"ok":true,"wrong":true}`), nil
	}
	return res.Status, res.Answer, nil
}

func (p *plane) NewWorkspace(_ context.Context, suffix string, rules []byte) (drill.Workspace, error) {
	rs, err := kernel.ParseRules(rules)
	if err != nil {
		return nil, err
	}
	p.made++
	s := &space{m: kernel.New(rs)}
	p.ws[suffix] = s
	return ws{s, suffix}, nil
}

type ws struct {
	s   *space
	key string
}

func (w ws) Keys() (string, string) { return w.key, "op:" + w.key }
func (w ws) Tape(_ context.Context, from int) ([]drill.TapeEntry, error) {
	return append([]drill.TapeEntry(nil), w.s.tape[from:]...), nil
}
func (w ws) Durable(context.Context) ([]drill.Record, error) { return w.s.log, nil }
func (w ws) Drop(context.Context) error                      { w.s.dropped = true; return nil }

func runAll(t *testing.T, p *plane) []drill.Result {
	t.Helper()
	p.ws = map[string]*space{}
	calls := 0
	rs, err := drill.Run(context.Background(), p, 7, nil, func(sofar []drill.Result) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(drill.Names) || calls != len(drill.Names) || p.made != len(drill.Names) {
		t.Fatalf("%d results, %d progress calls, %d workspaces; want %d of each", len(rs), calls, p.made, len(drill.Names))
	}
	for _, s := range p.ws {
		if !s.dropped {
			t.Error("a drill workspace was not dropped")
		}
	}
	return rs
}

func TestEveryDrillPassesOnAFaithfulPlane(t *testing.T) {
	for _, r := range runAll(t, &plane{}) {
		if !r.Passed || r.Step != nil {
			t.Errorf("%s: %s (expected %s, live %s)", r.Name, r.Detail, r.Expected, r.Live)
		}
	}
}

func TestAHostsOwnCancelIsReplayedToo(t *testing.T) {
	cancels := 0
	for _, r := range runAll(t, &plane{restarts: true}) {
		if !r.Passed {
			t.Errorf("%s: %s (expected %s, live %s)", r.Name, r.Detail, r.Expected, r.Live)
		}
		if strings.Contains(r.Detail, "of the host's own cancels") {
			cancels++
		}
	}
	if cancels == 0 {
		t.Fatal("no drill saw a restart's cancel")
	}
}

func TestAWrongAnswerFailsItsDrill(t *testing.T) {
	rs := runAll(t, &plane{wrongAt: 2})
	if rs[0].Passed || rs[0].Step == nil || *rs[0].Step != 1 || !strings.Contains(rs[0].Live, `"wrong":true`) {
		t.Fatalf("the first drill's second answer was wrong, got %+v", rs[0])
	}
	for _, r := range rs[1:] {
		if !r.Passed {
			t.Errorf("%s failed: %s", r.Name, r.Detail)
		}
	}
}

func TestAlarmsThatNeverFireFailTheTick(t *testing.T) {
	rs := runAll(t, &plane{noAlarms: true})
	byName := map[string]drill.Result{}
	for _, r := range rs {
		byName[r.Name] = r
	}
	if r := byName["crashed-holder"]; r.Passed || !strings.Contains(r.Detail, "did not fire") {
		t.Fatalf("crashed-holder waits for an alarm; got %+v", r)
	}
}

func TestSelectAndResultsJSON(t *testing.T) {
	some, err := drill.Select([]string{"deadlock", "two-agents-one-slot"})
	if err != nil || len(some) != 2 || some[0].Name != "two-agents-one-slot" {
		t.Fatalf("Select: %v %d", err, len(some))
	}
	if _, err := drill.Select([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("an unknown drill: %v", err)
	}
	step := 3
	rs := []drill.Result{{Name: "a", Passed: true, Detail: `ok "quoted"`}, {Name: "b", Detail: "x", Step: &step, Expected: "e", Live: "l"}}
	want, _ := json.Marshal(rs)
	if got := drill.ResultsJSON(rs); string(got) != string(want) {
		t.Fatalf("ResultsJSON:\n got %s\nwant %s", got, want)
	}
	if got := drill.ResultsJSON(nil); string(got) != "[]" {
		t.Fatalf("ResultsJSON(nil) = %s", got)
	}
	if drill.Passed(nil) || !drill.Passed(rs[:1]) || drill.Passed(rs) {
		t.Fatal("Passed")
	}
}

// TestRunEvent pins the drill.run entry's bytes (docs/DETECTION.md), which
// both hosts record: a failed drill's detail only.
func TestRunEvent(t *testing.T) {
	got := string(drill.RunEvent("run_7", 100, 130, false, []drill.Result{{Name: "deadlock", Passed: true, Detail: "ok"}, {Name: "crashed-holder", Detail: "no \"expire\""}}))
	want := `{"type":"drill.run","atMs":130,"runId":"run_7","startedAtMs":100,"passed":false,"drills":[{"name":"deadlock","passed":true},{"name":"crashed-holder","passed":false,"detail":"no \"expire\""}]}`
	if got != want {
		t.Fatalf("RunEvent:\n got %s\nwant %s", got, want)
	}
}
