//go:build wasip1

// Command guestbench is a throw-away wasip1 reactor for
// BenchmarkGuestLoops: each export runs one loop of wasm/internal/guestloops
// n times inside the instance, so a benchmark measures the compiled kernel
// code and not the host boundary.
package main

import "github.com/leaseplane/leaseplane/wasm/internal/guestloops"

func main() {}

//go:wasmexport applyJSON
func applyJSON(n uint32) uint32 { return guestloops.ApplyJSON(n) }

//go:wasmexport applyTyped
func applyTyped(n uint32) uint32 { return guestloops.ApplyTyped(n) }

//go:wasmexport decode
func decode(n uint32) uint32 { return guestloops.Decode(n) }

//go:wasmexport alloc
func alloc(n uint32) uint32 { return guestloops.Alloc(n) }

//go:wasmexport maps
func maps(n uint32) uint32 { return guestloops.Maps(n) }
