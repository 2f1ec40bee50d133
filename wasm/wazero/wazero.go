// Package wazero runs the kernel's GOOS=wasip1 build (wasm/wasip1) under
// the wazero runtime, as a kernel.Factory named "wasm": the server's second
// engine behind its engine seam and `leaseplane replay --engine wasm`.
//
// The module is compiled once per Factory (with a compilation cache: on
// disk when Options.CacheDir is set, in memory otherwise) and embedded in
// this package by `make wasm`; a plain `go build` without it fails on the
// embed pattern run-make-wasm/leaseplane-wasip1.wasm, which says what to do.
//
// # Lifecycle
//
// Each Engine owns one module instance holding one kernel Machine, created
// by New or Restore and freed by Close: the state stays in the instance,
// so a command crosses the boundary as its JSON bytes and comes back as the
// answer and events bytes, with no per-command decoding on the host. A
// wazero instance is not safe for concurrent use, so each Engine guards its
// instance with a mutex: an Engine shared by mistake serialises instead of
// crashing the process. A trap breaks the instance for good; every later
// call returns an error naming the trap, and the host should Restore a
// fresh Engine from its last snapshot and log.
//
// Why one instance per workspace and not a pool of instances that swap
// Machines in and out: a swap is a Snapshot plus a Restore, and Restore
// decodes JSON with reflection inside wasm, which costs far more than a
// command (see docs/BENCHMARKS.md, "WebAssembly"). An instance costs a few
// megabytes of linear memory and about a millisecond to start from the
// compiled module, so a host with many idle workspaces should Close an idle
// workspace's Engine after persisting its snapshot (hibernate) and Restore
// it on the next command, rather than keep instances in a pool.
//
// The ABI is documented in wasm/wasip1's package doc.
package wazero

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/leaseplane/leaseplane/kernel"
)

// kernelWasm is the wasip1 reactor that `make wasm` builds.
//
//go:embed run-make-wasm/leaseplane-wasip1.wasm
var kernelWasm []byte

// abiVersion is the wasm/wasip1 ABI this host speaks.
const abiVersion = 1

// Options configure a Factory.
type Options struct {
	// CacheDir keeps compiled code between processes; empty means an
	// in-memory cache for this Factory only.
	CacheDir string
}

// Factory makes wasm engines: kernel.Factory with Name "wasm". New and
// Restore are safe for concurrent use; each Engine is not.
type Factory struct {
	rt       wazero.Runtime
	cache    wazero.CompilationCache
	compiled wazero.CompiledModule
	config   wazero.ModuleConfig
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
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	f := &Factory{rt: rt, cache: cache}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		f.Close(ctx)
		return nil, fmt.Errorf("wasm engine: WASI: %w", err)
	}
	compiled, err := rt.CompileModule(ctx, kernelWasm)
	if err != nil {
		f.Close(ctx)
		return nil, fmt.Errorf("wasm engine: compiling the kernel: %w", err)
	}
	f.compiled = compiled
	// The name is empty so that many instances can live in one runtime.
	f.config = wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	e, err := f.instantiate(ctx)
	if err != nil {
		f.Close(ctx)
		return nil, err
	}
	defer e.Close()
	v, err := e.call1(e.fABI, 0)
	if err != nil || v != abiVersion {
		f.Close(ctx)
		return nil, fmt.Errorf("wasm engine: the embedded kernel speaks ABI %d, this host %d (err %v): run make wasm", v, abiVersion, err)
	}
	return f, nil
}

// Name is "wasm".
func (f *Factory) Name() string { return "wasm" }

// New starts an empty machine with rules in a new instance.
func (f *Factory) New(rules []byte) (kernel.Engine, error) {
	return f.start(rules, false)
}

// Restore starts a machine from a snapshot in a new instance.
func (f *Factory) Restore(snapshot []byte) (kernel.Engine, error) {
	return f.start(snapshot, true)
}

