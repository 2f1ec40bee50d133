package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// netHTTPAnswer reads an answer from raw with net/http, as its Transport
// does: interim 1xx answers skipped, the body read up to limit+1 bytes.
func netHTTPAnswer(raw []byte, limit int64) (status int, body []byte, retryAfter string, closed bool, err error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	req, _ := http.NewRequest("POST", "http://plane.example/api", nil)
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return 0, nil, "", false, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != 101 {
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		return resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Close, err
	}
}

// TestReadResponseLikeNetHTTP: an answer the client's own connections read
// gives the status, body and Retry-After that net/http reads from the same
// bytes, and is kept alive when net/http would keep it; what it refuses is
// an error naming the problem.
func TestReadResponseLikeNetHTTP(t *testing.T) {
	const limit = 64
	for _, tc := range []struct {
		name    string
		raw     string
		keep    bool
		wantErr string // "" for an answer
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}", true, ""},
		{"length zero", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true, ""},
		{"lower-case names", "HTTP/1.1 409 Conflict\r\ncontent-length: 2\r\nretry-after: 3\r\n\r\n{}", true, ""},
		{"no reason", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}", true, ""},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\n{}", true, ""},
		{"same length twice", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", true, ""},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"ok\r\n7;ext=1\r\n\":true}\r\n0\r\n\r\n", true, ""},
		{"chunked with a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Done: 1\r\n\r\n", true, ""},
		{"chunked wins over length", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", true, ""},
		{"to the end", "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\n\r\n<p>proxy</p>", false, ""},
		{"close", "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}", false, ""},
		{"close among tokens", "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\n{}", false, ""},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", false, ""},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}", true, ""},
		{"HTTP/1.0 has no chunked", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false, ""},
		{"interim first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX: y\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", true, ""},
		{"no content", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", true, ""},
		{"empty value", "HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 2\r\n\r\n{}", true, ""},
		{"Retry-After a date", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: Wed, 21 Oct 2026 07:28:00 GMT\r\nContent-Length: 2\r\n\r\n{}", true, ""},

		{"nothing", "", false, "EOF"},
		{"HTTP/2", "HTTP/2 200 OK\r\n\r\n", false, "malformed status line"},
		{"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", false, "malformed status line"},
		{"status 099", "HTTP/1.1 099 Low\r\n\r\n", false, "malformed status line"},
		{"status glued", "HTTP/1.1 200OK\r\n\r\n", false, "malformed status line"},
		{"not HTTP", "<html>\r\n\r\n", false, "malformed status line"},
		{"lengths differ", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", false, "bad Content-Length"},
		{"length not a number", "HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\n{}", false, "bad Content-Length"},
		{"length signed", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}", false, "bad Content-Length"},
		{"other coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false, "unsupported Transfer-Encoding"},
		{"no colon", "HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\n{}", false, "malformed header line"},
		{"space in a name", "HTTP/1.1 200 OK\r\nContent Length: 2\r\n\r\n{}", false, "malformed header line"},
		{"folded", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\n{}", false, "malformed header line"},
		{"cut in the headers", "HTTP/1.1 200 OK\r\nContent-Len", false, "unexpected EOF"},
		{"cut in the body", "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{\"ok\":", false, "unexpected EOF"},
		{"cut in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n{\"ok\"", false, "unexpected EOF"},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", false, "invalid byte in chunk length"},
		{"headers too long", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", false, "headers are over"},
		{"too long, known", "HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n" + strings.Repeat("x", 65), false, "over 64 bytes"},
	} {
		r, keep, err := readResponse(bufio.NewReader(strings.NewReader(tc.raw)), "POST", limit)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.wantErr)
			}
			if keep {
				t.Errorf("%s: a refused answer keeps its connection", tc.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		status, body, ra, closed, herr := netHTTPAnswer([]byte(tc.raw), limit)
		if herr != nil {
			t.Errorf("%s: net/http refuses it: %v", tc.name, herr)
			continue
		}
		wantRA := time.Duration(0)
		if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
			wantRA = time.Duration(n) * time.Second
		}
		if r.status != status || string(r.body) != string(body) || r.retryAfter != wantRA {
			t.Errorf("%s: got %d %q retry %v; net/http %d %q retry %v", tc.name, r.status, r.body, r.retryAfter, status, body, wantRA)
		}
		if keep != tc.keep || tc.keep && closed {
			t.Errorf("%s: kept %v, want %v (net/http closes: %v)", tc.name, keep, tc.keep, closed)
		}
	}
}

// TestReadResponseTooLongUnknown: an answer of unknown length past the
// limit comes back as limit+1 bytes (the caller's answer too long) and
// does not keep its connection.
func TestReadResponseTooLongUnknown(t *testing.T) {
	for _, raw := range []string{
		"HTTP/1.1 200 OK\r\n\r\n" + strings.Repeat("y", 200),
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nc8\r\n" + strings.Repeat("y", 200) + "\r\n0\r\n\r\n",
	} {
		r, keep, err := readResponse(bufio.NewReader(strings.NewReader(raw)), "POST", 64)
		if err != nil || len(r.body) != 65 || keep {
			t.Errorf("%q: %d bytes, keep %v, %v; want 65 bytes, not kept", raw[:30], len(r.body), keep, err)
		}
	}
}

// FuzzReadResponse: no input panics; where both readResponse and net/http
// read an answer, they read the same status and body.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nT: 1\r\n\r\n",
		"HTTP/1.0 100 Continue\r\n\r\nHTTP/1.1 409 Conflict\r\nRetry-After: 2\r\n\r\nabc",
		"HTTP/1.1 204 No Content\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, _, err := readResponse(bufio.NewReader(bytes.NewReader(raw)), "POST", 256)
		if err != nil {
			return
		}
		status, body, _, _, herr := netHTTPAnswer(raw, 256)
		if herr != nil {
			return
		}
		if r.status != status || !bytes.Equal(r.body, body) {
			t.Errorf("%q: got %d %q; net/http %d %q", raw, r.status, r.body, status, body)
		}
	})
}

