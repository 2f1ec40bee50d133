package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel/api"
)

// TestWorkspaceGauges: /metrics with the metrics token shows what each
// workspace's machine holds, and the counts fall back once what was live
// is released (memory follows what is live); without the token (or with a
// workspace key) it names no workspace.
func TestWorkspaceGauges(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	ts.s.cfg.MetricsToken = "metrics-token"
	ts.lease("lock:a", "did:example:one")
	for _, key := range []string{"", ts.key, "metrics-token-not"} {
		st, _, b := ts.do("GET", "/metrics", key, "")
		if st != 200 || strings.Contains(string(b), "workspace=") || strings.Contains(string(b), `"default"`) {
			t.Fatalf("/metrics with key %q: %d, names a workspace:\n%.2000s", key, st, b)
		}
	}
	ts.lease("lock:b", "did:example:one")
	ts.lease("lock:a", "did:example:two") // a waiter
	gauges := func() string {
		t.Helper()
		st, _, b := ts.do("GET", "/metrics", "metrics-token", "")
		if st != 200 {
			t.Fatalf("/metrics: %d", st)
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "leaseplane_workspace_") && strings.Contains(l, `workspace="default"`) {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	want := `leaseplane_workspace_agents{workspace="default"} 2
leaseplane_workspace_leases{workspace="default"} 2
leaseplane_workspace_resources{workspace="default"} 2
leaseplane_workspace_waiters{workspace="default"} 1`
	if got := gauges(); got != want {
		t.Errorf("gauges:\n%s\nwant\n%s", got, want)
	}
	for _, r := range []string{"lock:a", "lock:b"} {
		ts.do("POST", api.PathRelease, ts.key, `{"resource":"`+r+`","actorDid":"did:example:one"}`)
	}
	ts.do("POST", api.PathRelease, ts.key, `{"resource":"lock:a","actorDid":"did:example:two"}`)
	// one keeps a trust record (+1); two, with trust 0 and nothing live, is forgotten.
	want = `leaseplane_workspace_agents{workspace="default"} 1
leaseplane_workspace_leases{workspace="default"} 0
leaseplane_workspace_resources{workspace="default"} 0
leaseplane_workspace_waiters{workspace="default"} 0`
	if got := gauges(); got != want {
		t.Errorf("gauges after the releases:\n%s\nwant\n%s", got, want)
	}
}

// TestLedgerGauges: /metrics (with the metrics token) gives each
// workspace's ledger entries and the bytes they keep, both growing with
// the ledger.
func TestLedgerGauges(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	ts.s.cfg.MetricsToken = "metrics-token"
	read := func() (entries, bytes float64) {
		t.Helper()
		st, _, b := ts.do("GET", "/metrics", "metrics-token", "")
		if st != 200 {
			t.Fatalf("/metrics: %d", st)
		}
		entries, bytes = -1, -1
		for _, l := range strings.Split(string(b), "\n") {
			name, v, _ := strings.Cut(l, " ")
			f, _ := strconv.ParseFloat(v, 64)
			switch name {
			case `leaseplane_ledger_entries{workspace="default"}`:
				entries = f
			case `leaseplane_ledger_bytes{workspace="default"}`:
				bytes = f
			}
		}
		return entries, bytes
	}
	for i := range 40 {
		ts.lease("lock:g"+strconv.Itoa(i), "did:example:one")
	}
	ts.ledgerWait()
	e1, b1 := read()
	if e1 != 40 || b1 <= 0 || b1 > 40*200 {
		t.Fatalf("after 40 grants: %v entries, %v bytes", e1, b1)
	}
	for i := range 40 {
		ts.do("POST", api.PathRelease, ts.key, `{"resource":"lock:g`+strconv.Itoa(i)+`","actorDid":"did:example:one"}`)
	}
	ts.ledgerWait()
	if e2, b2 := read(); e2 != 80 || b2 <= b1 {
		t.Errorf("after 40 releases more: %v entries, %v bytes (were %v)", e2, b2, b1)
	}
}
