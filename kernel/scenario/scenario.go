// Package scenario replays scenarios (rules plus timed steps) through any
// kernel engine and writes transcripts, the one format that drives the
// playground, the docs' live examples, the test corpus and every parity
// check (SPEC.md, "Scenarios and transcripts").
//
// The transcript layout is fixed so that every host prints the same bytes:
//
//	{"steps":[
//	{"atMs":1000,"op":"acquire","answer":{...},"events":[...]},
//	...
//	],"trust":{"did:...":0.5}}
//
// followed by a newline: one step per line, so golden files diff well.
package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/leaseplane/leaseplane/kernel"
)

// Scenario is a decoded scenario. Steps stay raw: the kernel decodes each,
// so a malformed step is answered invalid_request like a REST body.
type Scenario struct {
	Rules json.RawMessage   `json:"rules"`
	Steps []json.RawMessage `json:"steps"`
	// Title and Description are for people (the playground's menu).
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
}

// MaxSteps bounds a scenario's length.
const MaxSteps = 100000

// Parse reads a scenario. Fields other than rules, steps, title and
// description are refused, so a typo does not pass silently.
func Parse(b []byte) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if dec.More() {
		return nil, errors.New("scenario: trailing data after the object")
	}
	if s.Steps == nil {
		return nil, errors.New("scenario: steps is required (an array of steps)")
	}
	if len(s.Steps) > MaxSteps {
		return nil, fmt.Errorf("scenario: %d steps, at most %d", len(s.Steps), MaxSteps)
	}
	if _, err := kernel.ParseRules(s.Rules); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return &s, nil
}

// Replay parses a scenario and replays it through a new engine of f.
func Replay(f kernel.Factory, scenarioJSON []byte) ([]byte, error) {
	s, err := Parse(scenarioJSON)
	if err != nil {
		return nil, err
	}
	e, err := f.New(s.Rules)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	defer e.Close()
	return Run(e, s)
}

// Run replays s's steps through e and returns the transcript.
func Run(e kernel.Engine, s *Scenario) ([]byte, error) {
	out := append(make([]byte, 0, 256*len(s.Steps)+64), `{"steps":[`...)
	for i, step := range s.Steps {
		res, err := e.Step(step)
		if err != nil {
			return nil, fmt.Errorf("scenario: step %d: engine failed: %w", i, err)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n"...)
		out = AppendStep(out, step, res)
	}
	trust, err := e.Trust()
	if err != nil {
		return nil, fmt.Errorf("scenario: trust: engine failed: %w", err)
	}
	out = append(out, "\n],\"trust\":"...)
	out = append(out, trust...)
	return append(out, "}\n"...), nil
}

// AppendStep appends one transcript line: the step's atMs and op as
// written (compacted; null when missing or not JSON), its answer and events.
func AppendStep(out []byte, step []byte, res kernel.Result) []byte {
	var head struct {
		AtMs json.RawMessage `json:"atMs"`
		Op   json.RawMessage `json:"op"`
	}
	_ = json.Unmarshal(step, &head) // a step that is not an object echoes nulls
	out = append(out, `{"atMs":`...)
	out = appendRaw(out, head.AtMs)
	out = append(out, `,"op":`...)
	out = appendRaw(out, head.Op)
	out = append(out, `,"answer":`...)
	out = append(out, res.Answer...)
	out = append(out, `,"events":`...)
	out = append(out, res.Events...)
	return append(out, '}')
}

func appendRaw(out []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return append(out, "null"...)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return append(out, "null"...)
	}
	return append(out, buf.Bytes()...)
}
