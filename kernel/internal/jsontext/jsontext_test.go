package jsontext

import (
	"errors"
	"strings"
	"testing"
)

func TestReadObjectPolicies(t *testing.T) {
	tooMany, tooDeep := errors.New("too many"), errors.New("too deep")
	bounded := Options{MaxMembers: 2, TooMany: tooMany, MaxDepth: 2, TooDeep: tooDeep}
	for _, c := range []struct {
		doc   string
		o     Options
		names string // the names passed on, joined
		err   string // part of the error, "" for none
	}{
		{`{"a":1,"b":"x"}`, Options{}, "a,b", ""},
		{`{"a":1,"a":2}`, Options{}, "a", `duplicate field "a"`},
		{`{"a":1,"a":2}`, Options{Duplicates: true}, "a,a", ""},
		{`{"a":1,"b":2}`, bounded, "a,b", ""},
		{`{"a":1,"b":2,"c":3}`, bounded, "a,b", "too many"},
		{`{"a":[1]}`, bounded, "a", ""},
		{`{"a":[[1]]}`, bounded, "", "too deep"},
		{`{"a":[[1]]}`, Options{}, "a", ""},
		{`[1]`, Options{}, "", "body must be a JSON object, not an array"},
		{`{"a":1} x`, Options{}, "", "trailing data"},
		{``, Options{}, "", "body is empty"},
	} {
		var names []string
		err := ReadObject([]byte(c.doc), c.o, func(name []byte, v Value) error {
			names = append(names, string(name))
			return nil
		})
		if got := strings.Join(names, ","); c.err == "" && (err != nil || got != c.names) {
			t.Errorf("%s: names %q, err %v; want %q", c.doc, got, err, c.names)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: err %v, want one naming %q", c.doc, err, c.err)
		}
	}
}

func TestKindOf(t *testing.T) {
	for raw, want := range map[string]Kind{
		`null`: Null, ` true`: Bool, `-1`: Number, `"s"`: String, `[]`: Array, `{}`: Object, ``: Invalid, `x`: Invalid,
	} {
		if got := KindOf([]byte(raw)); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", raw, got, want)
		}
	}
}

func TestHalvesRoundTrip(t *testing.T) {
	for _, h := range []int64{0, 1, -1, 2, -2, 3, -3, 21, -21} {
		b := AppendHalves(nil, h)
		if got, ok := Halves(b); !ok || got != h {
			t.Errorf("Halves(%s) = %d %v, want %d", b, got, ok, h)
		}
	}
}

func TestAppendStringEscapes(t *testing.T) {
	got := string(AppendString(nil, "q\"\\\n\x01\u2028\xff"))
	if want := `"q\"\\\n\u0001\u2028\ufffd"`; got != want {
		t.Errorf("AppendString = %s, want %s", got, want)
	}
}
