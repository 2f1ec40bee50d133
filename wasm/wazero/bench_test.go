package wazero_test

import (
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

// benchEngines runs fn against the native engine and the wasm engine.
func benchEngines(b *testing.B, fn func(b *testing.B, f kernel.Factory)) {
	b.Run("native", func(b *testing.B) { fn(b, kernel.Native) })
	b.Run("wasm", func(b *testing.B) { fn(b, wasmFactory(b)) })
}

// BenchmarkAcquireRelease is one acquire and one release of a free
// resource per iteration, from REST bodies: the server's per-command path.
func BenchmarkAcquireRelease(b *testing.B) {
	benchEngines(b, func(b *testing.B, f kernel.Factory) {
		e, err := f.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		body := []byte(`{"resource":"lock:deploy/production","actorDid":"did:web:acme.example:agent:release"}`)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r, err := e.Apply(kernel.OpAcquire, int64(i), body)
			if err != nil || r.Status != 200 {
				b.Fatalf("%s %v", r.Answer, err)
			}
			if _, err := e.Apply(kernel.OpRelease, int64(i), body); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/cmd")
	})
}

// BenchmarkNewClose is starting and closing an engine (a pooled instance
// for wasm).
func BenchmarkNewClose(b *testing.B) {
	benchEngines(b, func(b *testing.B, f kernel.Factory) {
		for b.Loop() {
			e, err := f.New([]byte(`{"readShared":["file:"]}`))
			if err != nil {
				b.Fatal(err)
			}
			e.Close()
		}
	})
}

// BenchmarkReplayRandom replays one seeded random scenario per iteration.
func BenchmarkReplayRandom(b *testing.B) {
	ins := make([][]byte, 64)
	for i := range ins {
		ins[i] = scenario.Random(int64(i))
	}
	benchEngines(b, func(b *testing.B, f kernel.Factory) {
		for i := 0; b.Loop(); i++ {
			if _, err := scenario.Replay(f, ins[i%len(ins)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRestore restores a busy machine's snapshot into a new engine
// and closes it: what waking a hibernated workspace costs.
func BenchmarkRestore(b *testing.B) {
	s, err := scenario.Parse(scenario.Random(7))
	if err != nil {
		b.Fatal(err)
	}
	e, err := kernel.Native.New(s.Rules)
	if err != nil {
		b.Fatal(err)
	}
	for _, step := range s.Steps {
		e.StepJSON(step)
	}
	snap, _ := e.Snapshot()
	b.Logf("snapshot of %d bytes", len(snap))
	benchEngines(b, func(b *testing.B, f kernel.Factory) {
		for b.Loop() {
			r, err := f.Restore(snap)
			if err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
}
