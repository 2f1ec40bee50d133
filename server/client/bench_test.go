package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/client"
)

// realPlane is the real server (server.New, native engine, a temporary
// data folder) behind httptest, and its first workspace key.
func realPlane(b *testing.B) (url, key string) {
	b.Helper()
	s, err := server.New(server.Config{DataDir: b.TempDir(), Engine: kernel.Native, Clock: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	key, _, err = s.Bootstrap("bench")
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	b.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return hs.URL, key
}

// cannedPlane answers every acquire with one grant and every release with
// one release, as the real server words them, and does nothing else: what
// a pair allocates here is mostly the client's and net/http's.
func cannedPlane(b *testing.B) (url, key string) {
	b.Helper()
	grant := []byte(`{"ok":true,"lease":{"id":"lease_0123456789abcdef","resource":"bench/r","holder":"did:bench:client:0","mode":"write","fence":17,"grantedAtMs":1764650000000,"expiresAtMs":1764650030000}}`)
	released := []byte(`{"ok":true,"released":true,"releasedIds":["lease_0123456789abcdef"]}`)
	mux := http.NewServeMux()
	answer := func(body []byte) http.HandlerFunc {
		n := strconv.Itoa(len(body))
		return func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			h["Content-Length"] = []string{n}
			w.Write(body)
		}
	}
	mux.Handle("POST "+client.PathLease, answer(grant))
	mux.Handle("POST "+client.PathRelease, answer(released))
	hs := httptest.NewServer(mux)
	b.Cleanup(hs.Close)
	return hs.URL, "lp_bench"
}

// httpOpts shape the benchmark's net/http client: noGzip sets the
// transport's DisableCompression (as the bench tool's is); timeout sets
// http.Client.Timeout (a deadline context and a timer per request).
type httpOpts struct {
	noGzip  bool
	timeout time.Duration
}

// benchPair runs one acquire+release pair per op, as the bench tool's
// spread workload does (a held acquire through client.Holder, then a
// release naming the lease), on one connection.
func benchPair(b *testing.B, url, key string, o httpOpts) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DialContext: (&net.Dialer{}).DialContext, DisableCompression: o.noGzip}
	defer tr.CloseIdleConnections()
	c := client.New(url, key, &http.Client{Transport: tr, Timeout: o.timeout})
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := client.AcquireRequest{Resource: "bench/r/" + strconv.Itoa(i%8), ActorDid: "did:bench:client:0"}
		h := client.Holder{Client: c, Req: req}
		l, err := h.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		a, err := c.Release(ctx, client.ReleaseRequest{Resource: req.Resource, ActorDid: req.ActorDid, LeaseID: l.ID})
		if err != nil || !a.OK {
			b.Fatalf("release: %v %s", err, a.Raw)
		}
	}
}

// BenchmarkPair is one acquire+release pair (two requests) per op: its
// allocs/op are the whole process's, the server's included; against the
// canned plane the server's part is small and fixed, so a change there
// is the client's. gzip=off is the transport without Accept-Encoding:
// gzip (the plane does not compress its answers); timeout=60s adds
// http.Client.Timeout.
func BenchmarkPair(b *testing.B) {
	b.Run("server=real", func(b *testing.B) {
		url, key := realPlane(b)
		benchPair(b, url, key, httpOpts{})
	})
	b.Run("server=canned", func(b *testing.B) {
		url, key := cannedPlane(b)
		benchPair(b, url, key, httpOpts{})
	})
	b.Run("server=canned/gzip=off", func(b *testing.B) {
		url, key := cannedPlane(b)
		benchPair(b, url, key, httpOpts{noGzip: true})
	})
	b.Run("server=canned/gzip=off/timeout=60s", func(b *testing.B) {
		url, key := cannedPlane(b)
		benchPair(b, url, key, httpOpts{noGzip: true, timeout: time.Minute})
	})
}
