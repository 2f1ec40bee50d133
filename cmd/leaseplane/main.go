// Command leaseplane is the one binary of the lease plane: the server, the
// scenario replayer, the CLI client and the static-site writer.
//
// This file wires everything: the verbs of the binary, the engines a
// kernel can run in, and what serve mounts beside the REST routes. Each
// verb lives in a file of its own. Only this package reads flags, the
// environment and the real clock.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
)

// command is one verb of the binary. run gets the arguments after the
// verb and returns the process exit status.
type command struct {
	name, summary string
	run           func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands are the verbs, in the order usage lists them.
var commands = []command{
	{"serve", "run the lease plane: serve [--addr 127.0.0.1:8080] [--data ./data] [--engine native|wasm]", runServe},
	{"keys", "manage API keys: keys create|list|revoke --data DIR ...", runKeys},
	{"backup", "copy a data folder while serve runs on it: backup [--data DIR] OUT", runBackup},
	{"restore", "put a backup into an empty data folder, fences raised: restore [--data DIR] BACKUP", runRestore},
	{"lease", "acquire or renew a lease: lease RESOURCE --as DID [--mode read|write|delete]", runLease},
	{"release", "release a lease: release RESOURCE --as DID [--lease ID]", runRelease},
	{"wait", "print the queues and recent deadlocks of the workspace", runWait},
	{"exec", "run a command while holding a lease: exec RESOURCE --as DID [--timeout DUR] -- CMD ARGS...", runExec},
	{"mcp", "serve the lease tools to an MCP client on stdio, forwarding to a running plane ($LEASEPLANE_URL, $LEASEPLANE_KEY)", runMCP},
	{"replay", "replay a scenario file (or - for stdin) and print its transcript", runReplay},
	{"ledger", "the signed ledger: ledger key | export | watch | status (see ledger -h)", runLedger},
	{"verify", "check a receipt or a ledger bundle offline: verify --key VKEY FILE", runVerify},
	{"drill", "run the six drills against the plane: drill [--wait] (operator key)", runDrill},
	{"detect", "find leases that should never have coexisted: detect --key VKEY BUNDLE | detect --events FILE", runDetect},
	{"version", "print the binary's version, the kernel's semantics version and the Go toolchain", runVersion},
	{"site", "write the playground and the docs as static files: site OUTDIR (or site --listen ADDR to preview them)", runSite},
}

// engines are the kernels serve and replay can run, by --engine name: the
// native Machine, and the wasip1 build under wazero (wasmengine.go).
var engines = map[string]func() (kernel.Factory, error){
	"native": func() (kernel.Factory, error) { return kernel.Native, nil },
	"wasm":   wasmFactory,
}

// mounts are what serve adds to the server beside its REST routes: the
// MCP tools at /mcp (mcp.go) and the pages at / (site.go).
var mounts = []func(*server.Server, mountOptions) error{mountMCP, mountWeb}

// mountOptions are serve's flags that concern what it mounts.
type mountOptions struct {
	mcpToolNames string // mcp.NamesDotted or mcp.NamesUnderscore
}

// engineNames are the names of engines, sorted.
func engineNames() []string {
	var names []string
	for n := range engines {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leaseplane COMMAND [ARGS...]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches args to a verb; tests call it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		return runVersion(nil, stdin, stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			if asksHelp(c.name, args[1:]) {
				// Every verb's help goes to stdout and exits 0.
				c.run(args[1:], stdin, stdout, stdout)
				return 0
			}
			return c.run(args[1:], stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "leaseplane: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// asksHelp reports whether a verb's arguments ask for its help: -h,
// -help or --help before any "--" (for exec, only before "--" when there
// is one, or as its first argument: after RESOURCE its command may take a
// --help of its own).
func asksHelp(verb string, args []string) bool {
	isHelp := func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }
	if verb == "exec" {
		if len(args) > 0 && isHelp(args[0]) {
			return true
		}
		if !slices.Contains(args, "--") {
			return false
		}
	}
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) {
			return true
		}
	}
	return false
}
