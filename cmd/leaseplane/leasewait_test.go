package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeaseWaitGrantedOnRelease holds a lease, starts `leaseplane lease
// --wait 10s` as another agent, releases, and checks the waiter is granted
// having sent at most 3 HTTP requests (counted at the server). No time
// passes on the plane's clock: the release itself answers the waiter.
func TestLeaseWaitGrantedOnRelease(t *testing.T) {
	p := startPlane(t)
	var requests atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		p.srv.Handler().ServeHTTP(w, r)
	}))
	defer counted.Close()

	do := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+p.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const res = "lock:deploy/production"
	if m := do("POST", "/api/v1/acp/coordination/lease", `{"resource":"`+res+`","actorDid":"did:example:holder"}`); m["ok"] != true {
		t.Fatalf("setup: %v", m)
	}

	t.Setenv("LEASEPLANE_URL", counted.URL)
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := cli(t, "lease", res, "--as", "did:example:waiter", "--wait", "10s")
		done <- result{code, out, errOut}
	}()
	// Release only once the waiter's request is held at the plane.
	for i := 0; ; i++ {
		b, _ := json.Marshal(do("GET", "/api/v1/acp/coordination/wait", ""))
		if strings.Contains(string(b), `"actorDid":"did:example:waiter"`) {
			break
		}
		if i > 20000 {
			t.Fatalf("the waiter never showed in the queue: %s", b)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("lease --wait answered before the release: %d %s %s", r.code, r.out, r.errOut)
	default:
	}
	if m := do("POST", "/api/v1/acp/coordination/release", `{"resource":"`+res+`","actorDid":"did:example:holder"}`); m["released"] != true {
		t.Fatalf("release: %v", m)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, `"holder":"did:example:waiter"`) {
		t.Fatalf("lease --wait: exit %d, stdout %s, stderr %s; want the grant", r.code, r.out, r.errOut)
	}
	if n := requests.Load(); n < 1 || n > 3 {
		t.Errorf("the waiter sent %d HTTP requests, want 1 to 3", n)
	} else {
		t.Logf("the waiter sent %d HTTP request(s)", n)
	}
}
