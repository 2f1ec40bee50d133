package kernel_test

import (
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

// TestWithFence: the fence counter of a snapshot is raised, and nothing
// else changes, even when the rules hold a string that spells the
// counter's member; the kernel restores the result and grants the next
// fence above it. A snapshot that does not restore, or a fence below the
// counter, is refused.
func TestWithFence(t *testing.T) {
	for _, rules := range []string{``, `{"readShared":["x,\"fence\":0,","file:"]}`} {
		eng, err := kernel.Native.New([]byte(rules))
		if err != nil {
			t.Fatal(err)
		}
		snap, err := eng.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if f, err := kernel.SnapshotFence(snap); err != nil || f != 0 {
			t.Fatalf("rules %s: fence %d %v, want 0", rules, f, err)
		}
		raised, err := kernel.WithFence(snap, 1_000_000)
		if err != nil {
			t.Fatalf("rules %s: %v", rules, err)
		}
		if strings.Replace(string(raised), `"fence":1000000`, `"fence":0`, 1) != string(snap) {
			t.Fatalf("rules %s: more than the counter changed:\n%s\n%s", rules, snap, raised)
		}
		if rules != "" && !strings.Contains(string(raised), `x,\"fence\":0,`) {
			t.Fatalf("the rules' string was rewritten: %s", raised)
		}
		if f, err := kernel.SnapshotFence(raised); err != nil || f != 1_000_000 {
			t.Fatalf("rules %s: the raised snapshot reads fence %d %v, want 1000000", rules, f, err)
		}
		if _, err := kernel.WithFence(raised, 999_999); err == nil {
			t.Errorf("rules %s: WithFence lowered the counter", rules)
		}
		m, err := kernel.Native.Restore(raised)
		if err != nil {
			t.Fatalf("rules %s: the kernel refuses the raised snapshot: %v", rules, err)
		}
		res, err := m.Apply(kernel.OpAcquire, 1000, []byte(`{"resource":"lock:a","actorDid":"did:example:a"}`))
		if err != nil || !strings.Contains(string(res.Answer), `"fence":1000001,`) {
			t.Fatalf("rules %s: after the raise the grant is %s (%v), want fence 1000001", rules, res.Answer, err)
		}
		eng.Close()
		m.Close()
	}
	for _, bad := range []string{`{"v":3}`, `not json`, `{"v":3,"fence":"7"}`} {
		if _, err := kernel.WithFence([]byte(bad), 9); err == nil {
			t.Errorf("WithFence(%s) raised a snapshot that does not restore", bad)
		}
	}
}
