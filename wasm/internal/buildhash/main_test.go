package main

import (
	"os"
	"os/exec"
	"path/filepath"
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

// The hash depends on the sources and the toolchain only: not on where
// the module lies, nor on test files; a changed source changes it.
func TestHashFollowsSourcesOnly(t *testing.T) {
	root := "../../.."
	want, err := hash(root, "go1.26.8", "satconv,signext")
	if err != nil {
		t.Fatal(err)
	}
	cp := t.TempDir()
	files := []string{"go.mod"}
	for _, d := range sourceDirs {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(d, e.Name()))
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(cp, filepath.Dir(f)), 0o755)
		if err := os.WriteFile(filepath.Join(cp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(cp, "kernel", "zz_extra_test.go"), []byte("package kernel\n"), 0o644)
	for _, tc := range []struct {
		name     string
		root     string
		goV      string
		same     bool
		mutation func()
	}{
		{"a copy elsewhere, with one more test file", cp, "go1.26.8", true, nil},
		{"another Go version", cp, "go1.26.9", false, nil},
		{"a changed kernel source", cp, "go1.26.8", false, func() {
			os.WriteFile(filepath.Join(cp, "kernel", "zz_extra.go"), []byte("package kernel\n"), 0o644)
		}},
	} {
		if tc.mutation != nil {
			tc.mutation()
		}
		got, err := hash(tc.root, tc.goV, "satconv,signext")
		if err != nil {
			t.Fatal(err)
		}
		if (got == want) != tc.same {
			t.Errorf("%s: hash %s, first %s; want same=%v", tc.name, got, want, tc.same)
		}
	}
}
