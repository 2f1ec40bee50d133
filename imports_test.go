// Package leaseplane_test holds the checks that span the whole module: the
// dependency rules of DESIGN.md, enforced on every `make test`.
package leaseplane_test

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leaseplane/leaseplane"

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
}

// listPackages lists the module's packages for every target the project
// builds for, so the js and wasip1 mains are checked too.
func listPackages(t *testing.T) map[string]*pkg {
	t.Helper()
	out := map[string]*pkg{}
	for _, env := range [][]string{nil, {"GOOS=js", "GOARCH=wasm"}, {"GOOS=wasip1", "GOARCH=wasm"}} {
		cmd := exec.Command("go", "list", "-e", "-json", "./...")
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go list %v: %v\n%s", env, err, stderr.String())
		}
		dec := json.NewDecoder(&stdout)
		for {
			var p pkg
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			q := out[p.ImportPath]
			if q == nil {
				q = &pkg{ImportPath: p.ImportPath, Dir: p.Dir}
				out[p.ImportPath] = q
			}
			q.GoFiles = union(q.GoFiles, p.GoFiles)
			q.Imports = union(q.Imports, p.Imports)
		}
	}
	return out
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			a = append(a, s)
			seen[s] = true
		}
	}
	return a
}

func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// homes maps each third-party library to the one package allowed to import
// it (DESIGN.md, rule 2). A prefix matches the module and its packages.
var homes = map[string]string{
	"github.com/tetratelabs/wazero":          "wasm/wazero",
	"github.com/a-h/templ":                   "web",
	"modernc.org/sqlite":                     "server/store",
	"github.com/modelcontextprotocol/go-sdk": "server/mcp",
	"github.com/prometheus/client_golang":    "server",
	"github.com/syumai/workers":              "cmd/worker",
	"golang.org/x/mod":                       "kernel/ledger",
}

// kernelForbidden are standard packages the kernel must not import: no
// clock, no randomness, no I/O, no goroutine machinery (rule 1).
var kernelForbidden = []string{"time", "math/rand", "math/rand/v2", "crypto/rand", "os", "io/fs",
	"net", "net/http", "syscall", "sync", "sync/atomic", "runtime", "unsafe", "os/exec", "log", "log/slog", "flag",
	// No reflection: it dominates a command's cost inside WebAssembly and
	// the size of the browser build (DESIGN.md, known traps).
	"encoding/json", "reflect", "fmt"}

// kernelMayImport reports the one exception to the kernel's standard
// library only rule: kernel/ledger may import x/mod's tlog and note, which
// are pure Go (DESIGN.md rule 1).
func kernelMayImport(me, imp string) bool {
	return me == "kernel/ledger" && (imp == "golang.org/x/mod/sumdb/tlog" || imp == "golang.org/x/mod/sumdb/note")
}

func TestDependencyRules(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 3 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		me := rel(p.ImportPath)
		for _, imp := range p.Imports {
			switch {
			case isStd(imp):
				if strings.HasPrefix(me, "kernel") {
					for _, f := range kernelForbidden {
						// kernel/scenario draws seeded, reproducible scenarios
						// for tests; the kernel itself draws nothing.
						if imp == f && !(me == "kernel/scenario" && imp == "math/rand/v2") {
							t.Errorf("%s imports %s: the kernel must not read clocks, draw randomness, do I/O or start goroutines", me, imp)
						}
					}
				}
				if imp == "flag" && !strings.HasPrefix(me, "cmd/") {
					t.Errorf("%s imports flag: only cmd/ reads flags", me)
				}
			case strings.HasPrefix(imp, module):
				them := rel(imp)
				if strings.HasPrefix(me, "kernel") && !strings.HasPrefix(them, "kernel") {
					t.Errorf("%s imports %s: the kernel imports only the standard library", me, them)
				}
				if them == "wasm/wazero" && !strings.HasPrefix(me, "cmd/") && !strings.HasPrefix(me, "wasm/") {
					t.Errorf("%s imports wasm/wazero: only cmd/ wires engines; the server sees kernel.Factory (rule 3)", me)
				}
				if (me == "server" || strings.HasPrefix(me, "server/")) && strings.HasPrefix(them, "web") {
					t.Errorf("%s imports %s: the server does not depend on the pages", me, them)
				}
			default:
				home := ""
				for lib, h := range homes {
					if imp == lib || strings.HasPrefix(imp, lib+"/") {
						home = h
					}
				}
				if strings.HasPrefix(me, "kernel") && !kernelMayImport(me, imp) {
					t.Errorf("%s imports %s: the kernel imports only the standard library", me, imp)
				} else if home == "" {
					t.Errorf("%s imports %s, which has no home package in the dependency rules: add it to homes (DESIGN.md rule 2)", me, imp)
				} else if me != home && !strings.HasPrefix(me, home+"/") {
					t.Errorf("%s imports %s, whose one home is %s (DESIGN.md rule 2)", me, imp, home)
				}
			}
		}
	}
}

// TestOnlyCmdReadsEnvironment looks for os.Getenv, os.LookupEnv and
// os.Environ outside cmd/ in non-test code (rule 4).
func TestOnlyCmdReadsEnvironment(t *testing.T) {
	pkgs := listPackages(t)
	fset := token.NewFileSet()
	for _, p := range pkgs {
		me := rel(p.ImportPath)
		if strings.HasPrefix(me, "cmd/") {
			continue
		}
		for _, f := range p.GoFiles {
			src, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution); err != nil {
				t.Fatalf("%s/%s: %v", me, f, err)
			}
			for _, call := range []string{"os.Getenv(", "os.LookupEnv(", "os.Environ("} {
				if bytes.Contains(src, []byte(call)) {
					t.Errorf("%s/%s calls %s...): only cmd/ reads the environment", me, f, strings.TrimSuffix(call, "("))
				}
			}
		}
	}
}

// peerClients are the client libraries of the peers that the load tool
// (cmd/leaseplane-bench, a module of its own) measures against: none may
// reach the product binary.
var peerClients = []string{"github.com/redis/", "go.etcd.io/", "google.golang.org/grpc"}

func TestProductHasNoPeerClients(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/leaseplane")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list -deps ./cmd/leaseplane: %v\n%s", err, stderr.String())
	}
	deps := strings.Fields(stdout.String())
	if !slices.Contains(deps, module+"/server") {
		t.Fatalf("go list -deps ./cmd/leaseplane does not list the server; got %d packages", len(deps))
	}
	for _, d := range deps {
		for _, c := range peerClients {
			if strings.HasPrefix(d, c) {
				t.Errorf("cmd/leaseplane depends on %s: peers' clients belong to cmd/leaseplane-bench's own module", d)
			}
		}
	}
}
