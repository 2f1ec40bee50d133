package main

import (
	"strings"
	"testing"
)

// TestStrictQueryParameters: against the real binary, an unknown or
// repeated query parameter, or an after or prefix that is not UTF-8, is a
// 400 that names the parameter, on the lease, release, wait and ledger
// routes (a misspelt ?waitUpTo=3000 used to be a lease that did not wait).
func TestStrictQueryParameters(t *testing.T) {
	c := startChild(t, engineNames()[0], t.TempDir())
	for _, p := range []struct{ method, path, body, names string }{
		{"POST", "/api/v1/acp/coordination/lease?waitUpTo=3000", `{"resource":"lock:q","actorDid":"did:example:q"}`, "waitUpTo"},
		{"POST", "/api/v1/acp/coordination/lease?waitUpToMs=100&waitUpToMs=200", `{"resource":"lock:q","actorDid":"did:example:q"}`, "waitUpToMs"},
		{"POST", "/api/v1/acp/coordination/release?leaseId=x", `{"leaseId":"x","actorDid":"did:example:q"}`, "leaseId"},
		{"GET", "/api/v1/acp/coordination/wait?page=2", "", "page"},
		{"GET", "/api/v1/acp/coordination/wait?after=%ff", "", "after"},
		{"GET", "/api/v1/acp/coordination/wait?prefix=%ff", "", "prefix"},
		{"GET", "/api/v1/acp/coordination/wait?limit=1&limit=2", "", "limit"},
		{"GET", "/api/v1/ledger/entries?start=0&count=5&extra=1", "", "extra"},
	} {
		a := e2eDo(t, p.method, c.url+p.path, c.key, p.body)
		if a.status != 400 || !strings.Contains(string(a.raw), p.names) {
			t.Errorf("%s %s: %d %s, want 400 naming %s", p.method, p.path, a.status, a.raw, p.names)
		}
	}
}
