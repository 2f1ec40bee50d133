// Command goldendiff shows a reviewer what changed in golden transcripts,
// step by step and field by field, where a line diff shows one long line
// per step.
//
//	go run ./cmd/goldendiff OLD.golden NEW.golden
//	go run ./cmd/goldendiff [-rev REV] [PATH...]
//
// With two files it compares them. Otherwise it compares every golden
// (*.golden) under the paths (default kernel/testdata/scenarios) that
// differs between the commit REV (default HEAD) and the working tree,
// as `git diff REV` would list them; `make golden-diff` runs this form.
// Each change is printed as
//
//	step 3 (atMs 1200, acquire): answer.stampede.waitMs: 50 → 100
//
// steps counted from 1, with the step's atMs and op. A step added or
// removed is printed once, whole. It exits 0 when nothing differs, 1 when
// something does, 2 on an error (a file that is not a transcript).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goldendiff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rev := fs.String("rev", "HEAD", "the commit to compare the working tree's goldens with")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goldendiff OLD.golden NEW.golden\n       goldendiff [-rev REV] [PATH...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var pairs []pair
	if fs.NArg() == 2 && strings.HasSuffix(fs.Arg(0), ".golden") && strings.HasSuffix(fs.Arg(1), ".golden") && isFile(fs.Arg(0)) && isFile(fs.Arg(1)) {
		old, err := os.ReadFile(fs.Arg(0))
		if err != nil {
			fmt.Fprintln(stderr, "goldendiff:", err)
			return 2
		}
		cur, err := os.ReadFile(fs.Arg(1))
		if err != nil {
			fmt.Fprintln(stderr, "goldendiff:", err)
			return 2
		}
		pairs = append(pairs, pair{name: fs.Arg(1), old: old, cur: cur, hasOld: true, hasCur: true})
	} else {
		paths := fs.Args()
		if len(paths) == 0 {
			paths = []string{"kernel/testdata/scenarios"}
		}
		var err error
		if pairs, err = changedGoldens(*rev, paths); err != nil {
			fmt.Fprintln(stderr, "goldendiff:", err)
			return 2
		}
	}
	differ := false
	for _, p := range pairs {
		lines, err := p.diff()
		if err != nil {
			fmt.Fprintf(stderr, "goldendiff: %s: %v\n", p.name, err)
			return 2
		}
		if len(lines) == 0 {
			continue
		}
		differ = true
		fmt.Fprintln(stdout, p.name)
		for _, l := range lines {
			fmt.Fprintln(stdout, "  "+l)
		}
	}
	if differ {
		return 1
	}
	return 0
}

func isFile(name string) bool {
	fi, err := os.Stat(name)
	return err == nil && fi.Mode().IsRegular()
}

// pair is one golden before and after; hasOld or hasCur is false for a
// golden added or removed.
type pair struct {
	name           string
	old, cur       []byte
	hasOld, hasCur bool
}

func (p pair) diff() ([]string, error) {
	switch {
	case !p.hasOld:
		t, err := parse(p.cur)
		if err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("new golden: %d steps", len(t.steps))}, nil
	case !p.hasCur:
		return []string{"golden removed"}, nil
	}
	old, err := parse(p.old)
	if err != nil {
		return nil, fmt.Errorf("before: %w", err)
	}
	cur, err := parse(p.cur)
	if err != nil {
		return nil, err
	}
	return diffTranscripts(old, cur), nil
}

