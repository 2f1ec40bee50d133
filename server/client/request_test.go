package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
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
// host, every header, body. A base that does not parse back to itself is
// sent the parsing way.
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
			slow := *c
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
				errFast, errSlow := call(c), call(&slow)
				if errFast != nil || errSlow != nil {
					t.Errorf("%s call %d: error %v, parsing each time %v", tc.base, i, errFast, errSlow)
					continue
				}
				mu.Lock()
				got := slices.Clone(seen)
				mu.Unlock()
				if len(got) != 2 {
					t.Fatalf("%s call %d: the server saw %d requests, want 2", tc.base, i, len(got))
				}
				if !reflect.DeepEqual(got[0], got[1]) {
					t.Errorf("%s call %d:\n got %+v\nwant %+v (parsing base+path each time)", tc.base, i, got[0], got[1])
				}
			}
		}
	}
}

// TestBodyReaderAgain: a body read to its end gives its bytes afresh to
// a request sent again (GetBody).
func TestBodyReaderAgain(t *testing.T) {
	b := &bodyReader{body: []byte(`{"resource":"r"}`)}
	b.Reset(b.body)
	first, _ := io.ReadAll(b)
	again, err := b.again()
	if err != nil {
		t.Fatal(err)
	}
	second, _ := io.ReadAll(again)
	if string(first) != `{"resource":"r"}` || string(second) != string(first) {
		t.Errorf("read %q, then again %q", first, second)
	}
	if rest, _ := io.ReadAll(b); len(rest) != 0 || b.Close() != nil {
		t.Errorf("the first reader gave %q more", rest)
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
