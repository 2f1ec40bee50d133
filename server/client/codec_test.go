package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

// trickyStrings need escaping, or are not valid UTF-8, or sit at the edges
// of the escaping rules.
var trickyStrings = []string{
	"", "r", "bench/spread/3/7", "did:bench:client:63",
	`"`, `\`, `\"`, `a"b\c`, "/", "</script>", "a<b>c&d",
	"\x00", "\x01", "\x1f", "\x7f", "\b", "\f", "\n", "\r", "\t", "tab\there\nnewline",
	"\u2028", "\u2029", "x\u2028y\u2029z", "\u00e9t\u00e9", "\u65e5\u672c", "\U0001F512 lock", "\ufffd",
	"\xff", "\xc3\x28", "\xe2\x82", "ok\xf0\x9f\x94", "\xed\xa0\x80", // invalid UTF-8 (the last a surrogate)
	strings.Repeat("x", 300), strings.Repeat(`"\`, 50),
}

// TestEncodeLikeEncodingJSON: the hand-written bodies are valid JSON that
// decode (with encoding/json and with the kernel's reader, as the server
// reads them) to the same values as encoding/json's bytes of the same
// request; with no <, >, &, \b or \f (which encoding/json escapes its own
// way), they are those bytes exactly.
func TestEncodeLikeEncodingJSON(t *testing.T) {
	same := func(s string) bool { return !strings.ContainsAny(s, "<>&\b\f") }
	for i, s := range trickyStrings {
		other := trickyStrings[(i+7)%len(trickyStrings)]
		acquires := []AcquireRequest{
			{Resource: s, ActorDid: other},
			{Resource: other, ActorDid: s, Mode: "read"},
			{Resource: "r", ActorDid: "did:a:1", Mode: s},
		}
		for _, r := range acquires {
			got := encodeAcquire(r)
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			checkBody(t, got, want, same(r.Resource) && same(r.ActorDid) && same(r.Mode), new(AcquireRequest), new(AcquireRequest))
		}
		releases := []ReleaseRequest{
			{Resource: s, ActorDid: other},
			{Resource: other, ActorDid: s, LeaseID: "lease_0123"},
			{Resource: "r", ActorDid: "did:a:1", LeaseID: s},
		}
		for _, r := range releases {
			got := encodeRelease(r)
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			checkBody(t, got, want, same(r.Resource) && same(r.ActorDid) && same(r.LeaseID), new(ReleaseRequest), new(ReleaseRequest))
		}
	}
}

// checkBody compares a hand-written body with encoding/json's: decoded
// into g and w (encoding/json), member by member (the kernel's reader),
// and, when exact, byte for byte.
func checkBody[T comparable](t *testing.T, got, want []byte, exact bool, g, w *T) {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("%q is not valid JSON", got)
	}
	if exact && !bytes.Equal(got, want) {
		t.Errorf("got %s\nwant %s (encoding/json)", got, want)
	}
	if err := json.Unmarshal(got, g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, w); err != nil {
		t.Fatal(err)
	}
	if *g != *w {
		t.Errorf("%s decodes to %+v, encoding/json's %s to %+v", got, *g, want, *w)
	}
	members := func(b []byte) map[string]string {
		m := map[string]string{}
		err := kernel.ScanObject(b, func(name string, raw []byte) error {
			s, err := kernel.Unquote(raw)
			m[name] = s
			return err
		})
		if err != nil {
			t.Fatalf("the kernel's reader refuses %s: %v", b, err)
		}
		return m
	}
	mg, mw := members(got), members(want)
	if len(mg) != len(mw) {
		t.Errorf("the kernel reads %v from %s, %v from encoding/json's %s", mg, got, mw, want)
	}
	for k, v := range mw {
		if mg[k] != v {
			t.Errorf("the kernel reads %s=%q from %s, %q from encoding/json's %s", k, mg[k], got, v, want)
		}
	}
}

// TestEncodeAllocs: a body is one allocation when nothing needs escaping.
func TestEncodeAllocs(t *testing.T) {
	a := AcquireRequest{Resource: "bench/spread/12/3", ActorDid: "did:bench:client:12", Mode: "write"}
	r := ReleaseRequest{Resource: "bench/spread/12/3", ActorDid: "did:bench:client:12", LeaseID: "lease_41cccb55e5f1c784"}
	if n := testing.AllocsPerRun(100, func() { encodeAcquire(a) }); n != 1 {
		t.Errorf("encodeAcquire: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { encodeRelease(r) }); n != 1 {
		t.Errorf("encodeRelease: %v allocations, want 1", n)
	}
}