// Close frees the runtime, every instance it made and the in-memory cache.
func (f *Factory) Close(ctx context.Context) error {
	err := f.rt.Close(ctx)
	if cerr := f.cache.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

func (f *Factory) start(in []byte, restore bool) (kernel.Engine, error) {
	e, err := f.instantiate(context.Background())
	if err != nil {
		return nil, err
	}
	fn := e.fNew
	if restore {
		fn = e.fRestore
	}
	if err := e.write(in); err != nil {
		e.Close()
		return nil, err
	}
	r, err := e.call1(fn, uint64(len(in)))
	if err != nil {
		e.Close()
		return nil, err
	}
	if r&errFlag != 0 {
		msg, _ := e.read(r)
		e.Close()
		return nil, errors.New(string(msg))
	}
	return e, nil
}

const errFlag = 1 << 63

// Engine is one kernel Machine in its own module instance.
type Engine struct {
	mu     sync.Mutex
	ctx    context.Context
	mod    api.Module
	mem    api.Memory
	broken error

	fABI, fBuffer, fNew, fRestore, fStep, fApply, fAlarm, fSnapshot, fTrust api.Function

	inPtr, inCap uint32
	stack        [3]uint64
}

var _ kernel.Engine = (*Engine)(nil)

func (f *Factory) instantiate(ctx context.Context) (*Engine, error) {
	mod, err := f.rt.InstantiateModule(ctx, f.compiled, f.config)
	if err != nil {
		return nil, fmt.Errorf("wasm engine: starting an instance: %w", err)
	}
	e := &Engine{ctx: context.Background(), mod: mod, mem: mod.Memory()}
	for _, x := range []struct {
		fn   *api.Function
		name string
	}{
		{&e.fABI, "lp_abi_version"}, {&e.fBuffer, "lp_buffer"}, {&e.fNew, "lp_new"},
		{&e.fRestore, "lp_restore"}, {&e.fStep, "lp_step"}, {&e.fApply, "lp_apply"},
		{&e.fAlarm, "lp_next_alarm"}, {&e.fSnapshot, "lp_snapshot"}, {&e.fTrust, "lp_trust"},
	} {
		if *x.fn = mod.ExportedFunction(x.name); *x.fn == nil {
			mod.Close(ctx)
			return nil, fmt.Errorf("wasm engine: the embedded kernel lacks export %s: run make wasm", x.name)
		}
	}
	if e.mem == nil {
		mod.Close(ctx)
		return nil, errors.New("wasm engine: the embedded kernel exports no memory")
	}
	return e, nil
}

// call1 calls fn with up to three parameters already in e.stack[1:] (p0
// given) and returns its one result. A trap breaks the engine.
func (e *Engine) call1(fn api.Function, p0 uint64) (uint64, error) {
	if e.broken != nil {
		return 0, e.broken
	}
	e.stack[0] = p0
	if err := fn.CallWithStack(e.ctx, e.stack[:]); err != nil {
		e.broken = fmt.Errorf("wasm engine: %s trapped; the instance is unusable: %w", fn.Definition().Name(), err)
		e.mod.Close(e.ctx)
		return 0, e.broken
	}
	return e.stack[0], nil
}

// write puts b at the start of the guest's input buffer.
func (e *Engine) write(b []byte) error {
	if err := e.reserve(len(b)); err != nil {
		return err
	}
	if !e.mem.Write(e.inPtr, b) {
		return e.fault("input buffer out of range")
	}
	return nil
}

// view returns the region r names, aliasing guest memory until the next call.
func (e *Engine) view(r uint64) ([]byte, bool) {
	ptr, n := uint32(r>>32)&0x7fffffff, uint32(r)
	if n == 0 {
		return nil, true
	}
	return e.mem.Read(ptr, n)
}

// read copies the region r names.
func (e *Engine) read(r uint64) ([]byte, error) {
	v, ok := e.view(r)
	if !ok {
		return nil, e.fault("result region out of range")
	}
	return append([]byte(nil), v...), nil
}

func (e *Engine) fault(what string) error {
	e.broken = fmt.Errorf("wasm engine: %s; the instance is unusable", what)
	e.mod.Close(e.ctx)
	return e.broken
}

// output turns a region result into bytes or the guest's error.
func (e *Engine) output(r uint64) ([]byte, error) {
	b, err := e.read(r)
	if err != nil {
		return nil, err
	}
	if r&errFlag != 0 {
		return nil, fmt.Errorf("wasm engine: %s", b)
	}
	return b, nil
}

// result decodes a 28-byte result record.
func (e *Engine) result(r uint64) (kernel.Result, error) {
	if r&errFlag != 0 {
		_, err := e.output(r)
		return kernel.Result{}, err
	}
	rec, ok := e.view(r)
	if !ok || len(rec) != 28 {
		return kernel.Result{}, e.fault("malformed result record")
	}
	res := kernel.Result{
		Status:        int(binary.LittleEndian.Uint32(rec[0:])),
		RetryAfterSec: int(binary.LittleEndian.Uint32(rec[4:])),
		Changed:       binary.LittleEndian.Uint32(rec[8:]) != 0,
	}
	aPtr, aLen := binary.LittleEndian.Uint32(rec[12:]), binary.LittleEndian.Uint32(rec[16:])
	ePtr, eLen := binary.LittleEndian.Uint32(rec[20:]), binary.LittleEndian.Uint32(rec[24:])
	a, ok1 := e.mem.Read(aPtr, aLen)
	ev, ok2 := e.mem.Read(ePtr, eLen)
	if !ok1 || !ok2 {
		return kernel.Result{}, e.fault("result bytes out of range")
	}
	buf := make([]byte, len(a)+len(ev))
	copy(buf, a)
	copy(buf[len(a):], ev)
	res.Answer = buf[:len(a):len(a)]
	res.Events = buf[len(a):]
	return res, nil
}

// Apply decodes a REST body for op and applies it at nowMs.
func (e *Engine) Apply(op kernel.Op, nowMs int64, body []byte) (kernel.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(op) + len(body)
	if err := e.reserve(n); err != nil {
		return kernel.Result{}, err
	}
	if !e.mem.WriteString(e.inPtr, string(op)) || !e.mem.Write(e.inPtr+uint32(len(op)), body) {
		return kernel.Result{}, e.fault("input buffer out of range")
	}
	e.stack[1] = uint64(nowMs)
	e.stack[2] = uint64(len(body))
	r, err := e.call1(e.fApply, uint64(len(op)))
	if err != nil {
		return kernel.Result{}, err
	}
	return e.result(r)
}

// reserve makes the input buffer hold at least n bytes.
func (e *Engine) reserve(n int) error {
	if uint32(n) <= e.inCap && e.inCap != 0 {
		return nil
	}
	ptr, err := e.call1(e.fBuffer, uint64(n))
	if err != nil {
		return err
	}
	e.inPtr, e.inCap = uint32(ptr), uint32(max(n, 1))
	return nil
}

// Step applies one scenario step.
func (e *Engine) Step(step []byte) (kernel.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.write(step); err != nil {
		return kernel.Result{}, err
	}
	r, err := e.call1(e.fStep, uint64(len(step)))
	if err != nil {
		return kernel.Result{}, err
	}
	return e.result(r)
}

// NextAlarm is the time the host should send a tick, if any.
func (e *Engine) NextAlarm() (int64, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.call1(e.fAlarm, 0)
	if err != nil {
		return 0, false, err
	}
	b, err := e.output(r)
	if err != nil {
		return 0, false, err
	}
	switch len(b) {
	case 0:
		return 0, false, nil
	case 8:
		return int64(binary.LittleEndian.Uint64(b)), true, nil
	}
	return 0, false, e.fault("malformed alarm")
}

// Snapshot is the state as canonical JSON.
func (e *Engine) Snapshot() ([]byte, error) { return e.bytes(e.fSnapshot) }

// Trust is the trust scores as a JSON object keyed by actorDid.
func (e *Engine) Trust() ([]byte, error) { return e.bytes(e.fTrust) }

func (e *Engine) bytes(fn api.Function) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.call1(fn, 0)
	if err != nil {
		return nil, err
	}
	return e.output(r)
}

// Close frees the instance; later calls return an error.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken == nil {
		e.broken = errors.New("wasm engine: closed")
	}
	return e.mod.Close(e.ctx)
}
