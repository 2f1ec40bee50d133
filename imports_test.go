// Package leaseplane_test holds the checks that span the whole module: the
// dependency rules of docs/ARCHITECTURE.md, enforced on every `make test`.
package leaseplane_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/leaseplane/leaseplane"

type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// listPackages lists the module's packages for every target the project
// builds for, so the js and wasip1 mains are checked too. Keys are paths
// relative to the module ("." for its root).
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
			me := rel(p.ImportPath)
			q := out[me]
			if q == nil {
				q = &pkg{ImportPath: p.ImportPath, Dir: p.Dir}
				out[me] = q
			}
			q.GoFiles = union(q.GoFiles, p.GoFiles)
			q.Imports = union(q.Imports, p.Imports)
			q.TestImports = union(q.TestImports, append(p.TestImports, p.XTestImports...))
		}
	}
	if len(out) < 3 {
		t.Fatalf("go list found only %d packages", len(out))
	}
	return out
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
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

// under reports whether package p is dir or inside it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// layers is the table of docs/ARCHITECTURE.md: for each top-level
// directory, the module's packages its packages may import. cmd/ wires
// everything; the module root holds only these tests.
var layers = map[string][]string{
	"kernel": {"kernel"},
	"wasm":   {"kernel", "wasm/internal", "wasm/wazero"},
	"server": {"kernel", "server"},
	"web":    {"kernel", "web"},
	"cmd":    {"kernel", "wasm", "server", "web", "cmd"},
	".":      nil,
}

// homes maps each third-party library to the one package allowed to import
// it (rule 2). A library matches its module path and the packages under it.
// The test-only libraries check the ledger's interoperability and the MCP
// tools' schemas, and porcupine checks linearizability; tests anywhere may
// import any library listed here.
var homes = map[string]string{
	"github.com/tetratelabs/wazero":          "wasm/wazero",
	"github.com/a-h/templ":                   "web",
	"modernc.org/sqlite":                     "server/store",
	"github.com/modelcontextprotocol/go-sdk": "server/mcp",
	"github.com/google/jsonschema-go":        "server/mcp",
	"github.com/prometheus/client_golang":    "server",
	"github.com/syumai/workers":              "cmd/worker",
	"golang.org/x/mod":                       "kernel/ledger",
	"github.com/transparency-dev/formats":    "kernel/ledger",
	"github.com/transparency-dev/merkle":     "kernel/ledger",
	"github.com/anishathalye/porcupine":      "server/lincheck",
}

// testOnly are the libraries of homes that only tests may import.
var testOnly = []string{"github.com/google/jsonschema-go", "github.com/transparency-dev/formats", "github.com/transparency-dev/merkle",
	"github.com/anishathalye/porcupine"}

// kernelThirdParty is the one exception to the kernel's standard library
// only rule: kernel/ledger may import x/mod's tlog and note, which are pure
// Go (rule 1).
var kernelThirdParty = map[string][]string{
	"kernel/ledger": {"golang.org/x/mod/sumdb/tlog", "golang.org/x/mod/sumdb/note"},
}

// kernelForbidden are standard packages the kernel must not import: no
// clock, no randomness, no I/O, no goroutine machinery (rule 1), and no
// reflection, which dominates a command's cost inside WebAssembly and the
// size of the browser build.
var kernelForbidden = []string{"time", "math/rand", "math/rand/v2", "crypto/rand", "os", "io/fs",
	"net", "net/http", "syscall", "sync", "sync/atomic", "runtime", "unsafe", "os/exec", "log", "log/slog", "flag",
	"encoding/json", "reflect", "fmt"}

// kernelMayDraw: kernel/scenario draws seeded, reproducible scenarios for
// tests; the kernel itself draws nothing.
var kernelMayDraw = map[string]string{"kernel/scenario": "math/rand/v2"}

// kernelAPIImports: kernel/api, the REST contract every host speaks, is
// pure data and functions over the kernel: it imports the kernel and the
// standard library only (not the ledger, the scenarios or the detectors).
var kernelAPIImports = []string{"kernel"}

// hosts are the module's hosts of the kernel: the Go server, the Workers
// front and the WebAssembly builds (browser, wasip1 and its wazero host).
// No host imports another host's package: what they must agree on is in
// the kernel and kernel/api. cmd/leaseplane wires the server to the wazero
// engine and the pages, so it is no host of its own.
var hosts = []string{"server", "cmd/worker", "wasm"}

// hostOf is the host package p belongs to, or "".
func hostOf(p string) string {
	for _, h := range hosts {
		if under(p, h) {
			return h
		}
	}
	return ""
}

func homeOf(imp string) (lib, home string) {
	for l, h := range homes {
		if under(imp, l) {
			return l, h
		}
	}
	return "", ""
}

func layerOf(me string) string {
	first, _, _ := strings.Cut(me, "/")
	return first
}

