package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestSourceDirsCoverTheBuild: every package of the module that the
// GOOS=js build compiles is hashed, so no change to one of them can leave
// the build's name as it was.
func TestSourceDirsCoverTheBuild(t *testing.T) {
	const module = "github.com/leaseplane/leaseplane/"
	cmd := exec.Command("go", "list", "-deps", "./wasm/js")
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./wasm/js: %v", err)
	}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		if dir, ok := strings.CutPrefix(p, module); ok {
			n++
			if !slices.Contains(sourceDirs, dir) {
				t.Errorf("the GOOS=js build compiles %s, which sourceDirs does not hash", dir)
			}
		}
	}
	if n < 2 {
		t.Fatalf("go list found %d packages of the module in the GOOS=js build", n)
	}
}
