package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags is the flag set of the verb name: errors go to stderr, and its
// usage prints help (the "usage: leaseplane ..." lines and what the verb
// does), then the flags.
func newFlags(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), help)
		printFlags(fs)
	}
	return fs
}

// parseCount parses args and checks that n positional arguments follow
// the flags; otherwise it says so, prints the usage and gives the exit
// status (0 for -h).
func parseCount(fs *flag.FlagSet, args []string, n int) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		return usageStatus(err), false
	}
	if fs.NArg() != n {
		fmt.Fprintf(fs.Output(), "leaseplane %s: want %d argument(s), got %q\n", fs.Name(), n, fs.Args())
		fs.Usage()
		return exitUsage, false
	}
	return exitOK, true
}

// parsePositional parses args (flags and arguments in any order) and
// checks that want arguments are given; otherwise it says "want what",
// prints the usage and gives the exit status (0 for -h).
func parsePositional(fs *flag.FlagSet, args []string, want int, what string) (pos []string, code int, ok bool) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, usageStatus(err), false
	}
	if len(pos) != want {
		fmt.Fprintf(fs.Output(), "leaseplane %s: want %s\n", fs.Name(), what)
		fs.Usage()
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// subverb is one verb of a command with verbs of its own (keys, ledger).
type subverb func(args []string, stdout, stderr io.Writer) int

// runSubverb runs the verb args[0] names: -h, --help and help print help
// on stdout; no verb or an unknown one prints it on stderr (exit 2).
func runSubverb(name, help string, verbs map[string]subverb, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, help)
		return exitUsage
	}
	if run, ok := verbs[args[0]]; ok {
		return run(args[1:], stdout, stderr)
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, help)
		return exitOK
	}
	fmt.Fprintf(stderr, "leaseplane %s: unknown verb %q\n%s\n", name, args[0], help)
	return exitUsage
}

// parseFlags parses args with fs the same way for every verb: -h and
// --help print the verb's usage on stdout and exit 0; a bad flag prints
// the error and the usage on the verb's error output and exits 2. done is
// false when the verb should go on.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	errOut := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(errOut)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(errOut)
		return exitOK, true
	default:
		fmt.Fprintf(errOut, "leaseplane %s: %v\n", fs.Name(), err)
		fs.Usage()
		return exitUsage, true
	}
}

// printFlags lists fs's flags as the usage lines spell them, with two
// dashes (the flag package's PrintDefaults writes one).
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}
