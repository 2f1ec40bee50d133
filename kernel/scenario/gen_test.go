package scenario

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

func TestRandomIsDeterministicAndReplays(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		a, b := Random(seed), Random(seed)
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		t1, err := Replay(kernel.Native, a)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, a)
		}
		t2, _ := Replay(kernel.Native, a)
		if !bytes.Equal(t1, t2) {
			t.Fatalf("seed %d: two replays differ", seed)
		}
	}
}

func TestShrinkKeepsTheFailure(t *testing.T) {
	s := Random(7)
	// A "failure" that holds while some step is a tick.
	fails := func(b []byte) bool { return strings.Contains(string(b), `"op":"tick"`) }
	if !fails(s) {
		for seed := int64(8); !fails(s); seed++ {
			s = Random(seed)
		}
	}
	small := Shrink(s, fails)
	if !fails(small) {
		t.Fatalf("shrunk scenario lost the failure: %s", small)
	}
	parsed, err := Parse(small)
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.Steps) != 1 {
		t.Fatalf("want 1 step left, got %d: %s", len(parsed.Steps), small)
	}
}
