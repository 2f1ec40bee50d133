package wazero_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/leaseplane/leaseplane/wasm/internal/guestloops"
)

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
	for _, name := range guestloops.Names {
		native := guestloops.Loops[name]
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
