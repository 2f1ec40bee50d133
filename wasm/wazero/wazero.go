// Package wazero runs the kernel's GOOS=wasip1 build (wasm/wasip1) under
// the wazero runtime, as a kernel.Factory named "wasm": the server's second
// engine behind its engine seam and `leaseplane replay --engine wasm`.
//
// The module is compiled once per Factory (with a compilation cache: on
// disk when Options.CacheDir is set, in memory otherwise). It is embedded
// from leaseplane-wasip1.wasm, which `make wasm` builds and which is
// committed (make check-wasm fails when it is not what the sources build).
//
// # Lifecycle
//
// Each Engine owns one module instance holding one kernel Machine from New
// or Restore until Close: the state stays in the instance, so a command
// crosses the boundary as a few bytes (Step: the command the host decoded
// at its edge with the kernel's own decoder; Apply and StepJSON decode
// here, then Step) and comes back as one Ready record (answer, typed
// events, asks answered, what to log, the next alarm), with no reflection
// on either side.
// An instance is never used by two Engines at once, and each Engine
// guards its instance with a mutex: wazero instances are not safe for
// concurrent use, so an Engine shared by mistake serialises instead of
// crashing the process. A trap breaks the instance for good; every later
// call on that Engine returns an error naming the trap, and the host should
// Restore a fresh Engine from its last snapshot and log.
//
// Close drops the Machine (lp_reset) and keeps the instance in a small
// idle pool (Options.MaxIdle, default 2 × GOMAXPROCS) for the next New or
// Restore: starting a fresh instance means starting the Go runtime inside
// it, which costs far more than starting a machine in a pooled one.
//
// So one instance per open workspace, not a shared pool that swaps
// Machines in and out per command: a swap is a Snapshot plus a Restore,
// the cost of many commands. Memory is the limit instead (every instance
// has its own linear memory), so a host with many idle workspaces should
// hibernate them: Snapshot, Close (the instance returns to the pool) and
// Restore on the next command.
//
// Compiling the module is slow; with Options.CacheDir a later process
// loads the compiled code instead. docs/BENCHMARKS.md ("WebAssembly")
// measures all of these.
//
// The ABI is documented in wasm/wasip1's package doc.
package wazero

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/leaseplane/leaseplane/kernel"
)

// kernelWasm is the wasip1 reactor that `make wasm` builds (committed).
//
//go:embed leaseplane-wasip1.wasm
var kernelWasm []byte

// abiVersion is the wasm/wasip1 ABI this host speaks.
const abiVersion = 1

// Options configure a Factory.
type Options struct {
	// CacheDir keeps compiled code between processes; empty means an
	// in-memory cache for this Factory only.
	CacheDir string
	// MaxIdle is how many closed engines' instances are kept for reuse;
	// 0 means 2 × GOMAXPROCS, negative means none.
	MaxIdle int
}

// Factory makes wasm engines: kernel.Factory with Name "wasm". New,
// Restore and Close are safe for concurrent use; each Engine is used by
// one goroutine at a time (its lock enforces it).
type Factory struct {
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	compiled wazero.CompiledModule
	config   wazero.ModuleConfig

	mu      sync.Mutex
	idle    []*instance
	maxIdle int
	closed  bool
}

var _ kernel.Factory = (*Factory)(nil)

// NewFactory compiles the embedded kernel and checks its ABI version.
func NewFactory(ctx context.Context, opts Options) (*Factory, error) {
	var cache wazero.CompilationCache
	if opts.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm engine: compilation cache %s: %w", opts.CacheDir, err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	maxIdle := opts.MaxIdle
	if maxIdle == 0 {
		maxIdle = 2 * runtime.GOMAXPROCS(0)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	f := &Factory{rt: rt, cache: cache, maxIdle: max(maxIdle, 0)}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		f.Close(ctx)
		return nil, fmt.Errorf("wasm engine: WASI: %w", err)
	}
	// Compile functions on every core: the module is large.
	compiled, err := rt.CompileModule(experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0)), kernelWasm)
	if err != nil {
		f.Close(ctx)
		return nil, fmt.Errorf("wasm engine: compiling the kernel: %w", err)
	}
	f.compiled = compiled
	// The name is empty so that many instances can live in one runtime.
	f.config = wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	in, err := f.instantiate(ctx)
	if err != nil {
		f.Close(ctx)
		return nil, err
	}
	v, err := in.call1(in.fABI, 0)
	if err != nil || v != abiVersion {
		in.mod.Close(ctx)
		f.Close(ctx)
		return nil, fmt.Errorf("wasm engine: the embedded kernel speaks ABI %d, this host %d (err %v): run make wasm", v, abiVersion, err)
	}
	f.put(in)
	return f, nil
}

