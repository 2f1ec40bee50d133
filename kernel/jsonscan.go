package kernel

import "errors"

// This file exports the kernel's JSON reader for the packages around it
// (kernel/scenario, the browser build), so that every host reads scenario
// files with one strict reader and none needs encoding/json, whose
// reflection costs the browser build size and the wasm builds time.

// ScanObject reads doc, which must be exactly one JSON object, and calls f
// with each member's name and raw value bytes, in order. Malformed JSON and
// duplicate names are errors; so is an error from f, which stops the scan.
//
// The duplicate check costs time linear in the members: a list while they
// are few, a set beyond (a snapshot's trust table may hold a million).
func ScanObject(doc []byte, f func(name string, raw []byte) error) error {
	r := reader{b: doc}
	var few []string
	var many map[string]struct{}
	done, err := r.objectStart()
	for !done && err == nil {
		var key []byte
		var v jsonValue
		key, v, done, err = r.member()
		if err != nil {
			break
		}
		k := string(key)
		dup := false
		if many != nil {
			_, dup = many[k]
			many[k] = struct{}{}
		} else {
			for _, s := range few {
				dup = dup || s == k
			}
			if few = append(few, k); len(few) > 16 {
				many = make(map[string]struct{}, 64)
				for _, s := range few {
					many[s] = struct{}{}
				}
			}
		}
		if dup {
			return errors.New("duplicate field " + quoteField(k))
		}
		err = f(k, v.raw)
	}
	return err
}

// ScanMembers is ScanObject that passes duplicated names on to f instead
// of refusing them.
func ScanMembers(doc []byte, f func(name string, raw []byte) error) error {
	r := reader{b: doc}
	done, err := r.objectStart()
	for !done && err == nil {
		var key []byte
		var v jsonValue
		key, v, done, err = r.member()
		if err == nil {
			err = f(string(key), v.raw)
		}
	}
	return err
}

// ScanArray reads raw, which must be exactly one JSON array, and calls f
// with each element's raw bytes, in order.
func ScanArray(raw []byte, f func(elem []byte) error) error {
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
		if err := f(v.raw); err != nil {
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

// JSONKind names the kind of raw JSON value: "null", "a boolean",
// "a number", "a string", "an array" or "an object"; "" when raw does not
// start like a value.
func JSONKind(raw []byte) string {
	r := reader{b: raw}
	r.skipSpace()
	if r.pos >= len(r.b) {
		return ""
	}
	switch c := r.b[r.pos]; {
	case c == 'n':
		return kindNull.String()
	case c == 't' || c == 'f':
		return kindBool.String()
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber.String()
	case c == '"':
		return kindString.String()
	case c == '[':
		return kindArray.String()
	case c == '{':
		return kindObject.String()
	}
	return ""
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

// AppendCompact appends raw, a valid JSON value, without the white space
// between tokens. Strings are copied as written.
func AppendCompact(dst, raw []byte) []byte {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if in {
			dst = append(dst, c)
			if c == '\\' && i+1 < len(raw) {
				i++
				dst = append(dst, raw[i])
			} else if c == '"' {
				in = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			in = true
		}
		dst = append(dst, c)
	}
	return dst
}

// AppendQuote appends s as a JSON string, escaped as every kernel answer
// escapes strings.
func AppendQuote(dst []byte, s string) []byte { return appendString(dst, s) }

// IntLiteral reads raw as an integer literal (no fraction, no exponent,
// within ±2^53), the way the kernel reads atMs: "-0" is 0.
func IntLiteral(raw []byte) (int64, bool) { return intValue(raw) }
