package mcp

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// post sends one raw JSON-RPC body to the real plane's /mcp.
func post(t *testing.T, url, key, contentType, accept, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+mcpPath, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, b := servertest.Send(t, req)
	return resp.StatusCode, resp.Header, b
}

const (
	jsonType  = "application/json"
	bothTypes = "application/json, text/event-stream"
	initBody  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	listBody  = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
)

// TestMCPKeepsTheRESTContract: over /mcp of the real server, a key the
// plane does not know is refused before any MCP processing, every
// HTTP-level error is JSON, and resource names are judged by the kernel's
// own decoding, byte for byte as the REST route judges them.
func TestMCPKeepsTheRESTContract(t *testing.T) {
	p := startRealPlane(t)

	t.Run("a bogus key is refused for initialize and tools/list", func(t *testing.T) {
		for _, body := range []string{initBody, listBody} {
			status, h, b := post(t, p.url, "lp_not-a-key", jsonType, bothTypes, body)
			var v map[string]any
			if status != 401 || json.Unmarshal(b, &v) != nil || v["reason"] != "unauthorized" || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: %d %s; want 401 unauthorized as JSON with a Bearer challenge", body, status, b)
			}
		}
		if status, _, b := post(t, p.url, p.wsKey, jsonType, bothTypes, listBody); status != 200 || !strings.Contains(string(b), ToolAcquire) {
			t.Errorf("tools/list with a good key: %d %s", status, b)
		}
	})

	t.Run("HTTP-level errors are JSON", func(t *testing.T) {
		cases := []struct {
			name, method, contentType, accept, body string
			status                                  int
			reason                                  string
		}{
			{"GET", http.MethodGet, "", bothTypes, "", 405, "method_not_allowed"},
			{"PUT", http.MethodPut, jsonType, bothTypes, initBody, 405, "method_not_allowed"},
			{"text body", http.MethodPost, "text/plain", bothTypes, initBody, 415, "unsupported_media_type"},
			{"no Accept", http.MethodPost, jsonType, "", initBody, 400, "invalid_request"},
			{"malformed JSON", http.MethodPost, jsonType, bothTypes, `{"jsonrpc":`, 400, "invalid_request"},
			{"empty body", http.MethodPost, jsonType, bothTypes, "", 400, "invalid_request"},
			{"oversized", http.MethodPost, jsonType, bothTypes, `{"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413, "body_too_large"},
		}
		for _, c := range cases {
			req, _ := http.NewRequest(c.method, p.url+mcpPath, strings.NewReader(c.body))
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			if c.accept != "" {
				req.Header.Set("Accept", c.accept)
			}
			req.Header.Set("Authorization", "Bearer "+p.wsKey)
			if c.status == http.StatusRequestEntityTooLarge {
				// The refusal comes before the body is read and closes the
				// connection: a client still writing a large body may see the
				// reset before the answer, so ask first, as large uploads do.
				req.Header.Set("Expect", "100-continue")
			}
			resp, b := servertest.Send(t, req)
			var v struct {
				OK     *bool  `json:"ok"`
				Reason string `json:"reason"`
				Error  string `json:"error"`
			}
			if resp.StatusCode != c.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), jsonType) ||
				json.Unmarshal(b, &v) != nil || v.OK == nil || *v.OK || v.Reason != c.reason || v.Error == "" {
				t.Errorf("%s: %d %q %s; want %d with a JSON refusal %q", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, c.status, c.reason)
			}
		}
	})

	t.Run("names the REST route refuses are refused", func(t *testing.T) {
		for _, name := range []string{
			"lock:\xff\xfe",     // invalid UTF-8
			`lock:\ud800`,       // a lone high surrogate
			`lock:\udc00x`,      // a lone low surrogate
			"lock:\xed\xa0\x80", // a surrogate encoded in UTF-8
			`lock:\u0000`,       // and as an escape
		} {
			body := `{"resource":"` + name + `","actorDid":"did:web:acme.example:agent:a"}`
			req, _ := http.NewRequest(http.MethodPost, p.url+"/api/v1/acp/coordination/lease", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+p.wsKey)
			resp, rest := servertest.Send(t, req)
			if resp.StatusCode != 400 {
				t.Fatalf("REST %q: %d %s; want 400", name, resp.StatusCode, rest)
			}
			call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"` + ToolAcquire + `","arguments":` + body + `}}`
			status, _, b := post(t, p.url, p.wsKey, jsonType, bothTypes, call)
			var v struct {
				Result struct {
					IsError           bool            `json:"isError"`
					StructuredContent json.RawMessage `json:"structuredContent"`
				} `json:"result"`
			}
			if status != 200 || json.Unmarshal(b, &v) != nil || !v.Result.IsError || string(v.Result.StructuredContent) != string(rest) {
				t.Errorf("MCP %q: %d %s\nwant an isError result carrying the REST answer %s", name, status, b, rest)
			}
		}
	})
}