// Name is "wasm".
func (f *Factory) Name() string { return "wasm" }

// New starts an empty machine with rules in an instance of its own.
func (f *Factory) New(rules []byte) (kernel.Engine, error) {
	return f.start(rules, false)
}

// Restore starts a machine from a snapshot in an instance of its own.
func (f *Factory) Restore(snapshot []byte) (kernel.Engine, error) {
	return f.start(snapshot, true)
}

// Close frees the runtime, every instance it made and the in-memory cache.
// Engines still open fail from then on.
func (f *Factory) Close(ctx context.Context) error {
	f.mu.Lock()
	f.closed, f.idle = true, nil
	f.mu.Unlock()
	err := f.rt.Close(ctx)
	if cerr := f.cache.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// get takes an idle instance or starts a new one.
func (f *Factory) get() (*instance, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errors.New("wasm engine: the factory is closed")
	}
	if n := len(f.idle); n > 0 {
		in := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		return in, nil
	}
	f.mu.Unlock()
	return f.instantiate(context.Background())
}

// put keeps a healthy instance for reuse, or frees it.
func (f *Factory) put(in *instance) {
	if in.broken == nil {
		if _, err := in.call0(in.fReset); err == nil {
			f.mu.Lock()
			if !f.closed && len(f.idle) < f.maxIdle {
				f.idle = append(f.idle, in)
				f.mu.Unlock()
				return
			}
			f.mu.Unlock()
		}
	}
	in.mod.Close(in.ctx)
}

func (f *Factory) start(b []byte, restore bool) (kernel.Engine, error) {
	in, err := f.get()
	if err != nil {
		return nil, err
	}
	fn := in.fNew
	if restore {
		fn = in.fRestore
	}
	if err := in.write(b); err != nil {
		f.put(in)
		return nil, err
	}
	r, err := in.call1(fn, uint64(len(b)))
	if err != nil {
		f.put(in)
		return nil, err
	}
	if r&errFlag != 0 {
		msg, err := in.read(r)
		f.put(in)
		if err != nil {
			return nil, err
		}
		return nil, errors.New(string(msg))
	}
	return &Engine{f: f, in: in}, nil
}

const errFlag = 1 << 63

// instance is one module instance and the host's view of its ABI.
type instance struct {
	ctx    context.Context
	mod    api.Module
	mem    api.Memory
	broken error

	fABI, fBuffer, fNew, fRestore, fAlarm, fSnapshot, fTrust, fStats, fSetSem, fReset api.Function
	fStepCommand                                                                      api.Function

	inPtr, inCap uint32
	stack        [3]uint64
}

func (f *Factory) instantiate(ctx context.Context) (*instance, error) {
	mod, err := f.rt.InstantiateModule(ctx, f.compiled, f.config)
	if err != nil {
		return nil, fmt.Errorf("wasm engine: starting an instance: %w", err)
	}
	in := &instance{ctx: context.Background(), mod: mod, mem: mod.Memory()}
	for _, x := range []struct {
		fn   *api.Function
		name string
	}{
		{&in.fABI, "lp_abi_version"}, {&in.fBuffer, "lp_buffer"}, {&in.fNew, "lp_new"},
		{&in.fRestore, "lp_restore"},
		{&in.fAlarm, "lp_next_alarm"}, {&in.fSnapshot, "lp_snapshot"}, {&in.fTrust, "lp_trust"}, {&in.fStats, "lp_stats"}, {&in.fSetSem, "lp_set_semantics"},
		{&in.fReset, "lp_reset"}, {&in.fStepCommand, "lp_step_command"},
	} {
		if *x.fn = mod.ExportedFunction(x.name); *x.fn == nil {
			mod.Close(ctx)
			return nil, fmt.Errorf("wasm engine: the embedded kernel lacks export %s: run make wasm", x.name)
		}
	}
	if in.mem == nil {
		mod.Close(ctx)
		return nil, errors.New("wasm engine: the embedded kernel exports no memory")
	}
	return in, nil
}

