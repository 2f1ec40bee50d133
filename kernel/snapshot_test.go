package kernel_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// TestSnapshotRestoreContinue cuts random scenarios at every step: the
// machine restored from the snapshot must answer the rest exactly as the
// uninterrupted one, and a snapshot must survive a round trip unchanged.
func TestSnapshotRestoreContinue(t *testing.T) {
	for seed := int64(1); seed <= 400; seed++ {
		s, err := scenario.Parse(scenario.Random(seed))
		if err != nil {
			t.Fatal(err)
		}
		rules, _ := kernel.ParseRules(s.Rules)
		whole := kernel.New(rules)
		var want [][]byte
		for _, st := range s.Steps {
			r := whole.StepJSON(st)
			want = append(want, kernel.AppendEvents(r.Answer, r.Events))
		}
		for cut := 0; cut <= len(s.Steps); cut += 1 + cut/4 {
			m := kernel.New(rules)
			for _, st := range s.Steps[:cut] {
				m.StepJSON(st)
			}
			snap := m.Snapshot()
			m2, err := kernel.Restore(snap)
			if err != nil {
				t.Fatalf("seed %d cut %d: restore: %v\n%s", seed, cut, err, snap)
			}
			if again := m2.Snapshot(); !bytes.Equal(again, snap) {
				t.Fatalf("seed %d cut %d: snapshot changed across restore:\n%s\n%s", seed, cut, snap, again)
			}
			if a1, a2 := m.NextAlarm(); true {
				b1, b2 := m2.NextAlarm()
				if a1 != b1 || a2 != b2 {
					t.Fatalf("seed %d cut %d: next alarm %d/%v after restore, %d/%v before", seed, cut, b1, b2, a1, a2)
				}
			}
			for i, st := range s.Steps[cut:] {
				r := m2.StepJSON(st)
				if got := kernel.AppendEvents(r.Answer, r.Events); !bytes.Equal(got, want[cut+i]) {
					t.Fatalf("seed %d cut %d step %d: restored machine answered\n%s\nuninterrupted\n%s", seed, cut, cut+i, got, want[cut+i])
				}
			}
			if !bytes.Equal(m2.Snapshot(), whole.Snapshot()) || !bytes.Equal(m2.TrustJSON(), whole.TrustJSON()) {
				t.Fatalf("seed %d cut %d: final state differs", seed, cut)
			}
		}
	}
}

func TestRestoreRefusesBrokenSnapshots(t *testing.T) {
	m := kernel.New(kernel.Rules{})
	m.StepJSON([]byte(`{"atMs":1,"op":"acquire","resource":"r","actorDid":"did:x:a"}`))
	good := string(m.Snapshot())
	cases := map[string]string{
		"not json":       `{`,
		"fence above":    replace(good, `"fence":1,"grantedAtMs"`, `"fence":9,"grantedAtMs"`),
		"unknown holder": replace(good, `"holder":"did:x:a"`, `"holder":"did:x:b"`),
		"bad mode":       replace(good, `"mode":"write"`, `"mode":"own"`),
		"not canonical":  " " + good,
		"bad agent did":  replace(good, `"trust":{"did:x:a":0}`, `"trust":{"x":0}`),
		"fence counter":  replace(good, `"fence":1,"askCounter"`, `"fence":0,"askCounter"`),
		"idle agent":     replace(good, `"trust":{"did:x:a":0}`, `"trust":{"did:x:a":0,"did:x:b":0}`),
		"idle resource":  replace(good, `"deadlocks":[]`, `"deadlocks":[]`)[:0] + replace(good, `"waiters":[]}]`, `"waiters":[]},{"name":"s","leases":[],"waiters":[]}]`),
		"wrong version":  `{"v":4}`,
		"empty":          ``,
	}
	for name, in := range cases {
		if _, err := kernel.Restore([]byte(in)); err == nil {
			t.Errorf("%s: restore accepted %s", name, in)
		}
	}
	if _, err := kernel.Restore([]byte(good)); err != nil {
		t.Fatalf("good snapshot refused: %v", err)
	}
}

func replace(s, old, new string) string {
	return string(bytes.Replace([]byte(s), []byte(old), []byte(new), 1))
}

// TestSameInputSameBytes replays random scenarios twice in fresh machines.
func TestSameInputSameBytes(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		in := scenario.Random(seed)
		a, err := scenario.Replay(kernel.Native, in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := scenario.Replay(kernel.Native, in)
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: two replays differ", seed)
		}
	}
}

// TestSnapshotFollowsWhatIsLive replays 200,000 acquire+release pairs on
// distinct resources: the snapshot at the end is no larger than an empty
// workspace's (at the same time) plus the trust table and the fence
// counter's digits. Nothing is kept of a resource once it is idle.
func TestSnapshotFollowsWhatIsLive(t *testing.T) {
	const pairs = 200000
	m := kernel.New(kernel.Rules{})
	now := int64(1000)
	for i := range pairs {
		res := "lock:job/" + strconv.Itoa(i)
		did := "did:web:acme.example:agent:w" + strconv.Itoa(i%4)
		if r := m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: now, Resource: res, ActorDid: did}); r.Status != 200 {
			t.Fatalf("acquire %d: %s", i, r.Answer)
		}
		if r := m.Apply(kernel.Command{Op: kernel.OpRelease, NowMs: now, Resource: res, ActorDid: did}); r.Status != 200 {
			t.Fatalf("release %d: %s", i, r.Answer)
		}
		now++
	}
	empty := kernel.New(kernel.Rules{})
	empty.Apply(kernel.Command{Op: kernel.OpTick, NowMs: m.Now()})
	snap, trust := m.Snapshot(), m.TrustJSON()
	limit := len(empty.Snapshot()) + len(trust) + len(strconv.Itoa(pairs))
	if len(snap) > limit {
		t.Fatalf("snapshot after %d pairs is %d bytes; an empty one %d, trust table %d, fence digits %d:\n%.2000s",
			pairs, len(snap), len(empty.Snapshot()), len(trust), len(strconv.Itoa(pairs)), snap)
	}
	if st := m.Stats(); st != (kernel.Stats{Agents: 4}) {
		t.Fatalf("stats after the pairs: %+v", st)
	}
}

// TestRestoreManyAgents restores a snapshot with 100,000 agents in its
// trust table: reading it must not be quadratic in them (the duplicate
// check once was), and a duplicated agent is still refused.
func TestRestoreManyAgents(t *testing.T) {
	m := kernel.New(kernel.Rules{})
	for i := range 100000 {
		did := "did:web:acme.example:agent:a" + strconv.Itoa(i)
		m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: 1, Resource: "r" + strconv.Itoa(i), ActorDid: did})
		m.Apply(kernel.Command{Op: kernel.OpRelease, NowMs: 1, Resource: "r" + strconv.Itoa(i), ActorDid: did})
	}
	snap := m.Snapshot()
	m2, err := kernel.Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m2.Snapshot(), snap) {
		t.Fatal("snapshot changed across restore")
	}
	for _, did := range []string{"did:web:acme.example:agent:a0", "did:web:acme.example:agent:a99999"} {
		entry := `"` + did + `":0.5`
		dup := replace(string(snap), entry, entry+","+entry)
		if _, err := kernel.Restore([]byte(dup)); err == nil || !bytes.Contains([]byte(err.Error()), []byte("duplicate")) {
			t.Fatalf("%s duplicated: %v", did, err)
		}
	}
}
