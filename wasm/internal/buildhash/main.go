// Command buildhash prints the short hash that names a browser kernel build
// (leaseplane.version().build): SHA-256 over the Go version, GOWASM and the
// sources the GOOS=js build is made from (go.mod and the non-test Go files
// of the packages in sourceDirs, in byte order of their paths, each
// with its path and length), cut to 12 hex digits.
//
// It reads no environment but its arguments and nothing outside the
// module, so two machines with the same sources and toolchain print the
// same hash (a shell pipeline did not: `go version` names the host's
// GOOS/GOARCH, and glob order follows the locale).
//
// Usage, from the module root: go run ./wasm/internal/buildhash GOVERSION GOWASM
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// sourceDirs are the module's packages the GOOS=js build compiles.
var sourceDirs = []string{"kernel", "kernel/internal/jsontext", "kernel/scenario", "wasm/internal/jsarg", "wasm/js"}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run ./wasm/internal/buildhash GOVERSION GOWASM")
		os.Exit(2)
	}
	h, err := hash(".", os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildhash:", err)
		os.Exit(1)
	}
	fmt.Println(h)
}

// hash returns the build hash of the module at root.
func hash(root, goVersion, goWasm string) (string, error) {
	files := []string{"go.mod"}
	for _, d := range sourceDirs {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", d, err)
		}
		for _, e := range entries {
			n := e.Name()
			if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
				files = append(files, d+"/"+n)
			}
		}
	}
	sort.Strings(files)
	s := sha256.New()
	fmt.Fprintf(s, "go %s\ngowasm %s\n", goVersion, goWasm)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", f, err)
		}
		fmt.Fprintf(s, "%s %d\n", f, len(b))
		io.WriteString(s, string(b))
	}
	return hex.EncodeToString(s.Sum(nil))[:12], nil
}
