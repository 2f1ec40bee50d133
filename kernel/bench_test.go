package kernel_test

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

func reportCmds(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkAcquireRelease is one acquire and one release of a free
// resource per iteration, through the typed API (answers and events are
// still encoded).
func BenchmarkAcquireRelease(b *testing.B) {
	m := kernel.New(kernel.Rules{})
	acq := kernel.Command{Op: kernel.OpAcquire, Resource: "lock:deploy/production", ActorDid: "did:web:acme.example:agent:release"}
	rel := kernel.Command{Op: kernel.OpRelease, Resource: acq.Resource, ActorDid: acq.ActorDid}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		acq.NowMs, rel.NowMs = int64(i), int64(i)
		if r := m.Apply(acq); r.Status != 200 {
			b.Fatalf("%s", r.Answer)
		}
		m.Apply(rel)
	}
	reportCmds(b, 2)
}

// BenchmarkAcquireReleaseJSON is the same pair from REST bodies, the path
// the server and the WebAssembly builds take.
func BenchmarkAcquireReleaseJSON(b *testing.B) {
	m := kernel.New(kernel.Rules{})
	body := []byte(`{"resource":"lock:deploy/production","actorDid":"did:web:acme.example:agent:release"}`)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r := m.ApplyJSON(kernel.OpAcquire, int64(i), body); r.Status != 200 {
			b.Fatalf("%s", r.Answer)
		}
		m.ApplyJSON(kernel.OpRelease, int64(i), body)
	}
	reportCmds(b, 2)
}

// BenchmarkAcquireReleaseSpread spreads pairs over 10,000 resources and
// 1,000 agents, so maps and the timer heap hold real sizes.
func BenchmarkAcquireReleaseSpread(b *testing.B) {
	m := kernel.New(kernel.Rules{})
	var acq, rel []kernel.Command
	for i := range 10000 {
		res := "lock:r" + strconv.Itoa(i)
		did := "did:web:acme.example:agent:" + strconv.Itoa(i%1000)
		acq = append(acq, kernel.Command{Op: kernel.OpAcquire, Resource: res, ActorDid: did})
		rel = append(rel, kernel.Command{Op: kernel.OpRelease, Resource: res, ActorDid: did})
	}
	// Half the resources stay held, so the heap is not empty.
	for i := 0; i < len(acq); i += 2 {
		m.Apply(acq[i])
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := 1 + 2*(i%(len(acq)/2))
		a, r := acq[k], rel[k]
		a.NowMs, r.NowMs = int64(i/100), int64(i/100)
		m.Apply(a)
		m.Apply(r)
	}
	reportCmds(b, 2)
}

// BenchmarkRenew renews one lease by acquiring again.
func BenchmarkRenew(b *testing.B) {
	m := kernel.New(kernel.Rules{})
	acq := kernel.Command{Op: kernel.OpAcquire, Resource: "lock:deploy/production", ActorDid: "did:web:acme.example:agent:release"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		acq.NowMs = int64(i)
		m.Apply(acq)
	}
	reportCmds(b, 1)
}

// BenchmarkHerd50 is fifty agents asking for one held file, in a fresh
// machine each iteration: one grant and 49 lease_held refusals.
func BenchmarkHerd50(b *testing.B) {
	var cmds []kernel.Command
	for i := range 50 {
		cmds = append(cmds, kernel.Command{Op: kernel.OpAcquire, NowMs: int64(1000 + i), Resource: "file:reports/q3.csv", ActorDid: fmt.Sprintf("did:web:acme.example:agent:%02d", i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		m := kernel.New(kernel.Rules{})
		for _, c := range cmds {
			m.Apply(c)
		}
	}
	reportCmds(b, 50)
}

// chain builds n agents where agent i holds r_i and waits on r_{i+1}.
func chain(n int) *kernel.Machine {
	m := kernel.New(kernel.Rules{})
	did := func(i int) string { return "did:x:agent" + strconv.Itoa(i) }
	res := func(i int) string { return "lock:r" + strconv.Itoa(i) }
	for i := range n {
		m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: 1, Resource: res(i), ActorDid: did(i)})
	}
	for i := 0; i+1 < n; i++ {
		m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: 1, Resource: res(i + 1), ActorDid: did(i)})
	}
	return m
}

