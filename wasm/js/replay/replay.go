// Package replay is kernel/scenario.Replay(kernel.Native, ...) without
// encoding/json, for the GOOS=js build: reflection-based JSON (and fmt,
// which kernel/scenario's errors use) cost the browser build about 170 KB
// of brotli, and this package keeps the build under its 700 KB goal.
//
// It reproduces what kernel/scenario does with encoding/json, rule for
// rule, so transcripts are byte-identical: the scenario is one JSON value
// followed only by white space or a closing bracket or brace (what
// json.Decoder.More accepts); field names match rules, steps, title and
// description case-insensitively as strings.EqualFold does, the last
// duplicate wins, and any other field is refused; steps must be an array
// or null; title and description strings or null; nesting stops at 10,000
// levels. A step's atMs and op are found the same way and echoed compacted.
// Error messages name the problem but are worded differently from
// kernel/scenario's. The differential test runs both on the corpus, random
// scenarios and a table of edge cases, and FuzzReplay searches for more.
package replay

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/leaseplane/leaseplane/kernel"
)

// MaxSteps bounds a scenario's length, as kernel/scenario.MaxSteps does.
const MaxSteps = 100000

// maxNesting is encoding/json's nesting limit.
const maxNesting = 10000

// Replay replays a scenario through a native kernel Machine and returns
// its transcript.
func Replay(in []byte) ([]byte, error) {
	rules, steps, err := parse(in)
	if err != nil {
		return nil, errors.New("scenario: " + err.Error())
	}
	r, err := kernel.ParseRules(rules)
	if err != nil {
		return nil, errors.New("scenario: " + err.Error())
	}
	m := kernel.New(r)
	out := append(make([]byte, 0, 256*len(steps)+64), `{"steps":[`...)
	for i, step := range steps {
		res := m.Step(step)
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, "\n"...)
		atMs, op := head(step)
		out = append(out, `{"atMs":`...)
		out = appendCompact(out, atMs)
		out = append(out, `,"op":`...)
		out = appendCompact(out, op)
		out = append(out, `,"answer":`...)
		out = append(out, res.Answer...)
		out = append(out, `,"events":`...)
		out = append(out, res.Events...)
		out = append(out, '}')
	}
	out = append(out, "\n],\"trust\":"...)
	out = append(out, m.TrustJSON()...)
	return append(out, "}\n"...), nil
}

// parse reads a scenario's rules (raw, nil when absent) and raw steps.
func parse(in []byte) (rules []byte, steps [][]byte, err error) {
	s := scanner{b: in}
	s.space()
	if s.pos == len(s.b) {
		return nil, nil, errors.New("empty input, want a JSON object")
	}
	start := s.pos
	if err := s.value(0); err != nil {
		return nil, nil, err
	}
	end := s.pos
	s.space()
	if s.pos < len(s.b) && s.b[s.pos] != ']' && s.b[s.pos] != '}' {
		return nil, nil, errors.New("trailing data after the object")
	}
	top := in[start:end]
	switch top[0] {
	case '{':
	case 'n':
		return nil, nil, errors.New("steps is required (an array of steps)")
	default:
		return nil, nil, errors.New("a scenario must be a JSON object, not " + kindOf(top[0]))
	}
	var fieldErr error
	members(top, func(key, v []byte) {
		switch {
		case fold(key, "rules"):
			rules = v
		case fold(key, "steps"):
			switch v[0] {
			case 'n':
				steps = nil
			case '[':
				steps = elements(v)
			default:
				if fieldErr == nil {
					fieldErr = errors.New("steps must be an array, not " + kindOf(v[0]))
				}
			}
		case fold(key, "title"), fold(key, "description"):
			if v[0] != '"' && v[0] != 'n' && fieldErr == nil {
				fieldErr = errors.New(string(unquote(key)) + " must be a string, not " + kindOf(v[0]))
			}
		default:
			if fieldErr == nil {
				fieldErr = errors.New("unknown field " + strconv.Quote(string(unquote(key))))
			}
		}
	})
	if fieldErr != nil {
		return nil, nil, fieldErr
	}
	if steps == nil {
		return nil, nil, errors.New("steps is required (an array of steps)")
	}
	if len(steps) > MaxSteps {
		return nil, nil, errors.New(strconv.Itoa(len(steps)) + " steps, at most " + strconv.Itoa(MaxSteps))
	}
	return rules, steps, nil
}

