package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// cli runs the tool in-process.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// table returns the rows of the table whose title starts with workload.
func table(out, workload string) [][]string {
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, workload+":"):
			in = true
		case line == "":
			in = false
		case in && !strings.HasPrefix(line, "target ") && !strings.Contains(line, "commits/s"):
			rows = append(rows, strings.Fields(line))
		}
	}
	return rows
}

// TestBenchRuns runs a tiny load of every workload against the real
// server and every peer, each through its own client library, and checks
// the tables' shape, that pairs were made and that nothing failed;
// figures are not asserted.
func TestBenchRuns(t *testing.T) {
	code, out, errOut := cli(t, "--clients", "4", "--duration", "300ms", "--engines", "native,wasm", "--peers", "redis,redis-aof,etcd", "--bare")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	targets := []string{"leaseplane/native", "leaseplane/wasm", "bare-map", "redis", "redis-aof", "etcd"}
	for _, w := range []string{"spread", "contended", "queue"} {
		rows := table(out, w)
		if len(rows) != len(targets) {
			t.Fatalf("%s: %d rows, want %d:\n%s", w, len(rows), len(targets), out)
		}
		for i, f := range rows {
			// target pairs/s p50 p99 max CPU/pair ×etcd ×redis errors
			if len(f) != 9 || f[0] != targets[i] || f[1] == "0" || f[8] != "0" {
				t.Errorf("%s row %q: want %s with pairs and no errors", w, f, targets[i])
			}
			if f[0] == "etcd" && f[6] != "1.00×" || f[0] == "redis" && f[7] != "1.00×" {
				t.Errorf("%s row %q: a peer's ratio to itself is not 1.00×", w, f)
			}
		}
		if !strings.Contains(out, "leaseplane/native ") || !strings.Contains(out, " commands per commit, ") {
			t.Errorf("no commit line for leaseplane:\n%s", out)
		}
	}
	for _, g := range []string{"spread: pairs/s ≥ 2× etcd's Mutex", "contended: pairs/s ≥ 2× etcd's Mutex", "queue: p99 time to a grant ≤ etcd's"} {
		if !strings.Contains(out, g) {
			t.Errorf("goal %q missing:\n%s", g, out)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients", "0"}, "--clients 0: want 1 to 10000"},
		{[]string{"--engines", "steam"}, `unknown engine "steam"`},
		{[]string{"--peers", "zookeeper"}, `unknown peer "zookeeper"`},
		{[]string{"--workloads", "spread,chaos"}, `unknown workload "chaos"`},
		{[]string{"--workloads", ""}, "name at least one"},
		{[]string{"--engines", "", "--peers", ""}, "no targets"},
		{[]string{"--duration", "0s"}, "want a positive duration"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := cli(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, errOut := cli(t, "-h"); code != 0 || !strings.Contains(errOut, "usage: leaseplane-bench") {
		t.Errorf("-h: exit %d stderr %q", code, errOut)
	}
}

// TestRawHTTP checks the bench's HTTP client against net/http's server.
func TestRawHTTP(t *testing.T) {
	var auths []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auths = append(auths, r.Header.Get("Authorization"))
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.WriteHeader(http.StatusConflict)
			w.Write(b)
		case "/chunked":
			w.Write([]byte("a"))
			w.(http.Flusher).Flush()
			w.Write([]byte("b"))
		}
	}))
	defer ts.Close()
	c, err := newRawHTTP(ts.URL, "k1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for i := range 3 {
		status, ans, err := c.do("POST", "/echo", []byte(`{"n":`+strconv.Itoa(i)+`}`))
		if err != nil || status != 409 || string(ans) != `{"n":`+strconv.Itoa(i)+`}` {
			t.Fatalf("request %d: %d %q %v", i, status, ans, err)
		}
		if i == 1 {
			// The server drops idle connections; the client redials once.
			ts.CloseClientConnections()
		}
	}
	if len(auths) != 3 || auths[0] != "Bearer k1" {
		t.Errorf("Authorization headers %q", auths)
	}
	if _, _, err := c.do("GET", "/chunked", nil); err == nil || !strings.Contains(err.Error(), "Transfer-Encoding chunked") {
		t.Errorf("chunked answer: err %v", err)
	}
	if _, err := newRawHTTP("https://x", ""); err == nil {
		t.Error("https URL accepted")
	}
}
