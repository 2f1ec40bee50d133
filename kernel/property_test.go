package kernel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// view is the state as the snapshot shows it, for brute-force checks.
type view struct {
	Rules struct {
		ReadShared []string `json:"readShared"`
	} `json:"rules"`
	NowMs     int64 `json:"nowMs"`
	Resources []struct {
		Name   string `json:"name"`
		Fence  int64  `json:"fence"`
		Leases []struct {
			Holder      string `json:"holder"`
			Mode        string `json:"mode"`
			Fence       int64  `json:"fence"`
			ExpiresAtMs int64  `json:"expiresAtMs"`
		} `json:"leases"`
		Waiters []struct {
			ActorDid  string `json:"actorDid"`
			Mode      string `json:"mode"`
			LastAskMs int64  `json:"lastAskMs"`
		} `json:"waiters"`
	} `json:"resources"`
	Agents []struct {
		Did       string `json:"did"`
		Suspended bool   `json:"suspended"`
	} `json:"agents"`
}

func viewOf(t *testing.T, m *kernel.Machine) view {
	t.Helper()
	var v view
	if err := json.Unmarshal(m.Snapshot(), &v); err != nil {
		t.Fatalf("snapshot does not parse: %v", err)
	}
	return v
}

func (v view) shared(res string) bool {
	for _, p := range v.Rules.ReadShared {
		if strings.HasPrefix(res, p) {
			return true
		}
	}
	return false
}

func conflict(shared bool, asked, held string) bool {
	return !shared || asked != "read" || held != "read"
}

// expectAcquire decides an acquire by brute force on the state v (taken
// before the command): lapse what is due at now, then grant, deadlock
// (by transitive closure of the wait-for graph) or lease_held.
func expectAcquire(v view, now int64, res, actor, mode string) (reason string, holders []string) {
	if mode == "" {
		mode = "write"
	}
	for _, a := range v.Agents {
		if a.Did == actor && a.Suspended {
			return "suspended", nil
		}
	}
	type edge struct{ from, to string }
	reach := map[edge]bool{}
	agents := map[string]bool{}
	var conflicting []string
	for _, r := range v.Resources {
		shared := v.shared(r.Name)
		for _, l := range r.Leases {
			if l.ExpiresAtMs <= now {
				continue
			}
			agents[l.Holder] = true
			if r.Name == res && l.Holder != actor && conflict(shared, mode, l.Mode) {
				conflicting = append(conflicting, l.Holder)
			}
			for _, w := range r.Waiters {
				if w.LastAskMs+kernel.WaiterTTLMs <= now || w.ActorDid == l.Holder {
					continue
				}
				if conflict(shared, w.Mode, l.Mode) {
					reach[edge{w.ActorDid, l.Holder}] = true
					agents[w.ActorDid] = true
				}
			}
		}
	}
	if len(conflicting) == 0 {
		return "grant", nil
	}
	agents[actor] = true
	// Floyd–Warshall closure: fine for the handful of agents here.
	for k := range agents {
		for i := range agents {
			if !reach[edge{i, k}] {
				continue
			}
			for j := range agents {
				if reach[edge{k, j}] {
					reach[edge{i, j}] = true
				}
			}
		}
	}
	for _, h := range conflicting {
		if reach[edge{h, actor}] {
			return "deadlock", conflicting
		}
	}
	return "lease_held", conflicting
}

type answer struct {
	OK        bool     `json:"ok"`
	Reason    string   `json:"reason"`
	Holder    string   `json:"holder"`
	Holders   []string `json:"holders"`
	WaitingOn string   `json:"waitingOn"`
	Cycle     []string `json:"cycle"`
	Stampede  *struct {
		Admitted []string `json:"admitted"`
		WaitMs   int64    `json:"waitMs"`
	} `json:"stampede"`
	Lease *struct {
		ID    string `json:"id"`
		Fence int64  `json:"fence"`
	} `json:"lease"`
}

// checkCycle verifies a deadlock's cycle link by link against the state
// before the command.
func checkCycle(v view, now int64, actor, mode string, c []string) error {
	if len(c) < 4 || len(c)%2 != 0 || c[0] != actor {
		return fmt.Errorf("cycle %v: want actor, resource, holder, resource, ...", c)
	}
	holds := func(agent, res, askedMode string) bool {
		for _, r := range v.Resources {
			if r.Name != res {
				continue
			}
			for _, l := range r.Leases {
				if l.Holder == agent && l.ExpiresAtMs > now && conflict(v.shared(res), askedMode, l.Mode) {
					return true
				}
			}
		}
		return false
	}
	waitMode := func(agent, res string) (string, bool) {
		for _, r := range v.Resources {
			if r.Name != res {
				continue
			}
			for _, w := range r.Waiters {
				if w.ActorDid == agent && w.LastAskMs+kernel.WaiterTTLMs > now {
					return w.Mode, true
				}
			}
		}
		return "", false
	}
	if mode == "" {
		mode = "write"
	}
	asked := mode
	for i := 1; i < len(c); i += 2 {
		res := c[i]
		next := actor
		if i+1 < len(c) {
			next = c[i+1]
		}
		if !holds(next, res, asked) {
			return fmt.Errorf("cycle %v: %s does not hold %s against mode %s", c, next, res, asked)
		}
		if i+1 < len(c) {
			m, ok := waitMode(next, c[i+2])
			if !ok {
				return fmt.Errorf("cycle %v: %s does not wait on %s", c, next, c[i+2])
			}
			asked = m
		}
	}
	return nil
}

