//go:build wasip1

// Command wasip1 is the kernel built as a GOOS=wasip1 reactor
// (-buildmode=c-shared) for wasm/wazero, which embeds it. One module
// instance holds at most one kernel Machine, so the state stays inside the
// instance and a command crosses the boundary as bytes only: no reflection,
// no encoding/json on the per-command path (the kernel reads and writes its
// JSON by hand).
//
// # ABI (version 1)
//
// The host must run the WASI start function _initialize once before calling
// any export (wazero: ModuleConfig.WithStartFunctions("_initialize")).
// Every integer is little-endian. Exports:
//
//	lp_abi_version() u32                         -> 1
//	lp_buffer(size u32) u32                      -> ptr of the input buffer
//	lp_new(n u32) u64                            rules JSON in input[0:n]; 0 or an error
//	lp_restore(n u32) u64                        snapshot JSON in input[0:n]; 0 or an error
//	lp_next_alarm() u64                          empty, or the alarm as an i64
//	lp_snapshot() u64                            the snapshot JSON
//	lp_trust() u64                               the trust JSON object
//	lp_version() u64                             kernel.Version
//	lp_reset()                                   drop the machine (the host
//	                                             pools the instance)
//
// Memory. All memory belongs to the guest; the host never allocates or
// frees guest memory. To pass bytes in, the host calls lp_buffer(size),
// which returns the address of a guest-owned input buffer of at least size
// bytes (grown when needed, reused otherwise), writes its bytes there and
// passes their length to the next call. The address stays valid until the
// next lp_buffer call, so a host may cache it and call lp_buffer only to
// grow. Outputs come back the same way: a u64 result packs a region of
// guest memory as ptr<<32 | len (ptr below 2^31), and the region stays
// valid only until the next call into the instance; the host copies what
// it keeps.
//
// Errors. Bit 63 of a u64 result flags an error: the region then holds a
// UTF-8 message naming the problem (for example the reason rules or a
// snapshot were refused, or "no machine" before lp_new). A client's bad
// command is never an error: it is an answer (invalid_request), exactly as
// natively. A trap means the instance is broken and must be discarded.
//
// # The step (kernel.Engine.Step)
//
// Three exports run kernel.Machine.Step and return its Ready as one fixed
// record, the one seam of every host:
//
//	lp_step_command(n u32) u64                  a kernel.Command the host
//	                                            decoded, as a command record
//	                                            (kernel/record.go)
//	lp_step_body(opLen u32, nowMs i64, n u32) u64
//	                                            op in input[0:opLen], REST
//	                                            body after it: the guest
//	                                            decodes it (kernel.DecodeCommand)
//	lp_step_scenario(n u32) u64                 a scenario step (JSON with
//	                                            atMs and op) in input[0:n]
//	                                            (kernel.DecodeStepCommand)
//
// lp_step_command's input is kernel's command record (kernel.PutRecord).
//
// The Ready record is one region: a 40-byte header, nEvents event
// entries of 40 bytes, nAnswers answer entries of 16 bytes, then every
// byte string they name, back to back in that order:
//
//	header: status u32, retryAfterSec u32, flags u32 (bit 0 log, bit 1
//	the machine has a next alarm, bit 2 a snapshot is due, bit 3
//	changed, bit 4 no answer: the step made a held ask), nEvents u32,
//	nAnswers u32, answerLen u32, askIdLen u32, 4 zero bytes,
//	nextAlarm i64
//	event: atMs i64, fence i64, then the lengths (u32 each) of its type,
//	actorDid, resource, leaseId and JSON, and 4 zero bytes
//	answer: status u32, retryAfterSec u32, askIdLen u32, answerLen u32
//	bytes: the answer, the askId; per event its type, actorDid,
//	resource, leaseId and JSON; per answer its askId and answer
//
// Calls before lp_new or lp_restore answer the error "no machine"; lp_new
// and lp_restore replace any machine the instance held, and lp_reset drops
// it, so a host can reuse an instance for another workspace.
package main

import (
	"encoding/binary"
	"runtime"
	"unsafe"

	"github.com/leaseplane/leaseplane/kernel"
)

func main() {}

const errFlag = 1 << 63

var (
	machine *kernel.Machine
	input   []byte
	// out keeps the bytes of the last result alive until the next call.
	out []byte
)

