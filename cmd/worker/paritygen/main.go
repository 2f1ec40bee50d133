// Command paritygen writes the parity run of the Workers tier: every corpus
// scenario (kernel/testdata/scenarios) and N seeded random scenarios
// (kernel/scenario.Random), each with what the native kernel answers at
// every step, one JSON object per line. cmd/worker/test/parity.test.mjs
// replays each scenario through the Durable Object in workerd and compares
// the bytes.
//
// Usage: go run ./cmd/worker/paritygen [-n 1000] [-seed S] [-o FILE]
//
// A line is {"name", "rules": bytes|null, "steps": [bytes...], "expect":
// {"steps": [{"s": status, "r": Retry-After, "a": answer, "v": events,
// "h": the askId the step made ("" none), "w": [{"i": askId, "s", "r",
// "a"}...] the held asks it answered}...],
// "trust": bytes}}, every bytes field in base64 (so invalid UTF-8 in a
// random step reaches the object as it is), or
// {"name", "refused": message} for a scenario the parser refuses before any
// kernel sees it. The seed is printed; -seed reproduces a run.
//
// With -replay it writes the browser's parity run instead
// (web/browser/parity.test.mjs): a line is {"name", "in": the scenario as
// the page's leaseplane.replay receives it (a JavaScript string, so invalid
// UTF-8 arrives replaced), "t": the native transcript of that string} or
// {"name", "in", "e": the native replay's error}.
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/scenario"
)

type step struct {
	S int      `json:"s"`
	R int      `json:"r"`
	A string   `json:"a"`
	V string   `json:"v"`
	H string   `json:"h"`
	W []answer `json:"w"`
}

// answer is a held ask that ended during a step.
type answer struct {
	I string `json:"i"`
	S int    `json:"s"`
	R int    `json:"r"`
	A string `json:"a"`
}

type expect struct {
	Steps []step `json:"steps"`
	Trust string `json:"trust"`
}

type line struct {
	Name    string   `json:"name"`
	Rules   *string  `json:"rules,omitempty"`
	Steps   []string `json:"steps,omitempty"`
	Expect  *expect  `json:"expect,omitempty"`
	Refused string   `json:"refused,omitempty"`
}

func main() {
	n := flag.Int("n", 1000, "random scenarios")
	seed := flag.Int64("seed", 0, "first seed of the random scenarios (0: from the clock)")
	out := flag.String("o", "-", "output file (- for stdout)")
	corpus := flag.String("corpus", "kernel/testdata/scenarios", "corpus folder")
	replay := flag.Bool("replay", false, "write transcripts for the browser's parity run instead")
	flag.Parse()
	if *seed == 0 {
		*seed = time.Now().UnixNano() & (1<<62 - 1)
	}
	each := expected
	if *replay {
		each = transcript
	}
	if err := run(*n, *seed, *out, *corpus, each); err != nil {
		fmt.Fprintln(os.Stderr, "paritygen:", err)
		os.Exit(1)
	}
}

func run(n int, seed int64, out, corpus string, each func(name string, in []byte) (any, error)) error {
	files, err := filepath.Glob(filepath.Join(corpus, "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no scenarios under %s", corpus)
	}
	sort.Strings(files)
	w := os.Stdout
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		l, err := each(filepath.Base(f), b)
		if err != nil {
			return err
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	for i := range n {
		s := seed + int64(i)
		l, err := each("random seed "+strconv.FormatInt(s, 10), scenario.Random(s))
		if err != nil {
			return err
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "paritygen: %d corpus and %d random scenarios from seed %d (reproduce with -seed %d)\n", len(files), n, seed, seed)
	return bw.Flush()
}

// expected replays one scenario natively, step by step.
func expected(name string, in []byte) (any, error) {
	s, err := scenario.Parse(in)
	if err != nil {
		return line{Name: name, Refused: err.Error()}, nil
	}
	l := line{Name: name, Steps: make([]string, len(s.Steps))}
	if s.Rules != nil {
		r := b64(s.Rules)
		l.Rules = &r
	}
	e, err := kernel.Native.New(s.Rules)
	if err != nil {
		return line{Name: name, Refused: err.Error()}, nil
	}
	defer e.Close()
	ex := &expect{Steps: make([]step, len(s.Steps))}
	for i, st := range s.Steps {
		l.Steps[i] = b64(st)
		res, err := e.StepJSON(st)
		if err != nil {
			return nil, fmt.Errorf("%s: step %d: %v", name, i, err)
		}
		w := make([]answer, len(res.Answers))
		for j, a := range res.Answers {
			w[j] = answer{I: a.AskID, S: a.Status, R: a.RetryAfterSec, A: b64(a.Answer)}
		}
		ex.Steps[i] = step{S: res.Status, R: res.RetryAfterSec, A: b64(res.Answer), V: b64(kernel.AppendEvents(nil, res.Events)), H: res.AskID, W: w}
	}
	trust, err := e.Trust()
	if err != nil {
		return nil, err
	}
	ex.Trust = b64(trust)
	l.Expect = ex
	return l, nil
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// replayLine is a line of the browser's parity run.
type replayLine struct {
	Name string  `json:"name"`
	In   string  `json:"in"`
	T    *string `json:"t,omitempty"`
	E    *string `json:"e,omitempty"`
}

// transcript replays one scenario natively as the page receives it: the
// bytes made a JavaScript string, as JSON carries them (invalid UTF-8
// replaced).
func transcript(name string, in []byte) (any, error) {
	j, err := json.Marshal(string(in))
	if err != nil {
		return nil, err
	}
	var s string
	if err := json.Unmarshal(j, &s); err != nil {
		return nil, err
	}
	l := replayLine{Name: name, In: s}
	out, err := scenario.Replay(kernel.Native, []byte(s))
	if err != nil {
		msg := err.Error()
		l.E = &msg
	} else {
		t := string(out)
		l.T = &t
	}
	return l, nil
}
