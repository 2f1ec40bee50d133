package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// reportCommits adds commands per commit and time per commit to the
// benchmark's output.
func reportCommits(b *testing.B, s *Server) {
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "leaseplane_commit_batch_commands":
			h := mf.GetMetric()[0].GetHistogram()
			b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "cmds/commit")
		case "leaseplane_commit_duration_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			b.ReportMetric(1e3*h.GetSampleSum()/float64(h.GetSampleCount()), "ms/commit")
		}
	}
}

// BenchmarkHandlerPair is one acquire and one release through the HTTP
// handler (request parsing excluded: the requests are built beforehand):
// key check, the native kernel, group commit to SQLite with fsync, and the
// handler's own cost and allocations. 64 goroutines run at once, each on
// its own resource, so commits are shared. (cmd/leaseplane's
// BenchmarkServeCallPair measures Call alone, per engine.)
func BenchmarkHandlerPair(b *testing.B) {
	s, err := New(Config{DataDir: b.TempDir(), Engine: kernel.Native, Clock: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	key, _, err := s.Bootstrap("bench")
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	h := s.Handler()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		body := fmt.Sprintf(`{"resource":"lock:bench/%d","actorDid":"did:example:bench%d"}`, i, i)
		for pb.Next() {
			for _, path := range []string{RouteLease, RouteRelease} {
				req := httptest.NewRequest("POST", path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("%s: %d %s", path, w.Code, w.Body)
				}
			}
		}
	})
	b.StopTimer()
	reportCommits(b, s)
}
