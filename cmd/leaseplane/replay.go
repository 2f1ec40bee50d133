package main

import (
	"fmt"
	"io"
	"os"

	"github.com/leaseplane/leaseplane/kernel/scenario"
)

func runReplay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("replay", "usage: leaseplane replay [--engine native|wasm] FILE|-", stderr)
	engine := fs.String("engine", "native", "engine to run the kernel in: native or wasm")
	if code, ok := parseCount(fs, args, 1); !ok {
		return code
	}
	mk, ok := engines[*engine]
	if !ok {
		fmt.Fprintf(stderr, "leaseplane replay: unknown engine %q (want native or wasm)\n", *engine)
		return 2
	}
	var in []byte
	var err error
	if name := fs.Arg(0); name == "-" {
		in, err = io.ReadAll(stdin)
	} else {
		in, err = os.ReadFile(name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane replay: %v\n", err)
		return 1
	}
	f, err := mk()
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane replay: engine %s: %v\n", *engine, err)
		return 1
	}
	out, err := scenario.Replay(f, in)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane replay: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	_, err = stdout.Write(out)
	if err != nil {
		return 1
	}
	return 0
}
