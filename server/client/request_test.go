package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// seenRequest is what a server received.
type seenRequest struct {
	method, uri, host string
	header            http.Header
	body              string
}

// TestLeaseRequestsLikeParsed: the lease routes' requests, built from the
// base URL parsed once, reach the server exactly as the requests built by
// parsing base+path+query (http.NewRequestWithContext) do: method, URI,
// host, every header, body; so do those of the client's own connections
// (conns.go), but for the headers net/http's Transport adds (User-Agent,
// Accept-Encoding). A base that does not parse back to itself is sent the
// parsing way.
func TestLeaseRequestsLikeParsed(t *testing.T) {
	var mu sync.Mutex
	var seen []seenRequest
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{r.Method, r.RequestURI, r.Host, r.Header.Clone(), string(b)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true,"released":true}`)
	}))
	defer ts.Close()
	host := strings.TrimPrefix(ts.URL, "http://")
	for _, tc := range []struct {
		base   string
		parsed bool // the base is parsed once
	}{
		{ts.URL, true},
		{ts.URL + "/", true},
		{ts.URL + "/lp", true},
		{ts.URL + "/lp/", true},
		{ts.URL + "/a%20b/c", true},
		{"http://localhost:" + strings.Split(host, ":")[1], true},
		{ts.URL + "/a b", false},
		{ts.URL + "/a%2Fb", false},
		{ts.URL + "/x?y=1", false},
		{ts.URL + "/x#f", false},
		{"http://user:pw@" + host, false},
		{"HTTP://" + host, false},
	} {
		for _, key := range []string{"", "k1"} {
			c := New(tc.base, key, nil)
			if (c.url != nil) != tc.parsed {
				t.Errorf("%s: parsed once %v, want %v", tc.base, c.url != nil, tc.parsed)
			}
			if (c.own != nil) != tc.parsed {
				t.Errorf("%s: own connections %v, want %v", tc.base, c.own != nil, tc.parsed)
			}
			viaHTTP := *c
			viaHTTP.own = nil
			slow := viaHTTP
			slow.url = nil
			calls := []func(c *Client) error{
				func(c *Client) error {
					_, err := c.Acquire(context.Background(), AcquireRequest{Resource: "r", ActorDid: "did:a:1", Mode: "read"})
					return err
				},
				func(c *Client) error {
					_, err := c.AcquireWaiting(context.Background(), AcquireRequest{Resource: "r", ActorDid: "did:a:1"}, MaxWaitUpTo)
					return err
				},
				func(c *Client) error {
					_, err := c.AcquireWaiting(context.Background(), AcquireRequest{Resource: "r", ActorDid: "did:a:1"}, 1234*time.Millisecond)
					return err
				},
				func(c *Client) error {
					_, err := c.Release(context.Background(), ReleaseRequest{Resource: "r", ActorDid: "did:a:1", LeaseID: "lease_1"})
					return err
				},
				func(c *Client) error {
					_, _, err := c.Call(context.Background(), kernel.OpRelease, []byte{})
					return err
				},
				func(c *Client) error {
					_, _, err := c.Call(context.Background(), kernel.OpWait, []byte(`ignored`))
					return err
				},
			}
			for i, call := range calls {
				mu.Lock()
				seen = nil
				mu.Unlock()
				errOwn, errFast, errSlow := call(c), call(&viaHTTP), call(&slow)
				if errOwn != nil || errFast != nil || errSlow != nil {
					t.Errorf("%s call %d: error %v, through net/http %v, parsing each time %v", tc.base, i, errOwn, errFast, errSlow)
					continue
				}
				mu.Lock()
				got := slices.Clone(seen)
				mu.Unlock()
				if len(got) != 3 {
					t.Fatalf("%s call %d: the server saw %d requests, want 3", tc.base, i, len(got))
				}
				if !reflect.DeepEqual(got[1], got[2]) {
					t.Errorf("%s call %d:\n got %+v\nwant %+v (parsing base+path each time)", tc.base, i, got[1], got[2])
				}
				if tc.parsed && got[0].header.Get("User-Agent") != userAgent {
					t.Errorf("%s call %d: own connections' User-Agent %q", tc.base, i, got[0].header.Get("User-Agent"))
				}
				for _, g := range got {
					delete(g.header, "User-Agent")
					delete(g.header, "Accept-Encoding")
				}
				if !reflect.DeepEqual(got[0], got[2]) {
					t.Errorf("%s call %d, own connections:\n got %+v\nwant %+v (net/http, parsing base+path each time)", tc.base, i, got[0], got[2])
				}
			}
		}
	}
}

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// recorder is a RoundTripper that keeps each request's GetBody bytes and
// sends the request on.
type recorder struct {
	mu     sync.Mutex
	bodies []string
	next   http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(rc)
		r.mu.Lock()
		r.bodies = append(r.bodies, string(b))
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// TestRequestWrites: each lease request goes out in one write, headers
// and body together, and its GetBody gives its body again (for a request
// the transport must send again).
func TestRequestWrites(t *testing.T) {
	var bodies []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		io.WriteString(w, `{"ok":true,"released":true}`)
	}))
	defer ts.Close()
	var writes atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{c, &writes}, err
	}
	rec := &recorder{next: &http.Transport{DialContext: dial}}
	c := New(ts.URL, "k1", &http.Client{Transport: rec})
	ctx := context.Background()
	const n = 5
	for i := range n {
		req := ReleaseRequest{Resource: "r", ActorDid: "did:a:" + strconv.Itoa(i), LeaseID: "lease_1"}
		if _, err := c.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AcquireWaiting(ctx, AcquireRequest{Resource: "r", ActorDid: req.ActorDid}, MaxWaitUpTo); err != nil {
			t.Fatal(err)
		}
	}
	if got := writes.Load(); got != 2*n {
		t.Errorf("%d requests took %d writes, want one each", 2*n, got)
	}
	if !slices.Equal(rec.bodies, bodies) || len(bodies) != 2*n {
		t.Errorf("GetBody gave %q, the server read %q", rec.bodies, bodies)
	}
}

// TestNilContext: a nil context is an error naming the request, as
// http.NewRequestWithContext words it, not a panic.
func TestNilContext(t *testing.T) {
	c := New("http://127.0.0.1:1", "k1", nil)
	var ctx context.Context // nil
	_, err := c.Acquire(ctx, AcquireRequest{Resource: "r", ActorDid: "did:a:1"})
	if err == nil || !strings.Contains(err.Error(), "POST "+PathLease) || !strings.Contains(err.Error(), "nil Context") {
		t.Errorf("acquire with a nil context: %v", err)
	}
}

// TestReadAnswer: an answer is read whole whether its length is known or
// not and however the body splits its reads; past the limit, limit+1
// bytes come back (an answer too long); a failed read is an error.
func TestReadAnswer(t *testing.T) {
	const limit = 64
	body := strings.Repeat("x", 40)
	long := strings.Repeat("y", 200)
	for _, tc := range []struct {
		name    string
		r       io.Reader
		length  int64
		want    string
		wantErr bool
	}{
		{"known length", strings.NewReader(body), 40, body, false},
		{"unknown length", strings.NewReader(body), -1, body, false},
		{"one byte a read", iotest.OneByteReader(strings.NewReader(body)), 40, body, false},
		{"end after the data", iotest.DataErrReader(strings.NewReader(body)), 40, body, false},
		{"empty", strings.NewReader(""), 0, "", false},
		{"length wrong", strings.NewReader(body), 10, body, false},
		{"too long, known", strings.NewReader(long), 200, long[:limit+1], false},
		{"too long, unknown", strings.NewReader(long), -1, long[:limit+1], false},
		{"too long, one byte a read", iotest.OneByteReader(strings.NewReader(long)), -1, long[:limit+1], false},
		{"cut", io.MultiReader(strings.NewReader(body), iotest.ErrReader(errors.New("cut"))), 80, body, true},
	} {
		got, err := readAnswer(&http.Response{Body: io.NopCloser(tc.r), ContentLength: tc.length}, limit)
		if string(got) != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: got %q (%d bytes), %v; want %q, error %v", tc.name, got, len(got), err, tc.want, tc.wantErr)
		}
	}
}