func TestDependencyRules(t *testing.T) {
	pkgs := listPackages(t)
	for lib, home := range homes {
		if pkgs[home] == nil {
			t.Errorf("homes names %s as the home of %s, but the module has no package %s", home, lib, home)
		}
	}
	// The rules below name these packages: a move that left one of them
	// without a package would switch its rule off without a word.
	for _, h := range append([]string{"kernel/api"}, hosts...) {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(pkgs)), func(p string) bool { return under(p, h) }) {
			t.Errorf("the dependency rules name %s, but the module has no package there", h)
		}
	}
	for me, p := range pkgs {
		allowed, ok := layers[layerOf(me)]
		if !ok {
			t.Errorf("%s is in no layer of the dependency rules: add its directory to layers (and docs/ARCHITECTURE.md)", me)
			continue
		}
		for _, imp := range p.Imports {
			switch {
			case isStd(imp):
				if under(me, "kernel") && slices.Contains(kernelForbidden, imp) && kernelMayDraw[me] != imp {
					t.Errorf("%s imports %s: the kernel must not read clocks, draw randomness, do I/O, start goroutines or reflect", me, imp)
				}
				if imp == "flag" && layerOf(me) != "cmd" {
					t.Errorf("%s imports flag: only cmd/ reads flags", me)
				}
			case under(imp, module):
				them := rel(imp)
				if layerOf(me) != "cmd" && !slices.ContainsFunc(allowed, func(dir string) bool { return under(them, dir) }) {
					t.Errorf("%s imports %s: %s/ may import only %v of the module", me, them, layerOf(me), allowed)
				}
				if them == "wasm/wazero" && layerOf(me) == "wasm" && me != "wasm/parity" {
					t.Errorf("%s imports wasm/wazero: only cmd/ wires engines", me)
				}
				if me == "kernel/api" && !slices.Contains(kernelAPIImports, them) {
					t.Errorf("kernel/api imports %s: the REST contract imports only %v of the module", them, kernelAPIImports)
				}
				if h, ht := hostOf(me), hostOf(them); h != "" && ht != "" && h != ht {
					t.Errorf("%s imports %s: no host imports another host's package (%s and %s); share through kernel/api or the kernel", me, them, h, ht)
				}
			default:
				if under(me, "kernel") && !slices.Contains(kernelThirdParty[me], imp) {
					t.Errorf("%s imports %s: the kernel imports only the standard library", me, imp)
					continue
				}
				lib, home := homeOf(imp)
				switch {
				case home == "":
					t.Errorf("%s imports %s, which has no home package: add it to homes (rule 2)", me, imp)
				case !under(me, home):
					t.Errorf("%s imports %s, whose one home is %s (rule 2)", me, imp, home)
				case slices.Contains(testOnly, lib):
					t.Errorf("%s imports %s, which only its tests may import", me, imp)
				}
			}
		}
		// Tests may use any library of the table (the ledger's interop
		// checks run in kernel/ledger and server alike), but no other.
		for _, imp := range p.TestImports {
			if isStd(imp) || under(imp, module) {
				continue
			}
			if _, home := homeOf(imp); home == "" {
				t.Errorf("tests of %s import %s, which has no home package: add it to homes (rule 2)", me, imp)
			}
		}
	}
}

// buildTools are commands that `go generate` or the Makefile runs at
// build time; like cmd/, they may read their arguments.
var buildTools = []string{"web/internal/corpusgen", "wasm/internal/buildhash"}

// sourceFiles parses the non-test Go files of every package outside cmd/
// and the build tools, and calls f with each package, file name and syntax
// tree.
func sourceFiles(t *testing.T, f func(me, name string, file *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	for me, p := range listPackages(t) {
		if layerOf(me) == "cmd" || slices.Contains(buildTools, me) {
			continue
		}
		for _, name := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("%s/%s: %v", me, name, err)
			}
			f(me, name, file)
		}
	}
}

// uses calls f with every pkg.Name selector in file, where pkg is the name
// file gives the import path.
func uses(file *ast.File, path string, f func(name string)) {
	local := ""
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			local = path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" {
		return
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
				f(sel.Sel.Name)
			}
		}
		return true
	})
}

// TestOnlyCmdReadsEnvironment looks for the process's environment and
// arguments outside cmd/ in non-test code (rule 4).
func TestOnlyCmdReadsEnvironment(t *testing.T) {
	sourceFiles(t, func(me, name string, file *ast.File) {
		uses(file, "os", func(sel string) {
			switch sel {
			case "Getenv", "LookupEnv", "Environ", "Args":
				t.Errorf("%s/%s uses os.%s: only cmd/ reads the environment and arguments", me, name, sel)
			}
		})
	})
}

// TestServerSeesKernelThroughEngine checks rule 3: the server makes
// machines only through the kernel.Factory it is given, never a Machine of
// its own, so the native and wasm engines run the same server code. (The
// drills' reference replay makes one, in kernel/drill, which every host
// shares.)
func TestServerSeesKernelThroughEngine(t *testing.T) {
	sourceFiles(t, func(me, name string, file *ast.File) {
		if layerOf(me) != "server" {
			return
		}
		uses(file, module+"/kernel", func(sel string) {
			switch sel {
			case "Machine", "New", "Restore", "Native":
				t.Errorf("%s/%s uses kernel.%s: the server sees the kernel only through its Config.Engine (kernel.Factory)", me, name, sel)
			}
		})
	})
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
