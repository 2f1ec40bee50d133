package mcp

import (
	"net/http"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxBodyBytes bounds one HTTP request body on /mcp; a larger body is
// answered 413. A tool call is a few hundred bytes.
const MaxBodyBytes = 1 << 20

// Handler serves the tools over MCP's streamable HTTP transport, statelessly
// (no Mcp-Session-Id: any replica can answer any request) with JSON
// responses.
//
// Every request must carry "Authorization: Bearer KEY": one without a
// bearer key is answered HTTP 401 with a JSON refusal and a
// WWW-Authenticate challenge, before any MCP processing, as MCP clients
// expect. The key is taken from each request's own header and handed to the
// Backend with each tool call, so a key the plane does not know, or an agent
// key naming another agent, gives an isError tool result (unauthorized,
// actor_mismatch) rather than an HTTP error.
func Handler(b Backend, o Options) http.Handler {
	s := newServer(b, func(req *sdk.CallToolRequest) string {
		if req.Extra == nil {
			return ""
		}
		key, _ := bearer(req.Extra.Header)
		return key
	}, o)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{
		Stateless:           true,
		JSONResponse:        true,
		Logger:              o.Logger,
		MaxRequestBodyBytes: MaxBodyBytes,
		// The SDK's DNS-rebinding guard answers 403 to a request that
		// reaches a loopback address with another Host, which is every
		// request through a reverse proxy on the same machine. It guards
		// servers that trust any local caller; this one answers nothing
		// without a bearer key, which a rebinding page does not have.
		DisableLocalhostProtection: true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := bearer(r.Header); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"ok":false,"reason":"unauthorized","error":"send the workspace or agent key as Authorization: Bearer KEY"}`))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearer returns the key of an "Authorization: Bearer KEY" header; the
// scheme is case-insensitive (RFC 9110) and the key must not be empty.
func bearer(h http.Header) (string, bool) {
	v := h.Get("Authorization")
	scheme, key, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	return key, key != ""
}