func region(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))<<32 | uint64(len(b))
}

func fail(msg string) uint64 {
	out = []byte(msg)
	return region(out) | errFlag
}

//go:wasmexport lp_abi_version
func abiVersion() uint32 { return 1 }

//go:wasmexport lp_buffer
func buffer(size uint32) uint32 {
	if int(size) > cap(input) || input == nil {
		input = make([]byte, max(int(size), 4096))
	}
	input = input[:cap(input)]
	return uint32(uintptr(unsafe.Pointer(&input[0])))
}

func in(n uint32) ([]byte, bool) {
	if int(n) > len(input) {
		return nil, false
	}
	return input[:n], true
}

//go:wasmexport lp_new
func newMachine(n uint32) uint64 {
	return load("lp_new", n, func(rules []byte) (*kernel.Machine, error) {
		r, err := kernel.ParseRules(rules)
		if err != nil {
			return nil, err
		}
		return kernel.New(r), nil
	})
}

//go:wasmexport lp_restore
func restore(n uint32) uint64 { return load("lp_restore", n, kernel.Restore) }

// load makes the machine from the n bytes of input with build, for the
// export named export.
func load(export string, n uint32, build func([]byte) (*kernel.Machine, error)) uint64 {
	b, ok := in(n)
	if !ok {
		return fail(export + ": length beyond the input buffer")
	}
	m, err := build(b)
	if err != nil {
		return fail(err.Error())
	}
	machine = m
	return 0
}

const noMachine = "no machine: call lp_new or lp_restore first"

// Collecting. Nothing of the guest runs between two calls into it, and
// within a call only the call's own goroutine does: the Go runtime's
// background collector does not keep up on its own, and the heap, with it
// the instance's linear memory, grew without bound under steady load
// (7.5 MB for about 500,000 commands of 64 agents on short-lived
// resources, where the live heap stays under 1 MB, then 448 MB by 1.2
// million; docs/BENCHMARKS.md, "Server load"). So every collectEvery
// commands the guest looks at what it has allocated since its last
// collection and, past max(the heap then, 4 MB), runs one itself
// (runtime.GC blocks the call until the cycle is done): about the pacing
// GOGC=100 would give.
const collectEvery = 256

var (
	sinceCheck int
	mem        runtime.MemStats
	collectAt  uint64 = 4 << 20
)

func collect() {
	if sinceCheck++; sinceCheck < collectEvery {
		return
	}
	sinceCheck = 0
	runtime.ReadMemStats(&mem)
	if mem.TotalAlloc < collectAt {
		return
	}
	runtime.GC()
	runtime.ReadMemStats(&mem)
	collectAt = mem.TotalAlloc + max(mem.HeapAlloc, 4<<20)
}

// readyRec is the Ready record of the last step.
var readyRec []byte

const readyHeader, readyEvent, readyAnswer = 40, 40, 16

//go:wasmexport lp_step_command
func stepCommand(n uint32) uint64 {
	return stepInput("lp_step_command", n, kernel.ParseRecord)
}

//go:wasmexport lp_step_scenario
func stepScenario(n uint32) uint64 {
	return stepInput("lp_step_scenario", n, func(b []byte) (kernel.Command, error) { return kernel.DecodeStepCommand(b), nil })
}

// stepInput steps the machine with the command that read makes of the n
// bytes of input, for the export named export.
func stepInput(export string, n uint32, read func([]byte) (kernel.Command, error)) uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	b, ok := in(n)
	if !ok {
		return fail(export + ": length beyond the input buffer")
	}
	c, err := read(b)
	if err != nil {
		return fail(export + ": " + err.Error())
	}
	return readyRecord(machine.Step(c))
}

//go:wasmexport lp_step_body
func stepBody(opLen uint32, nowMs int64, n uint32) uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	if uint64(opLen)+uint64(n) > uint64(len(input)) {
		return fail("lp_step_body: lengths beyond the input buffer")
	}
	op := kernel.Op(input[:opLen])
	return readyRecord(machine.Step(kernel.DecodeCommand(op, nowMs, input[opLen:opLen+n])))
}

