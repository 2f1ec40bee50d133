package jsontext

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Kind is the type of a JSON value.
type Kind uint8

const (
	Invalid Kind = iota // not the start of a JSON value
	Null
	Bool
	Number
	String
	Array
	Object
)

// String names the kind as an error message does: "null", "a boolean",
// "a number", "a string", "an array", "an object" (or "not JSON").
func (k Kind) String() string {
	return [...]string{"not JSON", "null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// Value is one value the reader met: its kind, its bytes as written, and
// for a string member of the object read, its decoded text.
type Value struct {
	Kind Kind
	Str  string // the text of a string at the top of an object
	Raw  []byte // the value's bytes as written
}

// reader is a strict JSON reader over one document. maxDepth, when above
// zero, bounds nesting (the document's object is depth 1, each object or
// array inside it one more); deeper input is refused with tooDeep.
type reader struct {
	b        []byte
	pos      int
	maxDepth int
	tooDeep  error
}

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
		return false, errors.New("body must be a JSON object, not " + v.Kind.String())
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
func (r *reader) member() (key []byte, v Value, done bool, err error) {
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
		return nil, v, false, errors.New(QuoteField(string(key)) + ": " + err.Error())
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
func (r *reader) value(depth int) (Value, error) {
	r.skipSpace()
	if r.pos >= len(r.b) {
		return Value{}, r.syntax("unexpected end of input, want a value")
	}
	start := r.pos
	switch c := r.b[r.pos]; {
	case c == '"' && depth > 1:
		// Inside a nested container strings are only checked for syntax:
		// their text is read, strictly, when a field is decoded.
		err := r.skipString()
		return Value{Kind: String, Raw: r.b[start:r.pos]}, err
	case c == '"':
		s, err := r.string()
		return Value{Kind: String, Str: s, Raw: r.b[start:r.pos]}, err
	case c == '{' || c == '[':
		kind := Object
		if c == '[' {
			kind = Array
		}
		if err := r.container(depth + 1); err != nil {
			return Value{}, err
		}
		return Value{Kind: kind, Raw: r.b[start:r.pos]}, nil
	case c == 't':
		err := r.literal("true")
		return Value{Kind: Bool, Raw: r.b[start:r.pos]}, err
	case c == 'f':
		err := r.literal("false")
		return Value{Kind: Bool, Raw: r.b[start:r.pos]}, err
	case c == 'n':
		err := r.literal("null")
		return Value{Kind: Null, Raw: r.b[start:r.pos]}, err
	case c == '-' || (c >= '0' && c <= '9'):
		if err := r.number(); err != nil {
			return Value{}, err
		}
		return Value{Kind: Number, Raw: r.b[start:r.pos]}, nil
	default:
		return Value{}, r.syntax("unexpected character " + strconv.QuoteRune(rune(c)))
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
			return r.tooDeep
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

// Int reads an integer number literal. Fractions, exponents and values
// beyond ±2^53 are refused, so every host (JavaScript included) reads the
// same integer.
func Int(raw []byte) (int64, bool) {
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

// Options say how ReadObject reads: Duplicates lets a name appear more
// than once (every member is passed on); otherwise a repeated name is an
// error. MaxMembers and MaxDepth, when above zero, bound the object's
// members and its nesting (the object is depth 1), refused with TooMany
// and TooDeep before the rest of the input is read, so a huge document
// costs no more than the part that breaks the bound.
type Options struct {
	Duplicates bool
	MaxMembers int
	TooMany    error
	MaxDepth   int
	TooDeep    error
}

// ReadObject reads doc, which must be exactly one JSON object, and calls f
// with each member's name and value, in order. name aliases doc when it
// has no escapes. Malformed JSON, a broken bound, a duplicate name (unless
// allowed) and an error from f end the read with that error.
func ReadObject(doc []byte, o Options, f func(name []byte, v Value) error) error {
	r := reader{b: doc, maxDepth: o.MaxDepth, tooDeep: o.TooDeep}
	// The duplicate check costs time linear in the members: a list while
	// they are few, a set beyond (a snapshot's trust table may hold a
	// million).
	var fewBuf [16][]byte
	few := fewBuf[:0]
	var many map[string]struct{}
	done, err := r.objectStart()
	for n := 0; !done && err == nil; n++ {
		if o.MaxMembers > 0 && n == o.MaxMembers {
			return o.TooMany
		}
		var name []byte
		var v Value
		if name, v, done, err = r.member(); err != nil {
			break
		}
		if !o.Duplicates {
			dup := false
			if many != nil {
				_, dup = many[string(name)]
				many[string(name)] = struct{}{}
			} else {
				for _, s := range few {
					dup = dup || string(s) == string(name)
				}
				if few = append(few, name); len(few) > 16 {
					many = make(map[string]struct{}, 64)
					for _, s := range few {
						many[string(s)] = struct{}{}
					}
				}
			}
			if dup {
				return errors.New("duplicate field " + QuoteField(string(name)))
			}
		}
		err = f(name, v)
	}
	return err
}

// ReadArray reads raw, which must be exactly one JSON array, and calls f
// with each element, in order.
func ReadArray(raw []byte, f func(v Value) error) error {
	r := reader{b: raw}
	r.skipSpace()
	if r.pos >= len(r.b) || r.b[r.pos] != '[' {
		return errors.New("want a JSON array")
	}
	r.pos++
	r.skipSpace()
	if r.pos < len(r.b) && r.b[r.pos] == ']' {
		r.pos++
		return r.end()
	}
	for {
		v, err := r.value(0)
		if err != nil {
			return err
		}
		if err := f(v); err != nil {
			return err
		}
		r.skipSpace()
		if r.pos >= len(r.b) {
			return r.syntax("unexpected end of input in an array")
		}
		switch r.b[r.pos] {
		case ',':
			r.pos++
			continue
		case ']':
			r.pos++
			return r.end()
		}
		return r.syntax("want ',' or ']'")
	}
}

// KindOf is the kind of the JSON value raw starts with (Invalid when it
// starts like none).
func KindOf(raw []byte) Kind {
	r := reader{b: raw}
	r.skipSpace()
	if r.pos >= len(r.b) {
		return Invalid
	}
	switch c := r.b[r.pos]; {
	case c == 'n':
		return Null
	case c == 't' || c == 'f':
		return Bool
	case c == '-' || (c >= '0' && c <= '9'):
		return Number
	case c == '"':
		return String
	case c == '[':
		return Array
	case c == '{':
		return Object
	}
	return Invalid
}

// Unquote decodes raw, which must be exactly one JSON string.
func Unquote(raw []byte) (string, error) {
	r := reader{b: raw}
	r.skipSpace()
	if r.pos >= len(r.b) || r.b[r.pos] != '"' {
		return "", errors.New("want a JSON string")
	}
	s, err := r.string()
	if err != nil {
		return "", err
	}
	return s, r.end()
}

// QuoteField quotes a field name for an error message, cut to 64 bytes.
func QuoteField(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return string(AppendString(nil, s))
}

// Halves reads a number written by AppendHalves: an integer, or one
// ending in .5; the result counts half points.
func Halves(raw []byte) (int64, bool) {
	s := raw
	half := int64(0)
	if len(s) > 2 && string(s[len(s)-2:]) == ".5" {
		s, half = s[:len(s)-2], 1
	}
	n, ok := Int(s)
	if !ok {
		return 0, false
	}
	h := 2*max(n, -n) + half
	if s[0] == '-' {
		h = -h
	}
	return h, true
}