// BenchmarkDeadlockChain asks, as the last agent of an n-agent wait chain,
// for the first agent's resource: the check walks the whole chain and
// refuses deadlock. Cost should grow linearly with n.
func BenchmarkDeadlockChain(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run("agents="+strconv.Itoa(n), func(b *testing.B) {
			m := chain(n)
			c := kernel.Command{Op: kernel.OpAcquire, NowMs: 2, Resource: "lock:r0", ActorDid: "did:x:agent" + strconv.Itoa(n-1)}
			b.ReportAllocs()
			for b.Loop() {
				if r := m.Apply(c); r.Status != 409 {
					b.Fatalf("%s", r.Answer)
				}
			}
		})
	}
}

var sinkBytes []byte

// BenchmarkMachineCalibration measures the machine, not the kernel: one
// 256-byte allocation with an append, and one map lookup of a short
// string, so kernel figures can be read against what this host gives.
func BenchmarkMachineCalibration(b *testing.B) {
	b.Run("alloc256", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			x := make([]byte, 0, 256)
			x = strconv.AppendInt(x, int64(i), 10)
			sinkBytes = append(x, "lock:deploy/production"...)
		}
	})
	b.Run("mapLookup", func(b *testing.B) {
		m := map[string]int{"lock:deploy/production": 1}
		n := 0
		for b.Loop() {
			n += m["lock:deploy/production"]
		}
		_ = n
	})
}

