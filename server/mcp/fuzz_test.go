package mcp

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/leaseplane/leaseplane/kernel"
)

// FuzzToolArguments feeds arbitrary argument objects to every tool's
// argument check: it never panics; a body it builds is one JSON object the
// kernel's own decoding judges without panicking; and where the kernel
// accepts it, the resource and actorDid it reads are exactly the strings
// the arguments carried (nothing turned into U+FFFD or otherwise changed).
func FuzzToolArguments(f *testing.F) {
	f.Add(uint8(0), `{"resource":"lock:a","actorDid":"did:example:a"}`)
	f.Add(uint8(0), `{"resource":"lock:a","actorDid":"did:example:a","ttlMs":1e308}`)
	f.Add(uint8(1), `{"resource":"\ud800","actorDid":"did:example:a"}`)
	f.Add(uint8(0), "{\"resource\":\"lock:\xff\",\"actorDid\":\"did:example:a\"}")
	f.Add(uint8(2), `{}`)
	f.Add(uint8(0), `{"resource":null,"actorDid":"did:x:y"}`)
	f.Add(uint8(1), `[1,2]`)
	f.Add(uint8(0), `{"resource":"a\u0000b","actorDid":"did:example:a"}`)
	ts := tools()
	f.Fuzz(func(t *testing.T, which uint8, raw string) {
		tl := ts[int(which)%len(ts)]
		body, _, err := tl.body(json.RawMessage(raw))
		if err != nil || body == nil {
			return
		}
		c, derr := kernel.DecodeRequest(tl.op, 0, body)
		if derr != nil {
			return
		}
		var args map[string]json.RawMessage
		if json.Unmarshal([]byte(raw), &args) != nil {
			t.Fatalf("a body was built from arguments that are not an object: %q", raw)
		}
		for name, got := range map[string]string{"resource": c.Resource, "actorDid": c.ActorDid} {
			v, ok := args[name]
			if !ok {
				continue
			}
			var want string
			if json.Unmarshal(v, &want) != nil {
				t.Fatalf("%s %q is not a string, yet the kernel accepted %q", name, v, body)
			}
			if !utf8.ValidString(got) || got != want {
				t.Fatalf("%s: the kernel read %q from %q; the arguments said %q", name, got, body, want)
			}
		}
	})
}
