// Package guestloops holds the loops of BenchmarkGuestLoops (wasm/wazero):
// the benchmark runs each natively and, built into the throw-away wasip1
// module wasm/wazero/testdata/guestbench, inside one call into a wazero
// instance, so the two compare the same compiled code with no host
// boundary in between. Each loop runs its body n times and returns a sum
// of what it computed, so nothing is optimised away.
package guestloops

import (
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
)

// Names are the loops, in the order the benchmark runs them; each is an
// export of testdata/guestbench by the same name.
var Names = []string{"applyJSON", "applyTyped", "decode", "alloc", "maps"}

// Loops are the loop bodies by name.
var Loops = map[string]func(n uint32) uint32{
	"applyJSON":  ApplyJSON,
	"applyTyped": ApplyTyped,
	"decode":     Decode,
	"alloc":      Alloc,
	"maps":       Maps,
}

var body = []byte(`{"resource":"lock:deploy/production","actorDid":"did:web:acme.example:agent:release"}`)

// ApplyJSON is one acquire and one release from REST bodies
// (Machine.ApplyJSON).
func ApplyJSON(n uint32) uint32 {
	m := kernel.New(kernel.Rules{})
	s := 0
	for i := 0; i < int(n); i++ {
		s += m.ApplyJSON(kernel.OpAcquire, int64(i), body).Status
		m.ApplyJSON(kernel.OpRelease, int64(i), body)
	}
	return uint32(s)
}

// ApplyTyped is one acquire and one release as typed commands
// (Machine.Apply: validated, not decoded).
func ApplyTyped(n uint32) uint32 {
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

// Decode is two kernel.DecodeRequest of REST bodies.
func Decode(n uint32) uint32 {
	s := 0
	for i := 0; i < int(n); i++ {
		c, _ := kernel.DecodeRequest(kernel.OpAcquire, int64(i), body)
		s += len(c.Resource)
		c, _ = kernel.DecodeRequest(kernel.OpRelease, int64(i), body)
		s += len(c.Resource)
	}
	return uint32(s)
}

// Alloc is two small byte slices, an integer formatted and a string
// conversion.
func Alloc(n uint32) uint32 {
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

// Maps is two map[string]int look-ups.
func Maps(n uint32) uint32 {
	m := map[string]int{"lock:deploy/production": 1, "did:web:acme.example:agent:release": 2}
	s := 0
	for i := 0; i < int(n); i++ {
		s += m["lock:deploy/production"] + m["did:web:acme.example:agent:release"]
	}
	sink = m
	return uint32(s)
}
