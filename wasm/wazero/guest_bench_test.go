package wazero_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/leaseplane/leaseplane/kernel"
)

// The loop bodies of testdata/guestbench, natively. Keep them identical.
var guestBody = []byte(`{"resource":"lock:deploy/production","actorDid":"did:web:acme.example:agent:release"}`)

var sink map[string]int

var nativeLoops = map[string]func(n uint32) uint32{
	"applyJSON": func(n uint32) uint32 {
		m := kernel.New(kernel.Rules{})
		s := 0
		for i := 0; i < int(n); i++ {
			s += m.ApplyJSON(kernel.OpAcquire, int64(i), guestBody).Status
			m.ApplyJSON(kernel.OpRelease, int64(i), guestBody)
		}
		return uint32(s)
	},
	"applyTyped": func(n uint32) uint32 {
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
	},
	"decode": func(n uint32) uint32 {
		s := 0
		for i := 0; i < int(n); i++ {
			c, _ := kernel.DecodeRequest(kernel.OpAcquire, int64(i), guestBody)
			s += len(c.Resource)
			c, _ = kernel.DecodeRequest(kernel.OpRelease, int64(i), guestBody)
			s += len(c.Resource)
		}
		return uint32(s)
	},
	"alloc": func(n uint32) uint32 {
		s := 0
		for i := 0; i < int(n); i++ {
			b := make([]byte, 0, 128)
			b = strconv.AppendInt(b, int64(i), 10)
			b2 := make([]byte, 0, 128)
			b2 = append(b2, b...)
			s += len(b2) + len(string(b2))
		}
		return uint32(s)
	},
	"maps": func(n uint32) uint32 {
		m := map[string]int{"lock:deploy/production": 1, "did:web:acme.example:agent:release": 2}
		s := 0
		for i := 0; i < int(n); i++ {
			s += m["lock:deploy/production"] + m["did:web:acme.example:agent:release"]
		}
		sink = m
		return uint32(s)
	},
}

// BenchmarkGuestLoops runs the same loops natively and inside one wazero
// call each (testdata/guestbench, built like the kernel's wasip1 module),
// so ns/op compares compiled code with no host boundary in between.
func BenchmarkGuestLoops(b *testing.B) {
	mod := filepath.Join(b.TempDir(), "guestbench.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", mod, "./testdata/guestbench")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWASM=satconv,signext")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building testdata/guestbench: %v\n%s", err, out)
	}
	code, err := os.ReadFile(mod)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	inst, err := rt.InstantiateWithConfig(ctx, code, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"applyJSON", "applyTyped", "decode", "alloc", "maps"} {
		native := nativeLoops[name]
		b.Run(name+"/native", func(b *testing.B) {
			b.ResetTimer()
			native(uint32(b.N))
		})
		fn := inst.ExportedFunction(name)
		if fn == nil {
			b.Fatalf("testdata/guestbench lacks export %s", name)
		}
		b.Run(name+"/wasm", func(b *testing.B) {
			b.ResetTimer()
			if _, err := fn.Call(ctx, uint64(b.N)); err != nil {
				b.Fatal(err)
			}
		})
	}
}
