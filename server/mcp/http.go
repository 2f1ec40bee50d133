package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseplane/leaseplane/kernel/api"
)

// MaxBodyBytes bounds one HTTP request body on /mcp; a larger body is
// answered 413. A tool call is a few hundred bytes.
const MaxBodyBytes = 1 << 20

// Authenticator is what a Backend may add to have keys checked at the HTTP
// level: status and answer are the REST refusal (401 unauthorized, 503
// unavailable) when ok is false. *server.Server satisfies it.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (status int, answer []byte, ok bool)
}

// Handler serves the tools over MCP's streamable HTTP transport, statelessly
// (no Mcp-Session-Id: any replica can answer any request) with JSON
// responses.
//
// Every request must carry "Authorization: Bearer KEY", and when b is an
// Authenticator the key must be one the plane accepts: otherwise the
// request is answered HTTP 401 with the REST route's JSON refusal and a
// WWW-Authenticate challenge before any MCP processing (initialize and
// tools/list included) and before its body is read. The key is also handed
// to the Backend with each tool call, so an agent key naming another agent
// gives an isError tool result (actor_mismatch).
//
// Every HTTP-level error of the transport (wrong method, media type or
// Accept header, a malformed or oversized body) is answered as JSON,
// {"ok":false,"reason":...,"error":...}, like the REST routes' refusals.
func Handler(b Backend, o Options) http.Handler {
	s := newServer(b, func(req *sdk.CallToolRequest) string {
		if req.Extra == nil {
			return ""
		}
		key, _ := headerKey(req.Extra.Header)
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
	auth, _ := b.(Authenticator)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := headerKey(r.Header)
		if !ok {
			refuse(w, http.StatusUnauthorized, []byte(`{"ok":false,"reason":"unauthorized","error":"send the workspace or agent key as Authorization: Bearer KEY"}`))
			return
		}
		if auth != nil {
			if status, answer, ok := auth.Authenticate(r.Context(), key); !ok {
				refuse(w, status, answer)
				return
			}
		}
		if r.ContentLength > MaxBodyBytes {
			refuse(w, http.StatusRequestEntityTooLarge, refusalJSON(http.StatusRequestEntityTooLarge,
				"request body exceeds "+strconv.Itoa(MaxBodyBytes)+" bytes"))
			return
		}
		jw := &jsonErrors{w: w}
		h.ServeHTTP(jw, r)
		jw.finish()
	})
}

// refuse answers an HTTP-level refusal before the body is read, and closes
// the connection so the rest of the body is not read either.
func refuse(w http.ResponseWriter, status int, answer []byte) {
	h := w.Header()
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

// reasons name the HTTP-level errors of the transport.
var reasons = map[int]string{
	http.StatusBadRequest:            "invalid_request",
	http.StatusUnauthorized:          "unauthorized",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not_found",
	http.StatusMethodNotAllowed:      "method_not_allowed",
	http.StatusConflict:              "conflict",
	http.StatusRequestEntityTooLarge: "body_too_large",
	http.StatusUnsupportedMediaType:  "unsupported_media_type",
}

// refusalJSON is the JSON refusal for an HTTP-level error.
func refusalJSON(status int, msg string) []byte {
	reason := reasons[status]
	if reason == "" {
		reason = "internal"
		if status < 500 {
			reason = "invalid_request"
		}
	}
	b, _ := json.Marshal(struct {
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
		Error  string `json:"error"`
	}{false, reason, msg})
	return b
}

// jsonErrors is a ResponseWriter that turns the transport's plain-text
// error answers (http.Error) into JSON refusals; every other answer
// passes through unchanged.
type jsonErrors struct {
	w       http.ResponseWriter
	status  int // the error status held back; 0 when passing through
	msg     bytes.Buffer
	written bool
}

func (j *jsonErrors) Header() http.Header { return j.w.Header() }

func (j *jsonErrors) WriteHeader(status int) {
	if j.written || j.status != 0 {
		return
	}
	if status >= 400 && !strings.HasPrefix(j.w.Header().Get("Content-Type"), "application/json") {
		j.status = status
		return
	}
	j.written = true
	j.w.WriteHeader(status)
}

func (j *jsonErrors) Write(p []byte) (int, error) {
	if !j.written && j.status == 0 {
		j.WriteHeader(http.StatusOK)
	}
	if j.status != 0 {
		if j.msg.Len() < 4096 {
			j.msg.Write(p)
		}
		return len(p), nil
	}
	return j.w.Write(p)
}

// Flush passes a flush through (server-sent events).
func (j *jsonErrors) Flush() {
	if j.status == 0 {
		if f, ok := j.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (j *jsonErrors) Unwrap() http.ResponseWriter { return j.w }

// finish writes the JSON refusal held back, if any.
func (j *jsonErrors) finish() {
	if j.status == 0 {
		return
	}
	h := j.w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	j.w.WriteHeader(j.status)
	_, _ = j.w.Write(refusalJSON(j.status, strings.TrimSpace(j.msg.String())))
}

// headerKey returns the key of an "Authorization: Bearer KEY" header,
// which MCP requires: an absent header is not ok.
func headerKey(h http.Header) (string, bool) {
	key, ok := api.BearerKey(h.Get("Authorization"))
	return key, ok && key != ""
}
