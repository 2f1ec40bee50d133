// Command leaseplane is the one binary of the lease plane: the server, the
// scenario replayer, the CLI client and the static-site writer.
//
// Each subcommand lives in its own file and registers itself in init with
// register; main only dispatches. Only this package reads flags, the
// environment and the real clock.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// subcommand is one verb of the binary. run gets the arguments after the
// verb and returns the process exit status.
type subcommand struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

var commands = map[string]subcommand{}

// register adds a verb; it panics on a duplicate, which is a programming error.
func register(name, summary string, run func(args []string, stdin io.Reader, stdout, stderr io.Writer) int) {
	if _, dup := commands[name]; dup {
		panic("leaseplane: subcommand registered twice: " + name)
	}
	commands[name] = subcommand{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leaseplane COMMAND [ARGS...]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches args to a subcommand; tests call it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "leaseplane: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdin, stdout, stderr)
}
