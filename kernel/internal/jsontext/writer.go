package jsontext

import (
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. It escapes '"', '\\', control
// characters, U+2028 and U+2029, and replaces invalid UTF-8 with U+FFFD.
func AppendString(b []byte, s string) []byte {
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

// AppendInt appends n as a JSON number.
func AppendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// AppendHalves appends a count of half points as a JSON number: 3 → 1.5.
func AppendHalves(b []byte, h int64) []byte {
	if h < 0 && h%2 != 0 && h/2 == 0 {
		b = append(b, '-') // -1 half point is -0.5: the integer part loses the sign
	}
	b = strconv.AppendInt(b, h/2, 10)
	if h%2 != 0 {
		b = append(b, '.', '5')
	}
	return b
}

// AppendStrings appends ss as a JSON array of strings.
func AppendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// Compact appends raw, a valid JSON value, without the white space
// between tokens. Strings are copied as written.
func Compact(dst, raw []byte) []byte {
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