// call1 calls fn with its first parameter p0 (further ones already in
// in.stack[1:]) and returns its one result. A trap breaks the instance.
func (in *instance) call1(fn api.Function, p0 uint64) (uint64, error) {
	if in.broken != nil {
		return 0, in.broken
	}
	in.stack[0] = p0
	if err := fn.CallWithStack(in.ctx, in.stack[:]); err != nil {
		in.broken = fmt.Errorf("wasm engine: %s trapped; the instance is unusable: %w", fn.Definition().Name(), err)
		in.mod.Close(in.ctx)
		return 0, in.broken
	}
	return in.stack[0], nil
}

func (in *instance) call0(fn api.Function) (uint64, error) { return in.call1(fn, 0) }

// reserve makes the input buffer hold at least n bytes.
func (in *instance) reserve(n int) error {
	if uint32(n) <= in.inCap && in.inCap != 0 {
		return nil
	}
	ptr, err := in.call1(in.fBuffer, uint64(n))
	if err != nil {
		return err
	}
	in.inPtr, in.inCap = uint32(ptr), uint32(max(n, 1))
	return nil
}

// write puts b at the start of the guest's input buffer.
func (in *instance) write(b []byte) error {
	if err := in.reserve(len(b)); err != nil {
		return err
	}
	if !in.mem.Write(in.inPtr, b) {
		return in.fault("input buffer out of range")
	}
	return nil
}

// view returns the region r names, aliasing guest memory until the next call.
func (in *instance) view(r uint64) ([]byte, bool) {
	ptr, n := uint32(r>>32)&0x7fffffff, uint32(r)
	if n == 0 {
		return nil, true
	}
	return in.mem.Read(ptr, n)
}

// read copies the region r names.
func (in *instance) read(r uint64) ([]byte, error) {
	v, ok := in.view(r)
	if !ok {
		return nil, in.fault("result region out of range")
	}
	return append([]byte(nil), v...), nil
}

func (in *instance) fault(what string) error {
	in.broken = fmt.Errorf("wasm engine: %s; the instance is unusable", what)
	in.mod.Close(in.ctx)
	return in.broken
}

// output turns a region result into bytes or the guest's error.
func (in *instance) output(r uint64) ([]byte, error) {
	b, err := in.read(r)
	if err != nil {
		return nil, err
	}
	if r&errFlag != 0 {
		return nil, fmt.Errorf("wasm engine: %s", b)
	}
	return b, nil
}

// eventType is b as a string, without allocating for the kernel's own
// event types.
func eventType(b []byte) string {
	switch string(b) {
	case "coordination.lease":
		return "coordination.lease"
	case "coordination.renew":
		return "coordination.renew"
	case "coordination.release":
		return "coordination.release"
	case "coordination.expire":
		return "coordination.expire"
	case "coordination.revoke":
		return "coordination.revoke"
	case "operator.suspend":
		return "operator.suspend"
	case "operator.resume":
		return "operator.resume"
	case "operator.forget":
		return "operator.forget"
	}
	return string(b)
}

// Engine is one kernel Machine in a module instance that no other Engine
// uses while this one is open.
type Engine struct {
	mu sync.Mutex
	f  *Factory
	in *instance // nil once closed
	// alarm is the machine's next alarm as the last Apply's answer gave it
	// (alarmKnown), so NextAlarm needs no call into the instance.
	alarm               int64
	alarmOK, alarmKnown bool
}

var _ kernel.Engine = (*Engine)(nil)

var errClosed = errors.New("wasm engine: the engine is closed")

// lock returns the instance, held until e.mu is unlocked.
func (e *Engine) lock() (*instance, error) {
	e.mu.Lock()
	if e.in == nil {
		e.mu.Unlock()
		return nil, errClosed
	}
	return e.in, nil
}

