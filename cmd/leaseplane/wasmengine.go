// The file is not named engine_wasm.go: the _wasm suffix would make it a
// GOARCH=wasm-only file and the native binary would lack the engine.

package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/wasm/wazero"
)

// wasmFactory is made once per process: compiling the kernel is the slow
// part, and every engine it makes has its own instance.
var wasmFactory = sync.OnceValues(func() (kernel.Factory, error) {
	return wazero.NewFactory(context.Background(), wazero.Options{CacheDir: wasmCacheDir()})
})

// wasmCacheDir is where compiled kernel code is kept between runs:
// $LEASEPLANE_WASM_CACHE when set ("off" for none), else the user cache
// directory; empty (in-memory only) when there is none.
func wasmCacheDir() string {
	switch dir := os.Getenv("LEASEPLANE_WASM_CACHE"); dir {
	case "off":
		return ""
	case "":
	default:
		return dir
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "leaseplane", "wazero")
}
