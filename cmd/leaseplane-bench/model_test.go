package main

import (
	"strings"
	"testing"
	"time"
)

// TestQueueModel: in virtual time, held requests hand each resource over
// once per hold + 2 × oneway + commit (a release's trip, its commit, the
// grant's trip), so the pairs made are that rate's within the handful cut
// at the span's edges; polling clients never pass the semantics' ceiling (each
// pair of a client takes an 800 ms back-off at least), and ask more than
// once per pair. Counted, in the model's own time.
func TestQueueModel(t *testing.T) {
	o := modelOpts{clients: 64, oneway: 100 * time.Microsecond, commit: 500 * time.Microsecond, hold: 1100 * time.Microsecond,
		measured: 10 * time.Second}
	held, err := runModel(o)
	if err != nil {
		t.Fatal(err)
	}
	per := o.hold + 2*o.oneway + o.commit
	want := int64(4 * o.measured / per)
	if held.pairs < want-8 || held.pairs > want+4 {
		t.Errorf("held: %d pairs in %s; want %d (4 resources, a handoff every %s)", held.pairs, o.measured, want, per)
	}
	if held.asks > held.pairs+int64(o.clients)*2 {
		t.Errorf("held: %d acquires for %d pairs; want about one each", held.asks, held.pairs)
	}
	for _, seed := range []uint64{0, 1, 2} {
		o.polled, o.jitter, o.seed = true, seed != 0, seed
		polled, err := runModel(o)
		if err != nil {
			t.Fatal(err)
		}
		if ceiling := int64(polledCeiling(o.clients) * o.measured.Seconds()); polled.pairs == 0 || polled.pairs > ceiling {
			t.Errorf("polled, seed %d: %d pairs in %s; want 1 to %d", seed, polled.pairs, o.measured, ceiling)
		}
		if polled.asks < 2*polled.pairs {
			t.Errorf("polled, seed %d: %d acquires for %d pairs; want at least two a pair (the first is refused behind the queue)", seed, polled.asks, polled.pairs)
		}
	}
}

// TestModelFlag: --model prints both ways of waiting and measures nothing.
func TestModelFlag(t *testing.T) {
	code, out, errs := cli(t, "--model", "--duration", "2s")
	if code != 0 || !strings.Contains(out, "queue model:") || !strings.Contains(out, "  held ") || !strings.Contains(out, "  polled ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, _ := cli(t, "--model", "--model-commit", "-1ms"); code != exitUsage {
		t.Errorf("--model-commit -1ms: exit %d; want %d", code, exitUsage)
	}
}