// Apply decodes a REST body for op and applies it at nowMs: Step with the
// command kernel.DecodeCommand makes of it, as a Result.
func (e *Engine) Apply(op kernel.Op, nowMs int64, body []byte) (kernel.Result, error) {
	return e.result(e.Step(kernel.DecodeCommand(op, nowMs, body)))
}

// result is a Step's Ready as the Result of Apply and StepJSON.
func (e *Engine) result(r kernel.Ready, err error) (kernel.Result, error) {
	if err != nil {
		return kernel.Result{}, err
	}
	answer := r.Answer
	if answer == nil {
		answer = []byte("null")
	}
	return kernel.Result{Status: r.Status, RetryAfterSec: r.RetryAfterSec, Answer: answer, Events: r.Events, Changed: r.Changed}, nil
}

// Step applies a command the host decoded at its edge and returns what
// the host must do.
//
// The command crosses as a few fixed fields and its strings
// (lp_step_command): JSON decoding is the part of a command that Go's
// WebAssembly runs slowest, so the host decodes it natively with the
// kernel's own decoder, the code the guest would run. A command that did
// not decode crosses with its Invalid message, so the answer to a bad
// request is still the guest's own. The guest validates the command again
// before it applies it. The Ready comes back as one record (wasm/wasip1),
// copied into one allocation.
func (e *Engine) Step(c kernel.Command) (kernel.Ready, error) {
	in, err := e.lock()
	if err != nil {
		return kernel.Ready{}, err
	}
	defer e.mu.Unlock()
	e.alarmKnown = false
	n := kernel.RecordLen(c)
	if err := in.reserve(n); err != nil {
		return kernel.Ready{}, err
	}
	buf, ok := in.mem.Read(in.inPtr, uint32(n))
	if !ok {
		return kernel.Ready{}, in.fault("input buffer out of range")
	}
	kernel.PutRecord(buf, c)
	r, err := in.call1(in.fStepCommand, uint64(n))
	if err != nil {
		return kernel.Ready{}, err
	}
	rd, err := in.ready(r)
	if err != nil {
		return kernel.Ready{}, err
	}
	e.alarm, e.alarmOK, e.alarmKnown = rd.NextAlarm, rd.AlarmOK, true
	return rd, nil
}

// The Ready record's parts (wasm/wasip1).
const readyHeader, readyEvent, readyAnswer = 40, 40, 16

// ready decodes a Ready record into one allocation: the answers' and
// events' bytes alias it, their strings are copied.
func (in *instance) ready(r uint64) (kernel.Ready, error) {
	if r&errFlag != 0 {
		_, err := in.output(r)
		return kernel.Ready{}, err
	}
	rec, ok := in.view(r)
	if !ok || len(rec) < readyHeader {
		return kernel.Ready{}, in.fault("malformed ready record")
	}
	le := binary.LittleEndian
	flags := le.Uint32(rec[8:])
	nev, nans := uint64(le.Uint32(rec[12:])), uint64(le.Uint32(rec[16:]))
	fixed := readyHeader + readyEvent*nev + readyAnswer*nans
	if fixed > uint64(len(rec)) {
		return kernel.Ready{}, in.fault("malformed ready record")
	}
	rd := kernel.Ready{
		Status:        int(le.Uint32(rec[0:])),
		RetryAfterSec: int(le.Uint32(rec[4:])),
		Log:           flags&1 != 0,
		AlarmOK:       flags&2 != 0,
		SnapshotDue:   flags&4 != 0,
		Changed:       flags&8 != 0,
		NextAlarm:     int64(le.Uint64(rec[32:])),
	}
	data := append([]byte(nil), rec[fixed:]...)
	bad := false
	take := func(n uint32) []byte {
		if uint64(n) > uint64(len(data)) {
			bad = true
			return nil
		}
		b := data[:n:n]
		data = data[n:]
		return b
	}
	answer := take(le.Uint32(rec[20:]))
	if flags&16 == 0 {
		rd.Answer = answer
		if rd.Answer == nil {
			rd.Answer = []byte{}
		}
	}
	rd.AskID = string(take(le.Uint32(rec[24:])))
	if nev > 0 {
		rd.Events = make([]kernel.Event, nev)
	}
	for i := range rd.Events {
		ent := rec[readyHeader+readyEvent*i:]
		ev := &rd.Events[i]
		ev.AtMs, ev.Fence = int64(le.Uint64(ent)), int64(le.Uint64(ent[8:]))
		ev.Type = eventType(take(le.Uint32(ent[16:])))
		ev.ActorDid = string(take(le.Uint32(ent[20:])))
		ev.Resource = string(take(le.Uint32(ent[24:])))
		ev.LeaseID = string(take(le.Uint32(ent[28:])))
		ev.JSON = take(le.Uint32(ent[32:]))
	}
	if nans > 0 {
		rd.Answers = make([]kernel.AskAnswer, nans)
	}
	for i := range rd.Answers {
		ent := rec[readyHeader+readyEvent*nev+readyAnswer*uint64(i):]
		a := &rd.Answers[i]
		a.Status, a.RetryAfterSec = int(le.Uint32(ent)), int(le.Uint32(ent[4:]))
		a.AskID = string(take(le.Uint32(ent[8:])))
		a.Answer = take(le.Uint32(ent[12:]))
	}
	if bad || len(data) != 0 {
		return kernel.Ready{}, in.fault("malformed ready record")
	}
	return rd, nil
}

