package wazero

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sharedCache is the compilation cache `leaseplane replay --engine wasm`
// uses, so tests after the first skip the seconds of compiling.
func sharedCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "leaseplane", "wazero")
}

// BenchmarkInstantiate starts and frees an instance with no pool: the cost
// one workspace pays to get an engine of its own. linear-bytes is the
// instance's memory after it has started a machine.
func BenchmarkInstantiate(b *testing.B) {
	f, err := NewFactory(context.Background(), Options{MaxIdle: -1, CacheDir: sharedCache()})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close(context.Background())
	var size uint32
	for b.Loop() {
		e, err := f.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		size = e.(*Engine).in.mem.Size()
		e.Close()
	}
	b.ReportMetric(float64(size), "linear-bytes")
}

// BenchmarkNewFactory compiles the kernel: "memory" with a fresh in-memory
// cache each time, "dir" from a warm on-disk cache (Options.CacheDir).
func BenchmarkNewFactory(b *testing.B) {
	ctx := context.Background()
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
			f, err := NewFactory(ctx, Options{})
			if err != nil {
				b.Fatal(err)
			}
			f.Close(ctx)
		}
	})
	b.Run("dir", func(b *testing.B) {
		dir := b.TempDir()
		f, err := NewFactory(ctx, Options{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		f.Close(ctx)
		for b.Loop() {
			f, err := NewFactory(ctx, Options{CacheDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			f.Close(ctx)
		}
	})
}

// TestPoolReuse checks that a closed engine's instance serves the next
// engine with a fresh machine, and that a full pool frees instances.
func TestPoolReuse(t *testing.T) {
	ctx := context.Background()
	f, err := NewFactory(ctx, Options{MaxIdle: 1, CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	a, err := f.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step([]byte(`{"atMs":1,"op":"acquire","resource":"lock:a","actorDid":"did:web:acme.example:agent:a"}`)); err != nil {
		t.Fatal(err)
	}
	first := a.(*Engine).in
	a.Close()
	b, err := f.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.(*Engine).in != first {
		t.Fatal("the idle instance was not reused")
	}
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	empty, _ := f.New(nil) // a second instance, started fresh
	want, _ := empty.Snapshot()
	if string(snap) != string(want) {
		t.Fatalf("a reused instance kept state: %s, want %s", snap, want)
	}
	b.Close()
	empty.Close()
	f.mu.Lock()
	idle := len(f.idle)
	f.mu.Unlock()
	if idle != 1 {
		t.Fatalf("%d idle instances, want MaxIdle = 1", idle)
	}
	// A failed New gives its instance back too.
	if _, err := f.New([]byte(`{"bogus":1}`)); err == nil {
		t.Fatal("New accepted bad rules")
	}
	if len(f.idle) != 1 {
		t.Fatalf("%d idle instances after a refused New, want 1", len(f.idle))
	}
}

// TestClosedFactory checks that engines outliving their factory fail with
// an error instead of crashing, and that the factory refuses new engines.
func TestClosedFactory(t *testing.T) {
	ctx := context.Background()
	f, err := NewFactory(ctx, Options{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	e, err := f.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step([]byte(`{"atMs":1,"op":"tick"}`)); err == nil {
		t.Fatal("Step on an engine of a closed factory: no error")
	}
	if _, err := e.Snapshot(); err == nil {
		t.Fatal("Snapshot after a failed call: no error")
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := f.New(nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("New on a closed factory: %v, want an error saying closed", err)
	}
}
