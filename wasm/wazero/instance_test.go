package wazero

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
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
	if _, err := a.StepJSON([]byte(`{"atMs":1,"op":"acquire","resource":"lock:a","actorDid":"did:web:acme.example:agent:a"}`)); err != nil {
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
	if _, err := e.StepJSON([]byte(`{"atMs":1,"op":"tick"}`)); err == nil {
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

// TestMemoryStaysBounded applies 640,000 commands of 64 agents on
// short-lived resources (the live state stays under a few KB) and checks
// that the instance's linear memory stays bounded: the guest collects its
// own garbage (wasm/wasip1, collect). Without that it held at 7.5 MB up to
// about 500,000 commands, then grew: 56 MB at 600,000, 448 MB at 1.2
// million.
func TestMemoryStaysBounded(t *testing.T) {
	f, err := NewFactory(context.Background(), Options{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	e, err := f.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const pairs = 320000
	now := int64(1_700_000_000_000)
	for i := range pairs {
		c := strconv.Itoa(i % 64)
		body := []byte(`{"resource":"bench:` + c + `:` + strconv.Itoa(i) + `","actorDid":"did:bench:client:` + c + `"}`)
		for _, op := range []kernel.Op{kernel.OpAcquire, kernel.OpRelease} {
			now++
			if r, err := e.Apply(op, now, body); err != nil || r.Status != 200 {
				t.Fatalf("pair %d %s: %v %s", i, op, err, r.Answer)
			}
		}
	}
	const limit = 32 << 20
	if size := e.(*Engine).in.mem.Size(); size > limit {
		t.Fatalf("after %d pairs the instance's linear memory is %d bytes; want at most %d", pairs, size, limit)
	}
}