// TestProperties replays random scenarios step by step and checks every
// answer against brute force and every state against the invariants.
func TestProperties(t *testing.T) {
	n := int64(2000)
	if testing.Short() {
		n = 300
	}
	for seed := int64(1); seed <= n; seed++ {
		checkSeed(t, seed)
		if t.Failed() {
			t.Fatalf("seed %d failed; scenario: %s", seed, scenario.Random(seed))
		}
	}
}

func checkSeed(t *testing.T, seed int64) {
	s, err := scenario.Parse(scenario.Random(seed))
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := kernel.ParseRules(s.Rules)
	checkSteps(t, rules, s.Steps)
}

// checkSteps applies steps one at a time, checking each answer against
// brute force and the state against the invariants.
func checkSteps(t *testing.T, rules kernel.Rules, steps [][]byte) {
	m := kernel.New(rules)
	maxFence := map[string]int64{}
	for i, raw := range steps {
		beforeBytes := m.Snapshot()
		before := viewOf(t, m)
		cmd, decErr := kernel.DecodeStep(raw)
		res := m.Step(raw)
		if !json.Valid(res.Answer) || !json.Valid(res.Events) {
			t.Fatalf("step %d: invalid JSON out: %s %s", i, res.Answer, res.Events)
		}
		if err := m.CheckInvariants(); err != nil {
			t.Fatalf("step %d (%s): %v", i, raw, err)
		}
		if decErr != nil {
			if res.Status != 400 || !bytes.Contains(res.Answer, []byte(`"invalid_request"`)) || res.Changed {
				t.Fatalf("step %d: invalid step answered %d %s (changed %v)", i, res.Status, res.Answer, res.Changed)
			}
			if after := m.Snapshot(); !bytes.Equal(after, beforeBytes) {
				t.Fatalf("step %d: invalid step changed the state", i)
			}
			continue
		}
		now := max(before.NowMs, cmd.NowMs)
		var a answer
		if err := json.Unmarshal(res.Answer, &a); err != nil {
			t.Fatal(err)
		}
		after := viewOf(t, m)
		for _, r := range after.Resources {
			if r.Fence < maxFence[r.Name] {
				t.Fatalf("step %d: fence of %s went down", i, r.Name)
			}
			maxFence[r.Name] = r.Fence
		}
		if cmd.Op != kernel.OpAcquire {
			continue
		}
		want, holders := expectAcquire(before, now, cmd.Resource, cmd.ActorDid, cmd.Mode)
		got := a.Reason
		if a.OK {
			got = "grant"
		}
		if got != want {
			t.Fatalf("step %d %s: got %s, brute force says %s\nanswer %s", i, raw, got, want, res.Answer)
		}
		switch want {
		case "lease_held", "deadlock":
			if strings.Join(a.Holders, ",") != strings.Join(holders, ",") && want == "lease_held" {
				t.Fatalf("step %d: holders %v, want %v", i, a.Holders, holders)
			}
		}
		if want == "deadlock" {
			if err := checkCycle(before, now, cmd.ActorDid, cmd.Mode, a.Cycle); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if a.Holder != a.Cycle[2] || a.WaitingOn != a.Cycle[3] {
				t.Fatalf("step %d: holder/waitingOn %s/%s do not open the cycle %v", i, a.Holder, a.WaitingOn, a.Cycle)
			}
		}
		if want == "lease_held" {
			var queue []string
			for _, r := range after.Resources {
				if r.Name == cmd.Resource {
					for _, w := range r.Waiters {
						queue = append(queue, w.ActorDid)
					}
				}
			}
			if a.Stampede.WaitMs != int64(min(800, 25<<min(len(queue), 10))) {
				t.Fatalf("step %d: waitMs %d for %d waiters", i, a.Stampede.WaitMs, len(queue))
			}
			admitted := queue[:min(len(queue), kernel.MaxAdmitted)]
			if strings.Join(a.Stampede.Admitted, ",") != strings.Join(admitted, ",") {
				t.Fatalf("step %d: admitted %v, queue %v", i, a.Stampede.Admitted, queue)
			}
		}
	}
}