// readyRecord lays r out as the Ready record (package doc).
func readyRecord(r kernel.Ready) uint64 {
	collect()
	size := readyHeader + readyEvent*len(r.Events) + readyAnswer*len(r.Answers) + len(r.Answer) + len(r.AskID)
	for _, e := range r.Events {
		size += len(e.Type) + len(e.ActorDid) + len(e.Resource) + len(e.LeaseID) + len(e.JSON)
	}
	for _, a := range r.Answers {
		size += len(a.AskID) + len(a.Answer)
	}
	if cap(readyRec) < size {
		readyRec = make([]byte, size, max(size, 1024))
	}
	b := readyRec[:size]
	le := binary.LittleEndian
	flags := uint32(0)
	for i, f := range [...]bool{r.Log, r.AlarmOK, r.SnapshotDue, r.Changed, r.Answer == nil} {
		if f {
			flags |= 1 << i
		}
	}
	le.PutUint32(b[0:], uint32(r.Status))
	le.PutUint32(b[4:], uint32(r.RetryAfterSec))
	le.PutUint32(b[8:], flags)
	le.PutUint32(b[12:], uint32(len(r.Events)))
	le.PutUint32(b[16:], uint32(len(r.Answers)))
	le.PutUint32(b[20:], uint32(len(r.Answer)))
	le.PutUint32(b[24:], uint32(len(r.AskID)))
	le.PutUint32(b[28:], 0)
	le.PutUint64(b[32:], uint64(r.NextAlarm))
	at := readyHeader
	for _, e := range r.Events {
		le.PutUint64(b[at:], uint64(e.AtMs))
		le.PutUint64(b[at+8:], uint64(e.Fence))
		for i, n := range [...]int{len(e.Type), len(e.ActorDid), len(e.Resource), len(e.LeaseID), len(e.JSON), 0} {
			le.PutUint32(b[at+16+4*i:], uint32(n))
		}
		at += readyEvent
	}
	for _, a := range r.Answers {
		le.PutUint32(b[at:], uint32(a.Status))
		le.PutUint32(b[at+4:], uint32(a.RetryAfterSec))
		le.PutUint32(b[at+8:], uint32(len(a.AskID)))
		le.PutUint32(b[at+12:], uint32(len(a.Answer)))
		at += readyAnswer
	}
	at += copy(b[at:], r.Answer)
	at += copy(b[at:], r.AskID)
	for _, e := range r.Events {
		at += copy(b[at:], e.Type)
		at += copy(b[at:], e.ActorDid)
		at += copy(b[at:], e.Resource)
		at += copy(b[at:], e.LeaseID)
		at += copy(b[at:], e.JSON)
	}
	for _, a := range r.Answers {
		at += copy(b[at:], a.AskID)
		at += copy(b[at:], a.Answer)
	}
	return region(b)
}

//go:wasmexport lp_next_alarm
func nextAlarm() uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	at, ok := machine.NextAlarm()
	if !ok {
		return 0
	}
	out = binary.LittleEndian.AppendUint64(out[:0], uint64(at))
	return region(out)
}

//go:wasmexport lp_snapshot
func snapshot() uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	out = machine.Snapshot()
	return region(out)
}

//go:wasmexport lp_trust
func trust() uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	out = machine.TrustJSON()
	return region(out)
}

// lp_stats gives the machine's counts: live leases, waiters, live
// resources and agents remembered, each a little-endian uint64.
//
//go:wasmexport lp_stats
func stats() uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	st := machine.Stats()
	out = out[:0]
	for _, n := range [...]int{st.Leases, st.Waiters, st.Resources, st.Agents} {
		out = binary.LittleEndian.AppendUint64(out, uint64(n))
	}
	return region(out)
}

// lp_set_semantics makes the machine decide by semantics v; an error
// message region when it cannot, else an empty one.
//
//go:wasmexport lp_set_semantics
func setSemantics(v uint32) uint64 {
	if machine == nil {
		return fail(noMachine)
	}
	if err := machine.SetSemantics(int(v)); err != nil {
		return fail(err.Error())
	}
	out = out[:0]
	return region(out)
}

//go:wasmexport lp_version
func version() uint64 {
	out = []byte(kernel.Version)
	return region(out)
}

//go:wasmexport lp_reset
func reset() {
	machine, out, readyRec = nil, nil, nil
}