// head finds a step's atMs and op the way json.Unmarshal into a struct
// does: only when the step is an object, case-insensitively, last wins.
func head(step []byte) (atMs, op []byte) {
	if step[0] != '{' {
		return nil, nil
	}
	members(step, func(key, v []byte) {
		switch {
		case fold(key, "atMs"):
			atMs = v
		case fold(key, "op"):
			op = v
		}
	})
	return atMs, op
}

// fold reports whether the quoted key, unquoted, equals name under
// simple case folding (encoding/json's rule for field names).
func fold(quoted []byte, name string) bool {
	inner := quoted[1 : len(quoted)-1]
	for _, c := range inner {
		if c == '\\' {
			return strings.EqualFold(string(unquote(quoted)), name)
		}
	}
	// Without escapes, invalid UTF-8 folds as U+FFFD either way.
	return strings.EqualFold(string(inner), name)
}

func kindOf(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// appendCompact appends a valid JSON value without insignificant white
// space (json.Compact), or null when raw is nil.
func appendCompact(out, raw []byte) []byte {
	if raw == nil {
		return append(out, "null"...)
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inString {
			out = append(out, c)
			switch c {
			case '\\':
				i++
				out = append(out, raw[i])
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	return out
}

// members calls f with each member's quoted key and raw value of a valid
// JSON object.
func members(obj []byte, f func(key, v []byte)) {
	s := scanner{b: obj, pos: 1}
	for {
		s.space()
		if s.b[s.pos] == '}' {
			return
		}
		k := s.pos
		s.str()
		key := s.b[k:s.pos]
		s.space()
		s.pos++ // ':'
		s.space()
		v := s.pos
		_ = s.value(0) // valid: checked before
		f(key, s.b[v:s.pos])
		s.space()
		if s.b[s.pos] == ',' {
			s.pos++
		}
	}
}

// elements returns the raw elements of a valid JSON array (non-nil).
func elements(arr []byte) [][]byte {
	out := [][]byte{}
	s := scanner{b: arr, pos: 1}
	for {
		s.space()
		if s.b[s.pos] == ']' {
			return out
		}
		v := s.pos
		_ = s.value(0)
		out = append(out, s.b[v:s.pos])
		s.space()
		if s.b[s.pos] == ',' {
			s.pos++
		}
	}
}

// unquote decodes a valid JSON string literal as encoding/json does:
// invalid UTF-8 and lone surrogates become U+FFFD.
func unquote(q []byte) []byte {
	q = q[1 : len(q)-1]
	out := make([]byte, 0, len(q))
	for i := 0; i < len(q); {
		c := q[i]
		if c == '\\' {
			switch q[i+1] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(q[i+2:])
				i += 6
				if utf16Surrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(q) && q[i] == '\\' && q[i+1] == 'u' {
						r2 = hex4(q[i+2:])
					}
					if dec := decodePair(r, r2); dec != utf8.RuneError {
						i += 6
						out = utf8.AppendRune(out, dec)
					} else {
						out = utf8.AppendRune(out, utf8.RuneError)
					}
					continue
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // " \ /
				out = append(out, q[i+1])
			}
			i += 2
			continue
		}
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(q[i:])
		out = utf8.AppendRune(out, r)
		i += n
	}
	return out
}

func utf16Surrogate(r rune) bool { return 0xd800 <= r && r < 0xe000 }

func decodePair(r1, r2 rune) rune {
	if 0xd800 <= r1 && r1 < 0xdc00 && 0xdc00 <= r2 && r2 < 0xe000 {
		return (r1-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
	}
	return utf8.RuneError
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// scanner checks JSON syntax as encoding/json's scanner does.
type scanner struct {
	b   []byte
	pos int
}

func (s *scanner) space() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) fail(what string) error {
	if s.pos >= len(s.b) {
		return errors.New("unexpected end of JSON input")
	}
	return errors.New("invalid character " + strconv.QuoteRune(rune(s.b[s.pos])) + " " + what + " at byte " + strconv.Itoa(s.pos))
}

// value checks one value at s.pos (white space before it skipped).
func (s *scanner) value(depth int) error {
	s.space()
	if s.pos >= len(s.b) {
		return s.fail("looking for a value")
	}
	switch c := s.b[s.pos]; {
	case c == '{':
		if depth+1 > maxNesting {
			return errors.New("exceeded max depth")
		}
		s.pos++
		s.space()
		if s.pos < len(s.b) && s.b[s.pos] == '}' {
			s.pos++
			return nil
		}
		for {
			s.space()
			if s.pos >= len(s.b) || s.b[s.pos] != '"' {
				return s.fail("looking for beginning of object key string")
			}
			if err := s.str(); err != nil {
				return err
			}
			s.space()
			if s.pos >= len(s.b) || s.b[s.pos] != ':' {
				return s.fail("after object key")
			}
			s.pos++
			if err := s.value(depth + 1); err != nil {
				return err
			}
			s.space()
			if s.pos >= len(s.b) {
				return s.fail("after object key:value pair")
			}
			switch s.b[s.pos] {
			case ',':
				s.pos++
			case '}':
				s.pos++
				return nil
			default:
				return s.fail("after object key:value pair")
			}
		}
	case c == '[':
		if depth+1 > maxNesting {
			return errors.New("exceeded max depth")
		}
		s.pos++
		s.space()
		if s.pos < len(s.b) && s.b[s.pos] == ']' {
			s.pos++
			return nil
		}
		for {
			if err := s.value(depth + 1); err != nil {
				return err
			}
			s.space()
			if s.pos >= len(s.b) {
				return s.fail("after array element")
			}
			switch s.b[s.pos] {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return nil
			default:
				return s.fail("after array element")
			}
		}
	case c == '"':
		return s.str()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("looking for beginning of value")
}

func (s *scanner) literal(word string) error {
	for i := 0; i < len(word); i++ {
		if s.pos >= len(s.b) || s.b[s.pos] != word[i] {
			return s.fail("in literal " + word)
		}
		s.pos++
	}
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.b) && '0' <= s.b[s.pos] && s.b[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.b[s.pos] == '-' {
		s.pos++
	}
	if s.pos >= len(s.b) {
		return s.fail("in numeric literal")
	}
	switch c := s.b[s.pos]; {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return s.fail("in numeric literal")
	}
	if s.pos < len(s.b) && s.b[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.fail("after decimal point in numeric literal")
		}
	}
	if s.pos < len(s.b) && (s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.b) && (s.b[s.pos] == '+' || s.b[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.fail("in exponent of numeric literal")
		}
	}
	return nil
}

// str checks a string literal at s.pos and moves past it.
func (s *scanner) str() error {
	s.pos++ // opening quote
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		switch {
		case c == '"':
			s.pos++
			return nil
		case c == '\\':
			s.pos++
			if s.pos >= len(s.b) {
				return s.fail("in string escape code")
			}
			switch s.b[s.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos++
			case 'u':
				s.pos++
				for range 4 {
					if s.pos >= len(s.b) || !isHex(s.b[s.pos]) {
						return s.fail("in \\u hexadecimal character escape")
					}
					s.pos++
				}
			default:
				return s.fail("in string escape code")
			}
		case c < 0x20:
			return s.fail("in string literal")
		default:
			s.pos++
		}
	}
	return s.fail("in string literal")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