// countingServer is an httptest server answering every request with a
// release, counting the connections it opened and closed.
type countingServer struct {
	*httptest.Server
	opened, closed atomic.Int64
	requests       atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc, tlsToo bool) *countingServer {
	cs := &countingServer{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true,"released":true}`)
		}
	}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.requests.Add(1)
		h(w, r)
	}))
	cs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			cs.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			cs.closed.Add(1)
		}
	}
	if tlsToo {
		cs.StartTLS()
	} else {
		cs.Start()
	}
	t.Cleanup(cs.Close)
	return cs
}

func release(c *Client, i int) (*Answer, error) {
	return c.Release(context.Background(), ReleaseRequest{Resource: "r", ActorDid: "did:a:" + strconv.Itoa(i), LeaseID: "lease_1"})
}

// TestOwnConnsReuse: requests one after another share one connection;
// 16 goroutines at once open no more than 16; CloseIdleConnections closes
// them all.
func TestOwnConnsReuse(t *testing.T) {
	cs := newCountingServer(t, nil, false)
	c := New(cs.URL, "k1", nil)
	if c.own == nil {
		t.Fatal("New with no http.Client keeps no connections of its own")
	}
	for i := range 50 {
		if a, err := release(c, i); err != nil || !a.OK {
			t.Fatalf("request %d: %v %+v", i, err, a)
		}
	}
	if n := cs.opened.Load(); n != 1 {
		t.Errorf("50 requests one after another opened %d connections, want 1", n)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				if _, err := release(c, g*100+i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := cs.opened.Load(); n > 17 {
		t.Errorf("16 goroutines opened %d connections in all, want at most 17", n)
	}
	if n := cs.requests.Load(); n != 50+16*20 {
		t.Errorf("the server answered %d requests, want %d", n, 50+16*20)
	}
	c.CloseIdleConnections()
	waitFor(t, "the server to see every connection closed", func() bool { return cs.closed.Load() == cs.opened.Load() })
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOwnConnsServerClosedIdle: a kept-alive connection that the server
// closed while it was idle is found closed before it is used again: the
// next request goes on a new connection and is answered.
func TestOwnConnsServerClosedIdle(t *testing.T) {
	cs := newCountingServer(t, nil, false)
	c := New(cs.URL, "k1", nil)
	c.own.peekAfter = 0
	if _, err := release(c, 0); err != nil {
		t.Fatal(err)
	}
	cs.CloseClientConnections()
	waitFor(t, "the client's side to see the close", func() bool {
		c.own.mu.Lock()
		defer c.own.mu.Unlock()
		return len(c.own.idle) == 1 && !c.own.idle[0].alive()
	})
	if a, err := release(c, 1); err != nil || !a.OK {
		t.Fatalf("the request after the server's close: %v %+v", err, a)
	}
	if n := cs.opened.Load(); n != 2 {
		t.Errorf("opened %d connections, want 2", n)
	}
	// A live idle connection is still found alive.
	c.own.mu.Lock()
	live := len(c.own.idle) == 1 && c.own.idle[0].alive()
	c.own.mu.Unlock()
	if !live {
		t.Error("the live idle connection was found closed")
	}
}

// TestOwnConnsContext: a request the plane holds ends when its context is
// cancelled or its deadline passes, with the context's error, and its
// connection is closed, not kept; the client then asks again on a new one.
func TestOwnConnsContext(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	cs := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Has("waitUpToMs") {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, `{"ok":true,"released":true}`)
	}, false)
	c := New(cs.URL, "k1", nil)
	if _, err := release(c, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		for cs.requests.Load() < 2 { // the held request has come
			time.Sleep(time.Millisecond)
		}
		close(started)
		cancel()
	}()
	_, err := c.AcquireWaiting(ctx, AcquireRequest{Resource: "r", ActorDid: "did:a:1"}, MaxWaitUpTo)
	<-started
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "POST "+cs.URL+PathLease+"?waitUpToMs=") {
		t.Errorf("cancelled: %v, want context.Canceled naming the request", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	if _, err := c.AcquireWaiting(dctx, AcquireRequest{Resource: "r", ActorDid: "did:a:1"}, MaxWaitUpTo); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if _, err := c.AcquireWaiting(dctx, AcquireRequest{Resource: "r", ActorDid: "did:a:1"}, MaxWaitUpTo); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a context already ended: %v, want context.DeadlineExceeded", err)
	}
	if a, err := release(c, 1); err != nil || !a.OK {
		t.Fatalf("after the cancelled requests: %v %+v", err, a)
	}
	// The first connection was kept; the two held ones were closed, and the
	// last request came on a new one (the ended context sent nothing).
	if n := cs.opened.Load(); n != 3 {
		t.Errorf("opened %d connections, want 3", n)
	}
	if n := cs.requests.Load(); n != 4 {
		t.Errorf("the server saw %d requests, want 4", n)
	}
}

// TestOwnConnsOneWrite: each request goes out in one write, headers and
// body together.
func TestOwnConnsOneWrite(t *testing.T) {
	cs := newCountingServer(t, nil, false)
	c := New(cs.URL, "k1", nil)
	var writes atomic.Int64
	c.own.dialTCP = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{nc, &writes}, err
	}
	for i := range 5 {
		if _, err := release(c, i); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AcquireWaiting(context.Background(), AcquireRequest{Resource: "r", ActorDid: "did:a:1"}, MaxWaitUpTo); err != nil {
			t.Fatal(err)
		}
		c.Wait(context.Background())
	}
	if n := writes.Load(); n != 15 {
		t.Errorf("15 requests took %d writes, want 15", n)
	}
}

// TestOwnConnsTLS: an https plane is reached over TLS on the client's own
// connections, one handshake for many requests.
func TestOwnConnsTLS(t *testing.T) {
	cs := newCountingServer(t, nil, true)
	c := New(cs.URL, "k1", nil)
	if c.own == nil || c.own.tls == nil {
		t.Fatal("an https base got no TLS connections of its own")
	}
	roots := x509.NewCertPool()
	roots.AddCert(cs.Certificate())
	c.own.tls.RootCAs = roots
	for i := range 10 {
		if a, err := release(c, i); err != nil || !a.OK {
			t.Fatalf("request %d: %v %+v", i, err, a)
		}
	}
	if n := cs.opened.Load(); n != 1 {
		t.Errorf("10 requests opened %d connections, want 1", n)
	}
	// Without the test's root the handshake fails, and says so.
	bad := New(cs.URL, "k1", nil)
	if _, err := release(bad, 0); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an unknown certificate: %v", err)
	}
}

// TestOwnConnsOnlyWithoutHTTPClient: given an http.Client, every request
// goes through it; given none, the lease routes go on the client's own
// connections and the other routes through http.DefaultClient.
func TestOwnConnsOnlyWithoutHTTPClient(t *testing.T) {
	var agents sync.Map
	cs := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		agents.Store(r.URL.Path+" "+r.Header.Get("User-Agent"), true)
		io.WriteString(w, `{"ok":true}`)
	}, false)
	ctx := context.Background()
	own := New(cs.URL, "k1", nil)
	own.Call(ctx, kernel.OpWait, nil)
	own.Request(ctx, "GET", "/api/v1/drills/runs", nil)
	given := New(cs.URL, "k1", http.DefaultClient)
	if given.own != nil {
		t.Fatal("a client given an http.Client keeps connections of its own")
	}
	given.Call(ctx, kernel.OpRelease, []byte(`{}`))
	for _, want := range []string{
		PathWait + " " + userAgent,
		"/api/v1/drills/runs Go-http-client/1.1",
		PathRelease + " Go-http-client/1.1",
	} {
		if _, ok := agents.Load(want); !ok {
			t.Errorf("no request %q", want)
		}
	}
}
