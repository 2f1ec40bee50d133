package kernel

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// This file holds the kernel's hand-written JSON: an appender that writes
// canonical bytes (no insignificant space, fields in a fixed order, strings
// escaped as below) and a small strict reader for flat request objects.
// Hand-written so that no reflection runs per command and every host,
// whatever its Go build, writes the same bytes.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. It escapes '"', '\\', control
// characters, U+2028 and U+2029, and replaces invalid UTF-8 with U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\\ufffd"...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// appendHalves appends a count of half points as a JSON number: 3 → 1.5.
func appendHalves(b []byte, h int64) []byte {
	if h < 0 && h%2 != 0 && h/2 == 0 {
		b = append(b, '-') // -1 half point is -0.5: the integer part loses the sign
	}
	b = strconv.AppendInt(b, h/2, 10)
	if h%2 != 0 {
		b = append(b, '.', '5')
	}
	return b
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

func appendKey(b []byte, first bool, key string) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// jsonKind is the type of a JSON value the reader met.
type jsonKind uint8

const (
	kindNull jsonKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// jsonValue is one value of a flat object: its kind, and for strings the
// decoded text, for numbers the literal.
type jsonValue struct {
	kind jsonKind
	str  string
	raw  []byte // the value's bytes as written
}

// reader is a strict JSON reader over one document. maxDepth, when above
// zero, bounds nesting: the document's object is depth 1, each object or
// array inside it one more.
type reader struct {
	b        []byte
	pos      int
	maxDepth int
}

var errDepth = errors.New("a request is nested at most " + strconv.Itoa(MaxDepth) + " deep (the request object is depth 1)")

func (r *reader) skipSpace() {
	for r.pos < len(r.b) {
		switch r.b[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *reader) syntax(what string) error {
	return errors.New("malformed JSON at byte " + strconv.Itoa(r.pos) + ": " + what)
}

// objectStart reads the opening brace of the document's object; done is
// true for an empty object (then the whole document has been read).
func (r *reader) objectStart() (done bool, err error) {
	r.skipSpace()
	if r.pos >= len(r.b) {
		return false, errors.New("body is empty: want a JSON object")
	}
	if r.b[r.pos] != '{' {
		v, err := r.value(0)
		if err != nil {
			return false, err
		}
		return false, errors.New("body must be a JSON object, not " + v.kind.String())
	}
	r.pos++
	r.skipSpace()
	if r.pos < len(r.b) && r.b[r.pos] == '}' {
		r.pos++
		return true, r.end()
	}
	return false, nil
}

// member reads one member of the object and the separator after it; done
// is true after the closing brace (then the whole document has been read).
// key aliases the input when it has no escapes.
func (r *reader) member() (key []byte, v jsonValue, done bool, err error) {
	r.skipSpace()
	if r.pos >= len(r.b) || r.b[r.pos] != '"' {
		return nil, v, false, r.syntax("want a field name")
	}
	if key, err = r.stringBytes(); err != nil {
		return nil, v, false, err
	}
	r.skipSpace()
	if r.pos >= len(r.b) || r.b[r.pos] != ':' {
		return nil, v, false, r.syntax("want ':' after a field name")
	}
	r.pos++
	if v, err = r.value(1); err != nil {
		// The error names the field whose value is at fault.
		return nil, v, false, errors.New(quoteField(string(key)) + ": " + err.Error())
	}
	r.skipSpace()
	if r.pos >= len(r.b) {
		return nil, v, false, r.syntax("unexpected end of input in an object")
	}
	switch r.b[r.pos] {
	case ',':
		r.pos++
		return key, v, false, nil
	case '}':
		r.pos++
		return key, v, true, r.end()
	}
	return nil, v, false, r.syntax("want ',' or '}'")
}

func (r *reader) end() error {
	r.skipSpace()
	if r.pos != len(r.b) {
		return r.syntax("trailing data after the object")
	}
	return nil
}

// value reads any JSON value inside a container at depth (0 for a whole
// document); nested containers are checked and kept raw.
func (r *reader) value(depth int) (jsonValue, error) {
	r.skipSpace()
	if r.pos >= len(r.b) {
		return jsonValue{}, r.syntax("unexpected end of input, want a value")
	}
	start := r.pos
	switch c := r.b[r.pos]; {
	case c == '"' && depth > 1:
		// Inside a nested container strings are only checked for syntax:
		// their text is read, strictly, when a field is decoded.
		err := r.skipString()
		return jsonValue{kind: kindString, raw: r.b[start:r.pos]}, err
	case c == '"':
		s, err := r.string()
		return jsonValue{kind: kindString, str: s, raw: r.b[start:r.pos]}, err
	case c == '{' || c == '[':
		kind := kindObject
		if c == '[' {
			kind = kindArray
		}
		if err := r.container(depth + 1); err != nil {
			return jsonValue{}, err
		}
		return jsonValue{kind: kind, raw: r.b[start:r.pos]}, nil
	case c == 't':
		err := r.literal("true")
		return jsonValue{kind: kindBool, raw: r.b[start:r.pos]}, err
	case c == 'f':
		err := r.literal("false")
		return jsonValue{kind: kindBool, raw: r.b[start:r.pos]}, err
	case c == 'n':
		err := r.literal("null")
		return jsonValue{kind: kindNull, raw: r.b[start:r.pos]}, err
	case c == '-' || (c >= '0' && c <= '9'):
		if err := r.number(); err != nil {
			return jsonValue{}, err
		}
		return jsonValue{kind: kindNumber, raw: r.b[start:r.pos]}, nil
	default:
		return jsonValue{}, r.syntax("unexpected character " + strconv.QuoteRune(rune(c)))
	}
}

// container checks the object or array at r.pos, whose depth is depth,
// and everything inside it. It keeps its own stack of open containers
// instead of recursing, so any nesting costs time and memory linear in the
// input and never the Go stack; r.maxDepth, when set, refuses deeper ones.
func (r *reader) container(depth int) error {
	var stackBuf [16]byte
	stack := stackBuf[:0] // the closing bytes of the open containers
	for {
		// r.pos is at '{' or '[': open it.
		if r.maxDepth > 0 && depth+len(stack) > r.maxDepth {
			return errDepth
		}
		if r.b[r.pos] == '{' {
			stack = append(stack, '}')
		} else {
			stack = append(stack, ']')
		}
		r.pos++
		r.skipSpace()
		if r.pos < len(r.b) && r.b[r.pos] == stack[len(stack)-1] {
			r.pos++ // empty
			stack = stack[:len(stack)-1]
		} else {
			// Members, until one opens a container (then the outer loop
			// opens it) or the innermost container closes.
			opened, err := r.members(&stack)
			if err != nil {
				return err
			}
			if opened {
				continue
			}
		}
		// A container closed: read on in its parent.
		for len(stack) > 0 {
			r.skipSpace()
			if r.pos >= len(r.b) {
				return r.syntax("unexpected end of input")
			}
			close := stack[len(stack)-1]
			if r.b[r.pos] == close {
				r.pos++
				stack = stack[:len(stack)-1]
				continue
			}
			if r.b[r.pos] != ',' {
				return r.syntax("want ',' or '" + string(close) + "'")
			}
			r.pos++
			opened, err := r.members(&stack)
			if err != nil {
				return err
			}
			if opened {
				break
			}
		}
		if len(stack) == 0 {
			return nil
		}
	}
}

// members reads members of the innermost container of *stack (r.pos at
// the start of one) until one's value opens a container, left at r.pos
// for the caller (opened), or the container closes (popped from *stack).
func (r *reader) members(stack *[]byte) (opened bool, err error) {
	for {
		close := (*stack)[len(*stack)-1]
		r.skipSpace()
		if close == '}' {
			if r.pos >= len(r.b) || r.b[r.pos] != '"' {
				return false, r.syntax("want a field name")
			}
			if err := r.skipString(); err != nil {
				return false, err
			}
			r.skipSpace()
			if r.pos >= len(r.b) || r.b[r.pos] != ':' {
				return false, r.syntax("want ':' after a field name")
			}
			r.pos++
			r.skipSpace()
		}
		if r.pos < len(r.b) && (r.b[r.pos] == '{' || r.b[r.pos] == '[') {
			return true, nil
		}
		if _, err := r.value(2); err != nil { // a scalar
			return false, err
		}
		r.skipSpace()
		if r.pos >= len(r.b) {
			return false, r.syntax("unexpected end of input")
		}
		switch r.b[r.pos] {
		case ',':
			r.pos++
			continue
		case close:
			r.pos++
			*stack = (*stack)[:len(*stack)-1]
			return false, nil
		}
		return false, r.syntax("want ',' or '" + string(close) + "'")
	}
}

func (r *reader) literal(word string) error {
	if len(r.b)-r.pos < len(word) || string(r.b[r.pos:r.pos+len(word)]) != word {
		return r.syntax("invalid literal")
	}
	r.pos += len(word)
	return nil
}

func (r *reader) number() error {
	if r.b[r.pos] == '-' {
		r.pos++
	}
	digits := func() int {
		n := 0
		for r.pos < len(r.b) && r.b[r.pos] >= '0' && r.b[r.pos] <= '9' {
			r.pos++
			n++
		}
		return n
	}
	if r.pos < len(r.b) && r.b[r.pos] == '0' {
		r.pos++
	} else if digits() == 0 {
		return r.syntax("invalid number")
	}
	if r.pos < len(r.b) && r.b[r.pos] == '.' {
		r.pos++
		if digits() == 0 {
			return r.syntax("invalid number")
		}
	}
	if r.pos < len(r.b) && (r.b[r.pos] == 'e' || r.b[r.pos] == 'E') {
		r.pos++
		if r.pos < len(r.b) && (r.b[r.pos] == '+' || r.b[r.pos] == '-') {
			r.pos++
		}
		if digits() == 0 {
			return r.syntax("invalid number")
		}
	}
	return nil
}

// string reads a JSON string at r.pos (which is '"') and returns its text.
// Invalid UTF-8 and lone surrogates are errors: the kernel keeps names
// exactly as sent or refuses them.
func (r *reader) string() (string, error) {
	b, err := r.stringBytes()
	return string(b), err
}

// stringBytes is string without the copy when the text has no escapes: the
// result then aliases the input.
func (r *reader) stringBytes() ([]byte, error) {
	r.pos++
	start := r.pos
	// Fast path: no escapes.
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		if c == '"' {
			s := r.b[start:r.pos]
			r.pos++
			if !utf8.Valid(s) {
				return nil, errors.New("string is not valid UTF-8")
			}
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, r.syntax("control character in a string")
		}
		r.pos++
	}
	buf := append([]byte(nil), r.b[start:r.pos]...)
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		switch {
		case c == '"':
			r.pos++
			if !utf8.Valid(buf) {
				return nil, errors.New("string is not valid UTF-8")
			}
			return buf, nil
		case c < 0x20:
			return nil, r.syntax("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			r.pos++
			continue
		}
		r.pos++
		if r.pos >= len(r.b) {
			break
		}
		e := r.b[r.pos]
		r.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r1, ok := r.hex4()
			if !ok {
				return nil, r.syntax("invalid \\u escape")
			}
			if r1 >= 0xd800 && r1 < 0xdc00 {
				if r.pos+1 < len(r.b) && r.b[r.pos] == '\\' && r.b[r.pos+1] == 'u' {
					r.pos += 2
					r2, ok := r.hex4()
					if ok && r2 >= 0xdc00 && r2 < 0xe000 {
						buf = utf8.AppendRune(buf, (r1-0xd800)<<10+(r2-0xdc00)+0x10000)
						continue
					}
				}
				return nil, r.syntax("lone surrogate in a \\u escape")
			}
			if r1 >= 0xdc00 && r1 < 0xe000 {
				return nil, r.syntax("lone surrogate in a \\u escape")
			}
			buf = utf8.AppendRune(buf, r1)
		default:
			return nil, r.syntax("invalid escape in a string")
		}
	}
	return nil, r.syntax("unterminated string")
}

// skipString passes over a JSON string at r.pos checking only its syntax:
// no raw control characters, valid escapes. It does not decode.
func (r *reader) skipString() error {
	r.pos++
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		switch {
		case c == '"':
			r.pos++
			return nil
		case c < 0x20:
			return r.syntax("control character in a string")
		case c == '\\':
			r.pos++
			if r.pos >= len(r.b) {
				return r.syntax("unterminated string")
			}
			switch r.b[r.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				r.pos++
			case 'u':
				r.pos++
				if _, ok := r.hex4(); !ok {
					return r.syntax("invalid \\u escape")
				}
			default:
				return r.syntax("invalid escape in a string")
			}
		default:
			r.pos++
		}
	}
	return r.syntax("unterminated string")
}

func (r *reader) hex4() (rune, bool) {
	if len(r.b)-r.pos < 4 {
		return 0, false
	}
	var v rune
	for i := 0; i < 4; i++ {
		c := r.b[r.pos+i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	r.pos += 4
	return v, true
}

// intValue reads an integer number literal. Fractions, exponents and values
// beyond ±2^53 are refused, so every host (JavaScript included) reads the
// same integer.
func intValue(raw []byte) (int64, bool) {
	const limit = 1 << 53
	neg := false
	i := 0
	if i < len(raw) && raw[i] == '-' {
		neg = true
		i++
	}
	if i == len(raw) {
		return 0, false
	}
	var n int64
	for ; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > limit {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}
