package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchRuns runs a tiny load against the real server and checks the
// table's shape and that pairs were made; figures are not asserted.
func TestBenchRuns(t *testing.T) {
	code, out, errOut := cli(t, "bench", "--clients", "4", "--duration", "200ms", "--engines", "native")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// A header, column names, then per workload its row and the commit line.
	if len(lines) != 6 {
		t.Fatalf("want a header, column names and two workloads with commit lines:\n%s", out)
	}
	for i, w := range []string{"spread", "contended"} {
		f := strings.Fields(lines[2+2*i])
		if len(f) != 9 || f[0] != "leaseplane/native" || f[1] != w || f[2] == "0" || f[8] != "0" {
			t.Errorf("row %q: want leaseplane/native %s with pairs and no errors", lines[2+2*i], w)
		}
		if c := lines[3+2*i]; !strings.Contains(c, " commits/s, ") || !strings.Contains(c, " commands per commit, ") {
			t.Errorf("commit line %q", c)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--clients", "0"}, "--clients 0: want 1 to 10000"},
		{[]string{"bench", "--engines", "steam"}, `unknown engine "steam"`},
		{[]string{"bench", "--workloads", "spread,chaos"}, `unknown workload "chaos"`},
		{[]string{"bench", "--duration", "0s"}, "want a positive duration"},
		{[]string{"bench", "extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := cli(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestRESPClient checks the bench's Redis client against a scripted peer.
func TestRESPClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	replies := []string{"+OK\r\n", "$-1\r\n", ":1\r\n", "$3\r\nabc\r\n", "-ERR wrong\r\n"}
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		var first strings.Builder
		for i, rep := range replies {
			// Each command is *N then N pairs of $len / value lines.
			head, _ := r.ReadString('\n')
			n := 0
			for _, ch := range head[1 : len(head)-2] {
				n = n*10 + int(ch-'0')
			}
			for range 2 * n {
				l, _ := r.ReadString('\n')
				if i == 0 {
					first.WriteString(l)
				}
			}
			c.Write([]byte(rep))
		}
		got <- first.String()
	}()
	c, err := dialRESP(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	want := []string{"+OK", "$nil", ":1", "$abc"}
	for i, w := range want {
		args := []string{"PING"}
		if i == 0 {
			args = []string{"SET", "k", "v", "NX", "PX", "30000"}
		}
		r, err := c.do(args...)
		if err != nil || r != w {
			t.Errorf("reply %d: %q %v, want %q", i, r, err, w)
		}
	}
	if _, err := c.do("PING"); err == nil || !strings.Contains(err.Error(), "ERR wrong") {
		t.Errorf("error reply: %v", err)
	}
	if sent := <-got; sent != "$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n" {
		t.Errorf("encoded SET as %q", sent)
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
