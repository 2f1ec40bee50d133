//go:build wasip1

// Command guestbench is a throw-away wasip1 reactor for
// BenchmarkGuestLoops: each export runs a loop n times inside the
// instance, so a benchmark measures the compiled kernel code and not the
// host boundary. The loop bodies are copied in guest_bench_test.go, which
// runs them natively too; keep the two identical.
package main

import (
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
)

func main() {}

var body = []byte(`{"resource":"lock:deploy/production","actorDid":"did:web:acme.example:agent:release"}`)

//go:wasmexport applyJSON
func applyJSON(n uint32) uint32 {
	m := kernel.New(kernel.Rules{})
	s := 0
	for i := 0; i < int(n); i++ {
		s += m.ApplyJSON(kernel.OpAcquire, int64(i), body).Status
		m.ApplyJSON(kernel.OpRelease, int64(i), body)
	}
	return uint32(s)
}

//go:wasmexport applyTyped
func applyTyped(n uint32) uint32 {
	m := kernel.New(kernel.Rules{})
	acq := kernel.Command{Op: kernel.OpAcquire, Resource: "lock:deploy/production", ActorDid: "did:web:acme.example:agent:release"}
	rel := kernel.Command{Op: kernel.OpRelease, Resource: acq.Resource, ActorDid: acq.ActorDid}
	s := 0
	for i := 0; i < int(n); i++ {
		acq.NowMs, rel.NowMs = int64(i), int64(i)
		s += m.Apply(acq).Status
		m.Apply(rel)
	}
	return uint32(s)
}

//go:wasmexport decode
func decode(n uint32) uint32 {
	s := 0
	for i := 0; i < int(n); i++ {
		c, _ := kernel.DecodeRequest(kernel.OpAcquire, int64(i), body)
		s += len(c.Resource)
		c, _ = kernel.DecodeRequest(kernel.OpRelease, int64(i), body)
		s += len(c.Resource)
	}
	return uint32(s)
}

//go:wasmexport alloc
func alloc(n uint32) uint32 {
	s := 0
	for i := 0; i < int(n); i++ {
		b := make([]byte, 0, 128)
		b = strconv.AppendInt(b, int64(i), 10)
		b2 := make([]byte, 0, 128)
		b2 = append(b2, b...)
		s += len(b2) + len(string(b2))
	}
	return uint32(s)
}

var sink map[string]int

//go:wasmexport maps
func maps(n uint32) uint32 {
	m := map[string]int{"lock:deploy/production": 1, "did:web:acme.example:agent:release": 2}
	s := 0
	for i := 0; i < int(n); i++ {
		s += m["lock:deploy/production"] + m["did:web:acme.example:agent:release"]
	}
	sink = m
	return uint32(s)
}
