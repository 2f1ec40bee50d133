// Package scenario replays scenarios (rules plus timed steps) through any
// kernel engine and writes transcripts, the one format that drives the
// playground, the docs' live examples, the test corpus and every parity
// check.
//
// The transcript layout is fixed so that every host prints the same bytes:
//
//	{"steps":[
//	{"atMs":1000,"op":"acquire","answer":{...},"events":[...]},
//	...
//	],"trust":{"did:...":0.5}}
//
// followed by a newline: one step per line, so golden files diff well.
//
// The package reads JSON with the kernel's own strict reader and uses
// neither encoding/json nor fmt, so the browser build replays scenarios
// with this very code and stays small.
package scenario

import (
	"errors"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
)

// Scenario is a decoded scenario. Rules and each step stay raw JSON: the
// kernel decodes them, so a malformed step is answered invalid_request
// like a REST body.
type Scenario struct {
	Rules []byte   // the rules object as written; nil when absent or null
	Steps [][]byte // each step as written
	// Title and Description are for people (the playground's menu).
	Title       string
	Description string
	// Semantics is the semantics the steps run under (1 to
	// kernel.Semantics); 0 when the scenario names none: the newest.
	Semantics int
}

// MaxSteps bounds a scenario's length.
const MaxSteps = 100000

// Parse reads a scenario: one JSON object with steps (required, an array),
// rules, title and description. Other fields are refused, and so are
// duplicated ones, so a typo does not pass silently.
func Parse(b []byte) (*Scenario, error) {
	switch k := kernel.KindOf(b); k {
	case kernel.KindObject:
	case kernel.KindInvalid:
		return nil, errors.New("scenario: want a JSON object with rules and steps")
	default:
		return nil, errors.New("scenario: want a JSON object, not " + k.String())
	}
	var s Scenario
	hasSteps := false
	err := kernel.ScanObject(b, func(name string, raw []byte) error {
		kind := kernel.KindOf(raw)
		if kind == kernel.KindNull && name != "steps" {
			return nil
		}
		switch name {
		case "rules":
			if kind != kernel.KindObject {
				return errors.New("rules must be an object, not " + kind.String())
			}
			s.Rules = raw
		case "steps":
			if kind != kernel.KindArray {
				return errors.New("steps must be an array of steps, not " + kind.String())
			}
			hasSteps = true
			return kernel.ScanArray(raw, func(step []byte) error {
				if len(s.Steps) == MaxSteps {
					return errors.New("more than " + strconv.Itoa(MaxSteps) + " steps")
				}
				s.Steps = append(s.Steps, step)
				return nil
			})
		case "semantics":
			n, ok := kernel.IntLiteral(raw)
			if kind != kernel.KindNumber || !ok || n < 1 || n > kernel.Semantics {
				return errors.New("semantics must be an integer from 1 to " + strconv.Itoa(kernel.Semantics))
			}
			s.Semantics = int(n)
		case "title", "description":
			if kind != kernel.KindString {
				return errors.New(name + " must be a string, not " + kind.String())
			}
			text, err := kernel.Unquote(raw)
			if name == "title" {
				s.Title = text
			} else {
				s.Description = text
			}
			return err
		default:
			return errors.New("unknown field " + string(kernel.AppendQuote(nil, name)) + " (a scenario has rules, steps, semantics, title and description)")
		}
		return nil
	})
	if err != nil {
		return nil, errors.New("scenario: " + err.Error())
	}
	if !hasSteps {
		return nil, errors.New("scenario: steps is required (an array of steps)")
	}
	if _, err := kernel.ParseRules(s.Rules); err != nil {
		return nil, errors.New("scenario: " + err.Error())
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
		return nil, errors.New("scenario: " + err.Error())
	}
	defer e.Close()
	return Run(e, s)
}

// Run replays s's steps through e and returns the transcript.
func Run(e kernel.Engine, s *Scenario) ([]byte, error) {
	if s.Semantics != 0 {
		if err := e.SetSemantics(s.Semantics); err != nil {
			return nil, errors.New("scenario: semantics: " + err.Error())
		}
	}
	out := append(make([]byte, 0, 256*len(s.Steps)+64), `{"steps":[`...)
	for i, step := range s.Steps {
		res, err := e.Step(kernel.DecodeStepCommand(step))
		if err != nil {
			return nil, errors.New("scenario: step " + strconv.Itoa(i) + ": engine failed: " + err.Error())
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '\n')
		out = AppendStep(out, step, res)
	}
	trust, err := e.Trust()
	if err != nil {
		return nil, errors.New("scenario: trust: engine failed: " + err.Error())
	}
	out = append(out, "\n],\"trust\":"...)
	out = append(out, trust...)
	return append(out, "}\n"...), nil
}

// AppendStep appends one transcript line: the step's atMs and op as
// written (compacted; null when missing or when the step is not an
// object; an integer atMs as the kernel reads it, so -0 is 0), its answer
// (null for a step that made a held ask, with held its askId), its events,
// and answers, the held asks that ended during the step, when some did.
func AppendStep(out []byte, step []byte, res kernel.Ready) []byte {
	atMs, op := head(step)
	out = append(out, `{"atMs":`...)
	if n, ok := kernel.IntLiteral(atMs); ok {
		out = strconv.AppendInt(out, n, 10) // as the kernel read it: -0 is 0
	} else {
		out = appendRaw(out, atMs)
	}
	out = append(out, `,"op":`...)
	out = appendRaw(out, op)
	out = append(out, ',')
	out = AppendReady(out, res)
	return append(out, '}')
}

// head finds a step's atMs and op (the last of each, where a name is
// repeated); a step that is not an object gives neither.
func head(step []byte) (atMs, op []byte) {
	if kernel.KindOf(step) != kernel.KindObject {
		return nil, nil
	}
	_ = kernel.ScanMembers(step, func(name string, raw []byte) error {
		switch name {
		case "atMs":
			atMs = raw
		case "op":
			op = raw
		}
		return nil
	})
	return atMs, op
}

func appendRaw(out []byte, raw []byte) []byte {
	if len(raw) == 0 {
		return append(out, "null"...)
	}
	return kernel.AppendCompact(out, raw)
}

// AppendReady appends a step's outcome as its transcript line has it:
// "answer":…[,"held":…],"events":[…][,"answers":[…]] (members only, no
// braces).
func AppendReady(out []byte, res kernel.Ready) []byte {
	out = append(out, `"answer":`...)
	if res.Answer == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, res.Answer...)
	}
	if res.AskID != "" {
		out = append(out, `,"held":`...)
		out = kernel.AppendQuote(out, res.AskID)
	}
	out = append(out, `,"events":`...)
	out = kernel.AppendEvents(out, res.Events)
	if len(res.Answers) > 0 {
		out = append(out, `,"answers":[`...)
		for i, a := range res.Answers {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"askId":`...)
			out = kernel.AppendQuote(out, a.AskID)
			out = append(out, `,"answer":`...)
			out = append(out, a.Answer...)
			out = append(out, '}')
		}
		out = append(out, ']')
	}
	return out
}
