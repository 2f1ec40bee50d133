package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/store"
)

// mustNew is New(cfg) for a test, which fails when New does.
func mustNew(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// mustBootstrap is the key Bootstrap gives for the workspace name; the
// test fails when Bootstrap does.
func mustBootstrap(tb testing.TB, s *Server, name string) string {
	tb.Helper()
	key, _, err := s.Bootstrap(name)
	if err != nil {
		tb.Fatal(err)
	}
	return key
}

// benchServer is a server for a benchmark, shut down when it ends: cfg on
// a temporary folder, the native kernel and the real clock. It returns the
// server and the key of its workspace "bench".
func benchServer(b *testing.B, cfg Config) (*Server, string) {
	b.Helper()
	cfg.DataDir, cfg.Engine, cfg.Clock = b.TempDir(), kernel.Native, time.Now
	s := mustNew(b, cfg)
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	return s, mustBootstrap(b, s, "bench")
}

// runPairs times acquire+release pairs through h, from b's parallel
// goroutines, each on a resource and agent of its own.
func runPairs(b *testing.B, h http.Handler, key string) {
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		body := fmt.Sprintf(`{"resource":"lock:bench/%d","actorDid":"did:example:bench%d"}`, i, i)
		for pb.Next() {
			for _, path := range []string{api.PathLease, api.PathRelease} {
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
}

// defaultWorkspace is the workspace "default" as stored.
func (ts *testServer) defaultWorkspace() store.Workspace {
	ts.t.Helper()
	w, err := ts.s.Store().WorkspaceByName("default")
	if err != nil {
		ts.t.Fatal(err)
	}
	return w
}

// newKey makes a key of role in the workspace "default" (an agent key for
// did), created at nowMs.
func (ts *testServer) newKey(role store.Role, did string, nowMs int64) string {
	ts.t.Helper()
	key, _, err := ts.s.Store().CreateKey(ts.defaultWorkspace(), role, did, nowMs)
	if err != nil {
		ts.t.Fatal(err)
	}
	return key
}

// newWorkspaceKey makes the workspace name (no rules) and a workspace key
// of it, both at time 1.
func (ts *testServer) newWorkspaceKey(name string) string {
	ts.t.Helper()
	w, _, err := ts.s.Store().EnsureWorkspace(name, nil, 1)
	if err != nil {
		ts.t.Fatal(err)
	}
	key, _, err := ts.s.Store().CreateKey(w, store.RoleWorkspace, "", 1)
	if err != nil {
		ts.t.Fatal(err)
	}
	return key
}

// verifierKey is the ledger's verifier key of the workspace "default".
func (ts *testServer) verifierKey() string {
	_, vk := ts.ledgerGet(ts.key, "key")
	return strings.TrimSpace(string(vk))
}

// engineSnapshot is the snapshot of workspace id's engine, as it is now.
func engineSnapshot(t *testing.T, s *Server, id int64) []byte {
	t.Helper()
	ws, err := s.workspace(id)
	if err != nil {
		t.Fatal(err)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	b, err := ws.eng.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
