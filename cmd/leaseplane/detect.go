package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/leaseplane/leaseplane/kernel/detect"
)

// Exit statuses of detect.
const (
	exitDetectClean      = 0 // nothing found
	exitDetectFound      = 1 // at least one finding
	exitDetectUnreadable = 2 // usage, or input that cannot be read or parsed
)

func runDetect(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("detect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	events := fs.String("events", "", "a JSON-lines file of events (- for stdin), one event a line in the kernel's event form")
	asJSON := fs.Bool("json", false, "print the findings as a JSON object instead of lines of text")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: leaseplane detect --events FILE [--json]

Runs the lease-overlap detector: every pair of leases on one resource whose
lives overlap with conflicting modes, and every fence that does not rise.
An event's class decides which modes conflict; an event without class is
taken as exclusive. Events of two planes may be concatenated in one file:
they are taken in time order. Entries are named by line number (from 1).

Exit status: 0 nothing found, 1 findings, 2 unreadable input or usage.`)
		fs.PrintDefaults()
	}
	rest, err := parseInterleaved(fs, args)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		return exitDetectUnreadable
	}
	if *events == "" || len(rest) > 0 {
		fs.Usage()
		return exitDetectUnreadable
	}
	entries, err := readEventLines(*events, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane detect: %v\n", err)
		return exitDetectUnreadable
	}
	d, _ := detect.Lookup(detect.LeaseOverlap)
	findings, err := d.Run(entries, detect.Options{})
	if err != nil {
		if ee, ok := err.(*detect.EntryError); ok {
			fmt.Fprintf(stderr, "leaseplane detect: %s: line %d: %v\n", *events, ee.Index, ee.Err)
		} else {
			fmt.Fprintf(stderr, "leaseplane detect: %s: %v\n", *events, err)
		}
		return exitDetectUnreadable
	}
	return printFindings(stdout, stderr, findings, len(entries), *asJSON)
}

// printFindings writes findings as text lines (or JSON) and returns the
// exit status.
func printFindings(stdout, stderr io.Writer, findings []detect.Finding, n int, asJSON bool) int {
	if findings == nil {
		findings = []detect.Finding{}
	}
	if asJSON {
		b, err := json.MarshalIndent(map[string]any{"entries": n, "findings": findings}, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "leaseplane detect: %v\n", err)
			return exitDetectUnreadable
		}
		stdout.Write(append(b, '\n'))
	} else {
		for _, f := range findings {
			fmt.Fprintf(stdout, "%s: %s\n", f.Kind, f.Text)
		}
		fmt.Fprintf(stdout, "lease-overlap: %d entries, %d findings\n", n, len(findings))
	}
	if len(findings) > 0 {
		return exitDetectFound
	}
	return exitDetectClean
}

// readEventLines reads a JSON-lines file (or stdin for -): each non-blank
// line is one entry, indexed by its line number from 1.
func readEventLines(name string, stdin io.Reader) ([]detect.Entry, error) {
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var out []detect.Entry
	for line := int64(1); sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		out = append(out, detect.Entry{Index: line, Data: bytes.Clone(b)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
