package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leaseplane/leaseplane/kernel/detect"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
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
	key := fs.String("key", "", "with BUNDLE: the verifier key (name+hash+base64), or a file holding it")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: leaseplane detect --key VKEY BUNDLE [--json]
       leaseplane detect --events FILE [--json]

Runs the lease-overlap detector: every pair of leases on one resource whose
lives overlap with conflicting modes, and every fence that does not rise.

BUNDLE is a ledger bundle (leaseplane ledger export); it is verified with
VKEY first, and findings name its entries by index. FILE holds events, one
JSON object a line, in the kernel's event form (for ledgers from elsewhere,
or two planes' events merged, e.g. jq -c '.entries[].event' A B). An
event's class decides which modes conflict; an event without class is
taken as exclusive. Events are taken in time order, so merged files need
no sorting. Entries of FILE are named by line number (from 1).

Exit status: 0 nothing found, 1 findings, 2 unreadable or unverifiable
input, or usage.`)
		printFlags(fs)
	}
	rest, err := parseInterleaved(fs, args)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		return exitDetectUnreadable
	}
	var entries []detect.Entry
	src, unit := *events, "line"
	switch {
	case *events != "" && len(rest) == 0:
		if entries, err = readEventLines(*events, stdin); err != nil {
			fmt.Fprintf(stderr, "leaseplane detect: %v\n", err)
			return exitDetectUnreadable
		}
	case *events == "" && len(rest) == 1 && *key != "":
		src, unit = rest[0], "entry"
		if entries, err = readBundle(rest[0], *key, stdin); err != nil {
			fmt.Fprintf(stderr, "leaseplane detect: %s: %v\n", rest[0], err)
			return exitDetectUnreadable
		}
	default:
		fs.Usage()
		return exitDetectUnreadable
	}
	d, _ := detect.Lookup(detect.LeaseOverlap)
	findings, err := d.Run(entries, detect.Options{})
	if err != nil {
		if ee, ok := err.(*detect.EntryError); ok {
			fmt.Fprintf(stderr, "leaseplane detect: %s: %s %d: %v\n", src, unit, ee.Index, ee.Err)
		} else {
			fmt.Fprintf(stderr, "leaseplane detect: %s: %v\n", src, err)
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

// readBundle reads a ledger bundle, verifies it with the verifier key (or
// a file holding it) and returns its entries, indexed as in the ledger.
func readBundle(name, key string, stdin io.Reader) ([]detect.Entry, error) {
	vkey := key
	if !strings.Contains(vkey, "+") {
		b, err := os.ReadFile(vkey)
		if err != nil {
			return nil, fmt.Errorf("--key is neither a verifier key nor a readable file: %w", err)
		}
		vkey = strings.TrimSpace(string(b))
	}
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	b, _, err := kledger.VerifyBundle(data, vkey)
	if err != nil {
		return nil, fmt.Errorf("the bundle does not verify, so nothing in it is looked at: %w", err)
	}
	out := make([]detect.Entry, len(b.Entries))
	for i, e := range b.Entries {
		out[i] = detect.Entry{Index: int64(i), Data: e}
	}
	return out, nil
}
