//go:build !(js && wasm)

package main

import (
	"fmt"
	"os"
)

// main on a host OS only says how to build the worker: it runs in
// workerd, built with GOOS=js GOARCH=wasm by make worker.
func main() {
	fmt.Fprintln(os.Stderr, "cmd/worker is the Cloudflare Workers front: build it with make worker (GOOS=js GOARCH=wasm) and run it with make worker-dev")
	os.Exit(2)
}