// StepJSON applies one scenario step (the seam before Step): Step with
// the command kernel.DecodeStepCommand makes of it, as a Result.
func (e *Engine) StepJSON(step []byte) (kernel.Result, error) {
	return e.result(e.Step(kernel.DecodeStepCommand(step)))
}

// NextAlarm is the time the host should send a tick, if any.
func (e *Engine) NextAlarm() (int64, bool, error) {
	in, err := e.lock()
	if err != nil {
		return 0, false, err
	}
	defer e.mu.Unlock()
	if e.alarmKnown {
		return e.alarm, e.alarmOK, nil
	}
	r, err := in.call0(in.fAlarm)
	if err != nil {
		return 0, false, err
	}
	b, err := in.output(r)
	if err != nil {
		return 0, false, err
	}
	switch len(b) {
	case 0:
		return 0, false, nil
	case 8:
		return int64(binary.LittleEndian.Uint64(b)), true, nil
	}
	return 0, false, in.fault("malformed alarm")
}

// Snapshot is the state as canonical JSON.
func (e *Engine) Snapshot() ([]byte, error) {
	return e.bytes(func(in *instance) api.Function { return in.fSnapshot })
}

// Trust is the trust scores as a JSON object keyed by actorDid.
func (e *Engine) Trust() ([]byte, error) {
	return e.bytes(func(in *instance) api.Function { return in.fTrust })
}

// SetSemantics makes the machine decide by semantics v from the next
// command on.
func (e *Engine) SetSemantics(v int) error {
	in, err := e.lock()
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	e.alarmKnown = false
	r, err := in.call1(in.fSetSem, uint64(v))
	if err != nil {
		return err
	}
	_, err = in.output(r)
	return err
}

// Stats counts what the machine holds.
func (e *Engine) Stats() (kernel.Stats, error) {
	b, err := e.bytes(func(in *instance) api.Function { return in.fStats })
	if err != nil {
		return kernel.Stats{}, err
	}
	if len(b) != 32 {
		return kernel.Stats{}, fmt.Errorf("wasm engine: lp_stats gave %d bytes, want 32", len(b))
	}
	n := func(i int) int { return int(binary.LittleEndian.Uint64(b[8*i:])) }
	return kernel.Stats{Leases: n(0), Waiters: n(1), Resources: n(2), Agents: n(3)}, nil
}

func (e *Engine) bytes(fn func(*instance) api.Function) ([]byte, error) {
	in, err := e.lock()
	if err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	r, err := in.call0(fn(in))
	if err != nil {
		return nil, err
	}
	return in.output(r)
}

// Close gives the instance back to the factory (its machine dropped) for
// a later engine, or frees it; later calls return an error.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.in == nil {
		return nil
	}
	e.f.put(e.in)
	e.in = nil
	return nil
}
