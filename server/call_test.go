package server

import (
	"testing"

	"github.com/leaseplane/leaseplane/kernel/api"
)

// TestRefusalEscapesAsTheKernel checks that the server's own refusals
// escape strings exactly as kernel answers do: U+2028 and U+2029 (which
// break JavaScript string literals) escaped, invalid UTF-8 replaced.
func TestRefusalEscapesAsTheKernel(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		{"plain", `{"ok":false,"reason":"unavailable","error":"plain"}`},
		{"a\u2028b\u2029c", `{"ok":false,"reason":"unavailable","error":"a\u2028b\u2029c"}`},
		{"bad \xff byte", `{"ok":false,"reason":"unavailable","error":"bad \ufffd byte"}`},
		{"q\"\\\n\x01", `{"ok":false,"reason":"unavailable","error":"q\"\\\n\u0001"}`},
	} {
		if got := string(refusal(503, api.ReasonUnavailable, c.msg).answer); got != c.want {
			t.Errorf("refusal(%q) = %s, want %s", c.msg, got, c.want)
		}
	}
}