// BenchmarkRefuseLargeInput measures refusing bodies that are wide (n
// members: refused at the 17th) and deep (n nested arrays inside ttlMs:
// refused at depth 9) and a scenario step with n members read by the
// scenario reader, for n from 1,000 to 100,000: ns/op grows no faster than
// the input (docs/BENCHMARKS.md, "Input limits").
//
//	go test -run '^$' -bench RefuseLargeInput -benchmem ./kernel
func BenchmarkRefuseLargeInput(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		var wide strings.Builder
		wide.WriteString(`{"resource":"r","actorDid":"did:x:a"`)
		for i := range n {
			fmt.Fprintf(&wide, `,"x%d":%d`, i, i)
		}
		wide.WriteString("}")
		deep := `{"resource":"r","actorDid":"did:x:a","ttlMs":` + strings.Repeat("[", n) + strings.Repeat("]", n) + "}"
		for _, c := range []struct {
			name string
			body []byte
		}{{"wide", []byte(wide.String())}, {"deep", []byte(deep)}} {
			b.Run(fmt.Sprintf("%s/%d", c.name, n), func(b *testing.B) {
				m := kernel.New(kernel.Rules{})
				b.SetBytes(int64(len(c.body)))
				for b.Loop() {
					if r := m.ApplyJSON(kernel.OpAcquire, 1, c.body); r.Status != 400 {
						b.Fatalf("accepted: %s", r.Answer)
					}
				}
			})
		}
		step := []byte(`{"steps":[` + strings.Replace(wide.String(), `{`, `{"atMs":1,"op":"acquire",`, 1) + `]}`)
		b.Run(fmt.Sprintf("scenario-step/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(step)))
			for b.Loop() {
				if _, err := scenario.Replay(kernel.Native, step); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLiveLeaseMemory is the heap a machine holds per live lease:
// 100,000 leases granted (the default limit), then the heap after a
// collection compared with an empty machine's. "own-agent" gives every
// lease its own agent (an agent record each); "100-agents" has 100 agents
// holding 1,000 leases each. Names are of realistic length (a 30-byte
// resource, a 40-byte DID).
func BenchmarkLiveLeaseMemory(b *testing.B) {
	const n = 100000
	for _, tc := range []struct {
		name   string
		agents int
	}{{"own-agent", n}, {"100-agents", 100}} {
		b.Run(tc.name, func(b *testing.B) {
			bodies := make([][]byte, n)
			for i := range bodies {
				bodies[i] = []byte(fmt.Sprintf(`{"resource":"lock:repo/main/file-%08d.go","actorDid":"did:web:acme.example:agent:%011d"}`, i, i%tc.agents))
			}
			var perLease float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				m := kernel.New(kernel.Rules{})
				for i, body := range bodies {
					if r := m.ApplyJSON(kernel.OpAcquire, 1000, body); r.Status != 200 {
						b.Fatalf("lease %d: %s", i, r.Answer)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perLease = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(m)
			}
			b.ReportMetric(perLease, "B/lease")
		})
	}
}

// BenchmarkDeadlockPairs runs an empty wait page and an acquire and a
// release of an unrelated resource with 0, 5,000 and 10,000 deadlock pairs
// kept: no command's cost may grow with them (the pairs are indexed by time
// and by resource name, and a page reads only its own range).
func BenchmarkDeadlockPairs(b *testing.B) {
	for _, n := range []int{0, 5000, 10000} {
		m := kernel.New(kernel.Rules{})
		const now = 1000
		for i := range n {
			x, y := "did:web:acme.example:agent:x"+strconv.Itoa(i), "did:web:acme.example:agent:y"+strconv.Itoa(i)
			ra, rb := "dl:a"+strconv.Itoa(i), "dl:b"+strconv.Itoa(i)
			m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: now, Resource: ra, ActorDid: x})
			m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: now, Resource: rb, ActorDid: y})
			m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: now, Resource: ra, ActorDid: y})
			if r := m.Apply(kernel.Command{Op: kernel.OpAcquire, NowMs: now, Resource: rb, ActorDid: x}); !strings.Contains(string(r.Answer), `"deadlock"`) {
				b.Fatalf("pair %d: %s", i, r.Answer)
			}
			// Only the pair stays: the resources go idle and the agents are
			// forgotten, so the machine holds nothing else that grows.
			for _, c := range []kernel.Command{{Op: kernel.OpRelease, Resource: ra, ActorDid: x}, {Op: kernel.OpRelease, Resource: rb, ActorDid: y},
				{Op: kernel.OpRelease, Resource: ra, ActorDid: y}, {Op: kernel.OpForget, ActorDid: x}, {Op: kernel.OpForget, ActorDid: y}} {
				c.NowMs = now
				m.Apply(c)
			}
		}
		if st := m.Stats(); st.Resources != 0 || st.Agents != 0 {
			b.Fatalf("the pairs' machine holds %+v besides them", st)
		}
		if n > 0 {
			r := m.Apply(kernel.Command{Op: kernel.OpWait, NowMs: now, Prefix: "dl:b0", Limit: 1}) // an idle resource's pairs show
			if strings.Count(string(r.Answer), `"waitingOn"`) != 1 {
				b.Fatalf("a page of one resource shows %s", r.Answer)
			}
		}
		b.Run(strconv.Itoa(n)+"-pairs", func(b *testing.B) {
			wait := kernel.Command{Op: kernel.OpWait, NowMs: now, Prefix: "none:"}
			acq := kernel.Command{Op: kernel.OpAcquire, NowMs: now, Resource: "lock:other", ActorDid: "did:web:acme.example:agent:o"}
			rel := kernel.Command{Op: kernel.OpRelease, NowMs: now, Resource: acq.Resource, ActorDid: acq.ActorDid}
			b.ReportAllocs()
			for b.Loop() {
				if r := m.Apply(wait); r.Status != 200 || strings.Contains(string(r.Answer), `"waitingOn"`) {
					b.Fatalf("%s", r.Answer)
				}
				m.Apply(acq)
				m.Apply(rel)
			}
			reportCmds(b, 3)
		})
	}
}
