package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

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