// changedGoldens lists the goldens under paths that differ between rev
// and the working tree, with both versions.
func changedGoldens(rev string, paths []string) ([]pair, error) {
	args := append([]string{"diff", "--no-renames", "--name-status", rev, "--"}, paths...)
	out, err := git(args...)
	if err != nil {
		return nil, err
	}
	// git diff does not list untracked files: a golden just written by
	// -update for a new scenario is one.
	untracked, err := git(append([]string{"ls-files", "--others", "--exclude-standard", "--"}, paths...)...)
	if err != nil {
		return nil, err
	}
	var pairs []pair
	add := func(status, name string) error {
		if !strings.HasSuffix(name, ".golden") {
			return nil
		}
		p := pair{name: name, hasOld: status != "A" && status != "?", hasCur: status != "D"}
		if p.hasOld {
			if p.old, err = git("show", rev+":"+name); err != nil {
				return err
			}
		}
		if p.hasCur {
			if p.cur, err = os.ReadFile(name); err != nil {
				return err
			}
		}
		pairs = append(pairs, p)
		return nil
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		status, name, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		if err := add(status[:1], name); err != nil {
			return nil, err
		}
	}
	for _, name := range strings.Fields(string(untracked)) {
		if err := add("?", name); err != nil {
			return nil, err
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].name < pairs[j].name })
	return pairs, nil
}

func git(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out, nil
}

// transcript is a golden: its steps, and its other members (trust, ...).
type transcript struct {
	steps []any
	rest  map[string]any
}

func parse(b []byte) (transcript, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var top map[string]any
	if err := d.Decode(&top); err != nil {
		return transcript{}, fmt.Errorf("not a transcript (a JSON object with steps): %w", err)
	}
	steps, ok := top["steps"].([]any)
	if !ok {
		return transcript{}, errors.New(`not a transcript: no "steps" array`)
	}
	delete(top, "steps")
	return transcript{steps: steps, rest: top}, nil
}

func diffTranscripts(old, cur transcript) []string {
	var lines []string
	n := max(len(old.steps), len(cur.steps))
	for i := range n {
		switch {
		case i >= len(cur.steps):
			lines = append(lines, fmt.Sprintf("%s: removed: %s", stepName(i, old.steps[i]), show(old.steps[i])))
		case i >= len(old.steps):
			lines = append(lines, fmt.Sprintf("%s: added: %s", stepName(i, cur.steps[i]), show(cur.steps[i])))
		default:
			for _, c := range diffValues("", old.steps[i], cur.steps[i]) {
				lines = append(lines, stepName(i, cur.steps[i])+": "+c)
			}
		}
	}
	lines = append(lines, diffValues("", old.rest, cur.rest)...)
	return lines
}

// stepName is "step N (atMs T, OP)", N counted from 1.
func stepName(i int, step any) string {
	m, _ := step.(map[string]any)
	var about []string
	if at, ok := m["atMs"].(json.Number); ok {
		about = append(about, "atMs "+at.String())
	}
	if op, ok := m["op"].(string); ok {
		about = append(about, op)
	}
	name := "step " + strconv.Itoa(i+1)
	if len(about) > 0 {
		name += " (" + strings.Join(about, ", ") + ")"
	}
	return name
}

// diffValues lists the fields that differ between a and b, each as
// "path: old → new", in the order of the members' names.
func diffValues(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var keys []string
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		var out []string
		for _, k := range keys {
			p := join(path, k)
			av, ina := am[k]
			bv, inb := bm[k]
			switch {
			case !inb:
				out = append(out, p+": removed (was "+show(av)+")")
			case !ina:
				out = append(out, p+": added: "+show(bv))
			default:
				out = append(out, diffValues(p, av, bv)...)
			}
		}
		return out
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok {
		var out []string
		for i := range max(len(as), len(bs)) {
			p := path + "[" + strconv.Itoa(i) + "]"
			switch {
			case i >= len(bs):
				out = append(out, p+": removed (was "+show(as[i])+")")
			case i >= len(as):
				out = append(out, p+": added: "+show(bs[i]))
			default:
				out = append(out, diffValues(p, as[i], bs[i])...)
			}
		}
		return out
	}
	if show(a) == show(b) {
		return nil
	}
	if path == "" {
		path = "(whole)"
	}
	return []string{path + ": " + show(a) + " → " + show(b)}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// show is v as compact JSON, cut to 160 bytes.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 160 {
		return string(b[:157]) + "..."
	}
	return string(b)
}
