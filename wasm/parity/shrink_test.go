//go:build external

package parity

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// skewed is a factory whose engines answer wait differently from native:
// a stand-in for a host with a bug, to check what a mismatch reports.
var skewed = kernel.WrapFactory(kernel.Native, "skewed", func(e kernel.Engine) kernel.Engine { return skewedEngine{e} })

type skewedEngine struct{ kernel.Engine }

func (e skewedEngine) Step(c kernel.Command) (kernel.Ready, error) {
	r, err := e.Engine.Step(c)
	if c.Op == kernel.OpWait {
		r.Answer = append(append([]byte(nil), r.Answer[:len(r.Answer)-1]...), `,"skew":1}`...)
	}
	return r, err
}

// TestShrinkReportsASmallScenario checks that a host that differs on one
// kind of step is reported with a scenario cut down to that step.
func TestShrinkReportsASmallScenario(t *testing.T) {
	const a = `"actorDid":"did:web:acme.example:agent:a"`
	steps := []string{
		`{"atMs":1000,"op":"acquire","resource":"lock:x",` + a + `}`,
		`{"atMs":1001,"op":"tick"}`,
		`{"atMs":1002,"op":"release","resource":"lock:x",` + a + `}`,
		`{"atMs":1003,"op":"acquire","resource":"lock:y",` + a + `}`,
		`{"atMs":1004,"op":"wait"}`,
		`{"atMs":1005,"op":"tick"}`,
		`{"atMs":1006,"op":"acquire","resource":"lock:z",` + a + `}`,
		`{"atMs":1007,"op":"tick"}`,
	}
	in := []byte(`{"rules":{"readShared":["file:"]},"steps":[` + strings.Join(steps, ",") + `]}`)
	if replay(kernel.Native, in).equal(replay(skewed, in)) {
		t.Fatal("the skewed host agrees with native: the test checks nothing")
	}
	nd := startNode(t)
	defer nd.close()
	small := shrink(t, skewed, nd, in)
	s, err := scenario.Parse(small)
	if err != nil {
		t.Fatalf("shrunk scenario %s does not parse: %v", small, err)
	}
	if len(s.Steps) != 1 || !bytes.Contains(s.Steps[0], []byte(`"op":"wait"`)) {
		t.Fatalf("shrunk scenario %s, want the one wait step", small)
	}
	// The Node host agrees with native on it: only the skewed host differs.
	j, err := nd.one(small)
	if err != nil {
		t.Fatal(err)
	}
	if !replay(kernel.Native, small).equal(j) {
		t.Fatalf("node differs from native on %s", small)
	}
}
