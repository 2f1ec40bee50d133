package main

// The attack suite: what an attacker would try against a running plane,
// each as a test so that what holds stays held (docs/SECURITY.md lists
// them with the tests for the slow-body, MCP, revocation, header, clock
// and snapshot findings, which live beside the code they test).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
)

func TestAttacks(t *testing.T) {
	data := t.TempDir()
	s := e2eStart(t, "native", data, servertest.NewClock())
	ws := s.key
	agent := keysCLI(t, "create", "--data", data, "--workspace", "default", "--agent", didRelease)
	other := keysCLI(t, "create", "--data", data, "--workspace", "other", "--new-workspace")
	lease := s.url + "/api/v1/acp/coordination/lease"
	release := s.url + "/api/v1/acp/coordination/release"
	waitURL := s.url + "/api/v1/acp/coordination/wait"
	body := func(resource, actor string) string {
		return `{"resource":"` + resource + `","actorDid":"` + actor + `"}`
	}

	t.Run("impersonation: an agent key names only its own agent", func(t *testing.T) {
		expect(t, "own DID", e2eDo(t, "POST", lease, agent, body("lock:a", didRelease)), 200, "")
		expect(t, "another DID", e2eDo(t, "POST", lease, agent, body("lock:b", didCost)), 403, "actor_mismatch")
		expect(t, "release as another", e2eDo(t, "POST", release, agent, body("lock:a", didCost)), 403, "actor_mismatch")
		expect(t, "a DID that differs only in case", e2eDo(t, "POST", lease, agent, body("lock:b", "did:WEB"+didRelease[len("did:web"):])), 403, "actor_mismatch")
		expect(t, "the DID twice, the second another's", e2eDo(t, "POST", lease, agent, `{"resource":"lock:b","actorDid":"`+didRelease+`","actorDid":"`+didCost+`"}`), 400, "invalid_request")
		expect(t, "suspend with an agent key", e2eDo(t, "POST", s.url+"/api/v1/acp/operator/suspend", agent, `{"actorDid":"`+didCost+`"}`), 403, "forbidden")
		expect(t, "suspend with a workspace key", e2eDo(t, "POST", s.url+"/api/v1/acp/operator/suspend", ws, `{"actorDid":"`+didCost+`"}`), 403, "forbidden")
	})

	t.Run("cross-workspace: another workspace sees and frees nothing", func(t *testing.T) {
		expect(t, "grant in default", e2eDo(t, "POST", lease, ws, body("lock:secret-name", didCost)), 200, "")
		w := e2eDo(t, "GET", waitURL, other, "")
		expect(t, "wait in other", w, 200, "")
		if strings.Contains(string(w.raw), "secret-name") || strings.Contains(string(w.raw), didCost) {
			t.Fatalf("the other workspace sees default's queues: %s", w.raw)
		}
		r := e2eDo(t, "POST", release, other, body("lock:secret-name", didCost))
		if r.status != 200 || r.m["released"] != false {
			t.Fatalf("release from the other workspace: %s", r.raw)
		}
		expect(t, "still held in default", e2eDo(t, "POST", lease, ws, body("lock:secret-name", didRelease)), 409, "lease_held")
	})

	t.Run("malformed Authorization headers", func(t *testing.T) {
		for _, h := range []string{"", "Bearer", "Bearer ", "Basic " + ws, ws, "Bearer lp_", "Bearer " + ws + "x",
			"Bearer " + ws[:len(ws)-1], "Bearer " + strings.Repeat("a", 100_000), "Bearer lp_\u00e9\u200b", "Token " + ws} {
			req, _ := http.NewRequest("GET", waitURL, nil)
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			resp, b := servertest.Send(t, req)
			if resp.StatusCode < 400 || resp.StatusCode >= 500 || (resp.StatusCode == 401 && !strings.Contains(string(b), `"unauthorized"`)) {
				t.Errorf("Authorization %.40q: %d %s; want a 4xx refusal", h, resp.StatusCode, b)
			}
		}
		// Two headers, a bogus one first: the first is the one judged.
		req, _ := http.NewRequest("GET", waitURL, nil)
		req.Header.Add("Authorization", "Bearer lp_bogus")
		req.Header.Add("Authorization", "Bearer "+ws)
		resp, _ := servertest.Send(t, req)
		if resp.StatusCode != 401 {
			t.Errorf("two Authorization headers, the first bogus: %d", resp.StatusCode)
		}
	})

	t.Run("keys in the query string are not keys", func(t *testing.T) {
		for _, q := range []string{"key", "access_token", "api_key", "token", "Authorization"} {
			expect(t, "?"+q+"=", e2eDo(t, "GET", waitURL+"?"+q+"="+ws, "", ""), 401, "unauthorized")
		}
	})

	t.Run("oversized and deep bodies", func(t *testing.T) {
		big := `{"resource":"` + strings.Repeat("x", 9000) + `","actorDid":"` + didCost + `"}`
		expect(t, "9 KB body", e2eDo(t, "POST", lease, ws, big), 413, "body_too_large")
		deep := `{"resource":"lock:d","actorDid":"` + didCost + `","ttlMs":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + `}`
		expect(t, "3000 nested arrays", e2eDo(t, "POST", lease, ws, deep), 400, "invalid_request")
		deepObj := `{"resource":"lock:d","actorDid":"` + didCost + `","x":` + strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000) + `}`
		expect(t, "1000 nested objects", e2eDo(t, "POST", lease, ws, deepObj), 400, "invalid_request")
		var many strings.Builder
		many.WriteString(`{"resource":"lock:d","actorDid":"` + didCost + `"`)
		for i := range 20 {
			fmt.Fprintf(&many, `,"f%d":1`, i)
		}
		many.WriteString("}")
		expect(t, "22 members", e2eDo(t, "POST", lease, ws, many.String()), 400, "invalid_request")
		expect(t, "not JSON", e2eDo(t, "POST", lease, ws, "\x00\xff{"), 400, "invalid_request")
	})

	t.Run("a chunked body past the limit", func(t *testing.T) {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /api/v1/acp/coordination/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n", ws)
		chunk := strings.Repeat("x", 4096)
		for range 4 {
			fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("16 KB chunked: %d, want 413", resp.StatusCode)
		}
	})

	t.Run("traversal on the static routes", func(t *testing.T) {
		for _, p := range []string{"/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
			"/static/..%2f..%2f..%2fgo.mod", "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/static/app.css%00.js",
			"/static/..\\..\\go.mod", "/static/.", "/static/", "/playground/../../../etc/passwd", "/docs/%2e%2e/%2e%2e/go.mod"} {
			c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", p) // the path as sent, not cleaned by a client
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.Close()
			if strings.Contains(string(b), "root:") || strings.Contains(string(b), "module github.com/leaseplane") ||
				(resp.StatusCode == 200 && !strings.HasPrefix(p, "/static/app.css")) {
				t.Errorf("GET %s: %d %.200s", p, resp.StatusCode, b)
			}
		}
	})

	t.Run("a method a route does not take", func(t *testing.T) {
		expect(t, "GET lease", e2eDo(t, "GET", lease, ws, ""), 405, "method_not_allowed")
		expect(t, "DELETE release", e2eDo(t, "DELETE", release, ws, ""), 405, "method_not_allowed")
	})

	t.Run("a revoked key stops at once", func(t *testing.T) {
		k := keysCLI(t, "create", "--data", data, "--workspace", "default")
		expect(t, "before", e2eDo(t, "GET", waitURL, k, ""), 200, "")
		keysCLI(t, "revoke", "--data", data, k)
		expect(t, "after", e2eDo(t, "GET", waitURL, k, ""), 401, "unauthorized")
	})
}
