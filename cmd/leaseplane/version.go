package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/leaseplane/leaseplane/kernel"
)

// version is the release this binary was built as: make build and make
// release stamp it with -ldflags "-X main.version=..." (git describe).
// Unstamped, `go install module@vX` builds still know their module version.
var version string

// binaryVersion is the stamped version, else the module version the Go
// tool recorded, else "dev".
func binaryVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func runVersion(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(stdout, "usage: leaseplane version\n\nprints the binary's version, the kernel's semantics version and the Go toolchain it was built with.")
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "leaseplane version: takes no arguments (got %q)\n", args[0])
		return 2
	}
	fmt.Fprintf(stdout, "leaseplane %s (kernel %s, %s %s/%s)\n", binaryVersion(), kernel.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
