package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
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

// Answers as the plane words them, which decodeAnswerFast must read.
var planeAnswers = []string{
	`{"ok":true,"lease":{"id":"lease_41cccb55e5f1c784","resource":"x/y","holder":"did:a:1","mode":"write","fence":1,"grantedAtMs":1796190193762,"expiresAtMs":1796190223762}}`,
	`{"ok":false,"reason":"lease_held","holder":"did:a:1","holders":["did:a:1"],"stampede":{"admitted":["did:a:2"],"waitMs":50},"error":"x/y is held by did:a:1; retry after waitMs"}`,
	`{"ok":false,"reason":"lease_held","claimants":["did:a:3","did:a:4"],"stampede":{"admitted":[],"waitMs":800},"error":"x/y is claimed"}`,
	`{"ok":false,"reason":"deadlock","holder":"did:a:2","waitingOn":"r1","cycle":["did:a:1","r2","did:a:2","r1"],"error":"deadlock"}`,
	`{"ok":true,"released":true,"releasedIds":["lease_41cccb55e5f1c784"]}`,
	`{"ok":true,"released":false,"releasedIds":[]}`,
	`{"ok":false,"reason":"stale_lease","leaseId":"lease_41cccb55e5f1c784","error":"leaseId is not a live lease of did:a:1 on x/y"}`,
	`{"ok":false,"reason":"unauthorized","error":"no or bad Bearer key"}`,
	`{"ok":true,"lease":{"id":"l","resource":"` + "caf\u00e9/\u65e5\u672c \U0001F512 \u2028\x7f" + `","holder":"did:a:1","mode":"read","fence":-0,"grantedAtMs":0,"expiresAtMs":999999999999999999}}`,
	" {\n\t\"ok\" : true ,\r\n \"lease\" : { } } ",
	`{}`,
}

// Answers decodeAnswerFast leaves to encoding/json, and some it reads,
// each to be decoded as encoding/json decodes it.
var oddAnswers = []string{
	`{"ok":true,"extra":1}`, `{"OK":true}`, `{"Reason":"x"}`, `{"ok":true,"ok":false}`,
	`{"lease":{"id":"a"},"lease":{"fence":1}}`, `{"lease":null}`, `{"holders":null}`, `{"reason":null}`,
	`{"stampede":{"waitMs":1e3}}`, `{"stampede":{"waitMs":1.0}}`, `{"stampede":{"waitMs":0123}}`,
	`{"stampede":{"waitMs":-}}`, `{"stampede":{"waitMs":99999999999999999999}}`,
	`{"stampede":{"waitMs":9223372036854775807}}`, `{"stampede":{"waitMs":-9223372036854775808}}`,
	`{"stampede":{"waitMs":123456789012345678}}`, `{"stampede":{"waitMs":"5"}}`,
	`{"error":"a \"quoted\" \\ word\n"}`, `{"error":"\u00e9\ud83d\udd12"}`, `{"error":"\ud800"}`,
	"{\"error\":\"\xff\xfe\"}", "{\"error\":\"tab\there\"}", "{\"error\":\"\u2028\"}",
	`{"ok":true} x`, `{"ok":true,}`, `{"ok":true`, `{"ok":tru}`, `{"ok":truex}`, `{"ok":1}`,
	`{"holders":["a",]}`, `{"holders":["a" "b"]}`, `{"holders":[1]}`, `{"holders":"a"}`,
	`{"lease":{"id":"a","extra":{"deep":[1,2,{"x":null}]}}}`, `{"lease":[]}`, `{"ok":false,"stampede":{}}`,
	`{"ok":true}{"ok":false}`, `{"ok" true}`, `{ok:true}`, `{"ok":true,"released":false,"released":true}`,
}

// TestDecodeAnswer: the plane's answers take the one-pass decoder; every
// answer, odd or not, decodes (through decode, with its fallback) to what
// encoding/json gives, or fails where it fails.
func TestDecodeAnswer(t *testing.T) {
	for _, s := range planeAnswers {
		var a Answer
		if !decodeAnswerFast(bytes.TrimSpace([]byte(s)), &a) {
			t.Errorf("decodeAnswerFast does not read the plane's answer %s", s)
		}
	}
	for _, s := range append(slices.Clone(planeAnswers), oddAnswers...) {
		var want Answer
		werr := json.Unmarshal([]byte(s), &want)
		got := &Answer{}
		err := decode(kernel.OpAcquire, response{status: 200, body: []byte(s)}, got)
		if (err != nil) != (werr != nil) {
			t.Errorf("%s: error %v, encoding/json's %v", s, err, werr)
			continue
		}
		if err == nil && !reflect.DeepEqual(*got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v (encoding/json)", s, *got, want)
		}
	}
}

// FuzzDecodeAnswer: whatever decodeAnswerFast reads, encoding/json reads
// to the same Answer.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range append(slices.Clone(planeAnswers), oddAnswers...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got Answer
		if !decodeAnswerFast(b, &got) {
			return
		}
		var want Answer
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeAnswerFast read %q, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v (encoding/json)", b, got, want)
		}
	})
}

// TestDecodeAnswerAllocs: a grant decodes in three allocations (the
// Answer, its Lease, one copy of the body for the strings), a release in
// three (the Answer, the copy, the ids' slice).
func TestDecodeAnswerAllocs(t *testing.T) {
	for _, s := range []string{planeAnswers[0], planeAnswers[4]} {
		r := response{status: 200, body: []byte(s)}
		if n := testing.AllocsPerRun(100, func() { answerOf(kernel.OpAcquire, r) }); n != 3 {
			t.Errorf("answerOf(%s): %v allocations, want 3", s, n)
		}
	}
}
