package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// TestServeMountsMCP starts serve in-process and checks that /mcp answers:
// 401 without a key, an MCP initialize result with the bootstrap key.
func TestServeMountsMCP(t *testing.T) {
	s := serveInProcess(t, []string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "warn"}, serveEnv{clock: time.Now})
	key := s.key
	if key == "" {
		t.Fatalf("no bootstrap key in serve's output:\n%s", s.out)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}`
	for _, c := range []struct {
		key      string
		status   int
		contains string
	}{
		{"", http.StatusUnauthorized, `"reason":"unauthorized"`},
		{key, http.StatusOK, `"serverInfo":{"name":"leaseplane"`},
	} {
		req, _ := http.NewRequest(http.MethodPost, s.url+MCPPath, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		resp, body := servertest.Send(t, req)
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.contains) {
			t.Errorf("POST %s with key %q: %d %s, want %d containing %s", MCPPath, c.key, resp.StatusCode, body, c.status, c.contains)
		}
	}
}

func TestMCPBadURL(t *testing.T) {
	for _, u := range []string{"127.0.0.1:8080", "ftp://plane", "http://", "://x"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"mcp", "--url", u}, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("mcp --url %q: exit %d, want 2", u, code)
		}
		if !strings.Contains(stderr.String(), "want http://HOST:PORT") {
			t.Errorf("mcp --url %q: stderr %q, want a message naming the URL form", u, stderr.String())
		}
	}
}

func TestMCPUsage(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"--no-such-flag"}} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"mcp"}, args...), strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("mcp %v: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "usage: leaseplane mcp") {
			t.Errorf("mcp %v: stderr %q, want the usage", args, stderr.String())
		}
	}
}
