package kernel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// view is the state as the snapshot shows it, for brute-force checks.
type view struct {
	Rules struct {
		ReadShared []string `json:"readShared"`
		Limits     struct {
			Leases  int `json:"leases"`
			Waiters int `json:"waiters"`
			Agents  int `json:"agents"`
		} `json:"limits"`
	} `json:"rules"`
	NowMs     int64              `json:"nowMs"`
	Fence     int64              `json:"fence"`
	Trust     map[string]float64 `json:"trust"`
	Suspended []string           `json:"suspended"`
	Resources []viewResource     `json:"resources"`
}

type viewResource struct {
	Name   string `json:"name"`
	Leases []struct {
		Holder      string `json:"holder"`
		Mode        string `json:"mode"`
		Fence       int64  `json:"fence"`
		ExpiresAtMs int64  `json:"expiresAtMs"`
	} `json:"leases"`
	Waiters []viewWaiter `json:"waiters"`
}

type viewWaiter struct {
	ActorDid  string `json:"actorDid"`
	Mode      string `json:"mode"`
	LastAskMs int64  `json:"lastAskMs"`
	HeldAtMs  int64  `json:"heldAtMs"`
	WaitMs    int64  `json:"waitMs"`
	// ClaimUntilMs is when its claim ends, if it is admitted.
	ClaimUntilMs int64 `json:"claimUntilMs"`
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

// liveState is the state of a view at now, once what is due has lapsed:
// per resource its live leases (agent → mode, in grant order) and its live
// waiters in queue order.
type liveState struct {
	v       view
	now     int64
	leases  map[string][][2]string // resource → [holder, mode] in grant order
	waiters map[string][]viewWaiter
	trust2  map[string]int64 // trust in half points after the expiries
}

func live(v view, now int64) liveState {
	s := liveState{v: v, now: now, leases: map[string][][2]string{}, waiters: map[string][]viewWaiter{}, trust2: map[string]int64{}}
	for did, t := range v.Trust {
		s.trust2[did] = int64(t * 2)
	}
	for _, r := range v.Resources {
		for _, l := range r.Leases {
			if l.ExpiresAtMs > now {
				s.leases[r.Name] = append(s.leases[r.Name], [2]string{l.Holder, l.Mode})
			} else {
				s.trust2[l.Holder] -= 10
			}
		}
		for _, w := range r.Waiters {
			if w.LastAskMs+kernel.WaiterTTLMs > now {
				s.waiters[r.Name] = append(s.waiters[r.Name], w)
			}
		}
	}
	return s
}

func (s liveState) suspended(did string) bool {
	for _, d := range s.v.Suspended {
		if d == did {
			return true
		}
	}
	return false
}

// claimants are the waiters of res with a claim now: among the first 8,
// within waitMs + 1000 of their last lease_held answer.
func (s liveState) claimants(res string) []viewWaiter {
	var out []viewWaiter
	for i, w := range s.waiters[res] {
		if i < kernel.MaxAdmitted && s.now < w.ClaimUntilMs {
			out = append(out, w)
		}
	}
	return out
}

func (s liveState) holds(agent, res string) (string, bool) {
	for _, l := range s.leases[res] {
		if l[0] == agent {
			return l[1], true
		}
	}
	return "", false
}

func (s liveState) hasClaim(agent, res string) bool {
	for _, w := range s.claimants(res) {
		if w.ActorDid == agent {
			return true
		}
	}
	return false
}

// blocks lists the agents that block agent asking mode on res (the
// deadlock rule of docs/SEMANTICS.md): conflicting leases of others, and, when agent holds no
// lease there and has no claim there, conflicting claims of others.
func (s liveState) blocks(agent, res, mode string) []string {
	var out []string
	sh := s.v.shared(res)
	for _, l := range s.leases[res] {
		if l[0] != agent && conflict(sh, mode, l[1]) {
			out = append(out, l[0])
		}
	}
	if _, held := s.holds(agent, res); !held && !s.hasClaim(agent, res) {
		for _, w := range s.claimants(res) {
			if w.ActorDid != agent && conflict(sh, mode, w.Mode) {
				out = append(out, w.ActorDid)
			}
		}
	}
	return out
}

// remembered reports whether the kernel keeps did after the lapses.
func (s liveState) remembered(did string) bool {
	if s.trust2[did] != 0 || s.suspended(did) {
		return s.v.Trust != nil && hasKey(s.v.Trust, did)
	}
	for r := range s.leases {
		if _, ok := s.holds(did, r); ok {
			return true
		}
	}
	for _, ws := range s.waiters {
		for _, w := range ws {
			if w.ActorDid == did {
				return true
			}
		}
	}
	return false
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

func (s liveState) counts() (leases, waiters, agents int) {
	for _, ls := range s.leases {
		leases += len(ls)
	}
	for _, ws := range s.waiters {
		waiters += len(ws)
	}
	for did := range s.v.Trust {
		if s.remembered(did) {
			agents++
		}
	}
	return
}

// expectAcquire decides an acquire by brute force on the state v (taken
// before the command): lapse what is due at now, then renew, grant (with
// the claims of admitted waiters), deadlock (by transitive closure of the
// blocks graph), limit_exceeded or lease_held.
func expectAcquire(v view, now int64, res, actor, mode string) (reason string, holders, claimants []string) {
	s := live(v, now)
	if s.suspended(actor) {
		return "suspended", nil, nil
	}
	held, holds := s.holds(actor, res)
	if mode == "" {
		mode = "write"
		if holds {
			mode = held
		}
	}
	sh := v.shared(res)
	for _, l := range s.leases[res] {
		if l[0] != actor && conflict(sh, mode, l[1]) {
			holders = append(holders, l[0])
		}
	}
	nl, nw, na := s.counts()
	known := s.remembered(actor)
	if len(holders) == 0 && holds {
		return "grant", nil, nil
	}
	if len(holders) == 0 {
		if !s.hasClaim(actor, res) {
			for _, w := range s.claimants(res) {
				if w.ActorDid != actor && conflict(sh, w.Mode, mode) {
					claimants = append(claimants, w.ActorDid)
				}
			}
		}
		if len(claimants) == 0 {
			if hit := overLimit("leases", nl, v.Rules.Limits.Leases, known, na, v.Rules.Limits.Agents); hit != "" {
				return hit, nil, nil
			}
			return "grant", nil, nil
		}
	}
	// The blocks graph: waiter → the agents that block it where it waits.
	type edge struct{ from, to string }
	reach := map[edge]bool{}
	agents := map[string]bool{actor: true}
	for r, ws := range s.waiters {
		for _, w := range ws {
			for _, b := range s.blocks(w.ActorDid, r, w.Mode) {
				reach[edge{w.ActorDid, b}] = true
				agents[w.ActorDid], agents[b] = true, true
			}
		}
	}
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
	for _, b := range s.blocks(actor, res, mode) {
		if reach[edge{b, actor}] {
			return "deadlock", holders, claimants
		}
	}
	waiting := false
	for _, w := range s.waiters[res] {
		waiting = waiting || w.ActorDid == actor
	}
	if !waiting {
		if hit := overLimit("waiters", nw, v.Rules.Limits.Waiters, known, na, v.Rules.Limits.Agents); hit != "" {
			return hit, nil, nil
		}
	}
	return "lease_held", holders, claimants
}

// overLimit is the refusal of a verdict that would add one to what (n of
// them now, limit at most), or one agent when the asker is not known (na
// now, agents at most): "limit_exceeded:WHAT", or "" when both fit.
func overLimit(what string, n, limit int, known bool, na, agents int) string {
	switch {
	case n+1 > limit:
		return "limit_exceeded:" + what
	case !known && na+1 > agents:
		return "limit_exceeded:agents"
	}
	return ""
}

type answer struct {
	OK        bool     `json:"ok"`
	Reason    string   `json:"reason"`
	Limit     string   `json:"limit"`
	Holder    *string  `json:"holder"`
	Holders   []string `json:"holders"`
	Claimants []string `json:"claimants"`
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
// before the command: each agent blocks the one before it on the resource
// between them (the asker in the asked mode, the others in the mode they
// wait in).
func checkCycle(v view, now int64, actor, mode string, c []string) error {
	if len(c) < 4 || len(c)%2 != 0 || c[0] != actor {
		return fmt.Errorf("cycle %v: want actor, resource, holder, resource, ...", c)
	}
	s := live(v, now)
	if mode == "" {
		mode = "write"
		if held, ok := s.holds(actor, c[1]); ok {
			mode = held
		}
	}
	waitMode := func(agent, res string) (string, bool) {
		for _, w := range s.waiters[res] {
			if w.ActorDid == agent {
				return w.Mode, true
			}
		}
		return "", false
	}
	asker, asked := actor, mode
	for i := 1; i < len(c); i += 2 {
		res := c[i]
		next := actor
		if i+1 < len(c) {
			next = c[i+1]
		}
		if !slices.Contains(s.blocks(asker, res, asked), next) {
			return fmt.Errorf("cycle %v: %s does not block %s on %s (mode %s)", c, next, asker, res, asked)
		}
		if i+1 < len(c) {
			m, ok := waitMode(next, c[i+2])
			if !ok {
				return fmt.Errorf("cycle %v: %s does not wait on %s", c, next, c[i+2])
			}
			asker, asked = next, m
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
			t.Fatalf("seed %d failed; scenario: %s", seed, scenario.RandomPolled(seed))
		}
	}
}

func checkSeed(t *testing.T, seed int64) {
	s, err := scenario.Parse(scenario.RandomPolled(seed))
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
	var maxFence int64
	for i, raw := range steps {
		beforeBytes := m.Snapshot()
		before := viewOf(t, m)
		cmd, decErr := kernel.DecodeStep(raw)
		res := m.StepJSON(raw)
		events := kernel.AppendEvents(nil, res.Events)
		if !json.Valid(res.Answer) || !json.Valid(events) {
			t.Fatalf("step %d: invalid JSON out: %s %s", i, res.Answer, events)
		}
		// The events' list is the array read back: type, time and bytes.
		if back, err := kernel.ParseEvents(events); err != nil || len(back) != len(res.Events) {
			t.Fatalf("step %d: events %s read back as %d events (%v), want %d", i, events, len(back), err, len(res.Events))
		} else {
			for j, e := range res.Events {
				if back[j].Type != e.Type || back[j].AtMs != e.AtMs || !bytes.Equal(back[j].JSON, e.JSON) {
					t.Fatalf("step %d: event %d is %+v, its bytes say %+v", i, j, e, back[j])
				}
			}
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
		if after.Fence < maxFence {
			t.Fatalf("step %d: the fence counter went down", i)
		}
		maxFence = after.Fence
		if a.Lease != nil && a.Lease.Fence > after.Fence {
			t.Fatalf("step %d: lease fence %d above the counter %d", i, a.Lease.Fence, after.Fence)
		}
		if a.Reason == "limit_exceeded" {
			// Changes nothing beyond what the clock did: the same state as a
			// tick at that time.
			m2, err := kernel.Restore(beforeBytes)
			if err != nil {
				t.Fatal(err)
			}
			m2.Apply(kernel.Command{Op: kernel.OpTick, NowMs: cmd.NowMs})
			if !bytes.Equal(m2.Snapshot(), m.Snapshot()) {
				t.Fatalf("step %d: limit_exceeded changed the state", i)
			}
		}
		if cmd.Op != kernel.OpAcquire {
			continue
		}
		want, holders, claimants := expectAcquire(before, now, cmd.Resource, cmd.ActorDid, cmd.Mode)
		got := a.Reason
		if a.OK {
			got = "grant"
		}
		if a.Reason == "limit_exceeded" {
			got += ":" + a.Limit
		}
		if got != want {
			t.Fatalf("step %d %s: got %s, brute force says %s\nanswer %s\nstate %s", i, raw, got, want, res.Answer, beforeBytes)
		}
		if want == "deadlock" {
			if err := checkCycle(before, now, cmd.ActorDid, cmd.Mode, a.Cycle); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if a.Holder == nil || *a.Holder != a.Cycle[2] || a.WaitingOn != a.Cycle[3] {
				t.Fatalf("step %d: holder/waitingOn %v/%s do not open the cycle %v", i, a.Holder, a.WaitingOn, a.Cycle)
			}
		}
		if want == "lease_held" {
			if strings.Join(a.Holders, ",") != strings.Join(holders, ",") {
				t.Fatalf("step %d: holders %v, want %v", i, a.Holders, holders)
			}
			if (a.Holder == nil) != (len(holders) == 0) || (a.Holder != nil && *a.Holder != holders[0]) {
				t.Fatalf("step %d: holder %v, holders %v", i, a.Holder, holders)
			}
			if len(holders) == 0 && strings.Join(a.Claimants, ",") != strings.Join(claimants, ",") {
				t.Fatalf("step %d: claimants %v, want %v", i, a.Claimants, claimants)
			}
			var queue []string
			place := 0
			for _, r := range after.Resources {
				if r.Name == cmd.Resource {
					for j, w := range r.Waiters {
						queue = append(queue, w.ActorDid)
						if w.ActorDid == cmd.ActorDid {
							place = j + 1
						}
					}
				}
			}
			if a.Stampede.WaitMs != int64(min(800, 25<<min(place, 10))) {
				t.Fatalf("step %d: waitMs %d for place %d", i, a.Stampede.WaitMs, place)
			}
			admitted := queue[:min(len(queue), kernel.MaxAdmitted)]
			if strings.Join(a.Stampede.Admitted, ",") != strings.Join(admitted, ",") {
				t.Fatalf("step %d: admitted %v, queue %v", i, a.Stampede.Admitted, queue)
			}
		}
	}
}
