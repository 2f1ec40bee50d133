package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel/api"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// The keys of the data folders in testdata/upgrade-0.2.0 (test data only;
// both folders were made from one set of keys, see its README.md).
const (
	upgrade020Workspace = "lp_e4750a9f2c09_ocvJWy4GAdFwg2cwteFf3JEHsEVwXWuRCsPWjwmV1sw"
	upgrade020Operator  = "lp_ce0c2a02aa28_FwL8mQSnQE_YZQWtG0a8WpFcRb1IOGze9e4yN7STXs4"
	upgrade020Agent     = "lp_442ab6cfba90_zASiVOXFph7YjD_7SlAA_kMYD9CHTxbKaDFgL0zX-sM" // did:web:acme.example:agent:cost
)

// upgrade020 is one folder of testdata/upgrade-0.2.0 and the times its log
// ends at: lastMs is the newest command's nowMs (the late waiter's last
// retry, which moved its claim and lapse after the wait that wait.json
// recorded).
type upgrade020 struct {
	folder string
	lastMs int64
}

var upgrade020Folders = []upgrade020{
	{"clean", 1796156926002}, // stopped by SIGTERM: its snapshot covers the log
	{"crash", 1796156931012}, // killed: no snapshot, the log only
}

// startOn020 copies a folder of testdata/upgrade-0.2.0 (every file, the
// ledger's signing key too) and starts the current server on the copy, its
// clock stopped at at.
func startOn020(t *testing.T, folder string, at int64) *Server {
	t.Helper()
	src := filepath.Join("testdata", "upgrade-0.2.0", folder)
	dir := t.TempDir()
	// Every file, the ledger's signing key too, but the folder's notes of
	// what 0.2.0 answered.
	servertest.CopyDir(t, src, dir, func(rel string) bool {
		return strings.HasSuffix(rel, ".db") || strings.HasSuffix(rel, ".key")
	})
	return startStopped(t, dir, at, "the 0.2.0 folder "+folder)
}

// TestUpgradeFromRelease020 starts the current server on data folders that
// the release before held asks (kernel 0.2.0, semantics 2) wrote under a
// scripted workload (testdata/upgrade-0.2.0/make.sh: grants, a shared
// read, releases, a held request granted, a held request still open at the
// stop, an agent key's refused request, a suspension, the ledger caught
// up), once stopped cleanly and once killed. On both, the current server
// answers wait as 0.2.0 did, keeps trust, the suspension and the fence
// counter, accepts the old lease ids and keys, and its ledger is the one
// 0.2.0 signed: the same verifier key, the same tree, receipts that verify.
func TestUpgradeFromRelease020(t *testing.T) {
	for _, f := range upgrade020Folders {
		t.Run(f.folder, func(t *testing.T) { checkUpgraded020(t, f) })
	}
}

func checkUpgraded020(t *testing.T, f upgrade020) {
	at := f.lastMs + 1
	s := startOn020(t, f.folder, at)
	dir := filepath.Join("testdata", "upgrade-0.2.0", f.folder)
	do := func(method, path, key, body string) (int, []byte) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.Code, w.Body.Bytes()
	}
	const a = "did:web:acme.example:agent:"

	// wait: the queues 0.2.0 answered before it stopped, but for the
	// clock and the late waiter's claim and lapse, which its last retry
	// (after that wait) moved on.
	st, b := do("GET", api.PathWait, upgrade020Workspace, "")
	if st != 200 {
		t.Fatalf("wait: %d %s", st, b)
	}
	old, err := os.ReadFile(filepath.Join(dir, "wait.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, want := waitState(t, b), waitState(t, old)
	late := want["lock:a"].([]any)[2].(map[string]any)
	if late["actorDid"] != a+"late" {
		t.Fatalf("wait.json: lock:a's waiter is not the late waiter: %v", late)
	}
	late["lapsesAtMs"] = float64(f.lastMs + 30000)
	lateGot, _ := got["lock:a"].([]any)
	if len(lateGot) == 3 {
		if w, ok := lateGot[2].(map[string]any); ok {
			delete(w, "claimUntilMs") // 2000 ms grace under semantics 3, 1000 under 2
		}
	}
	delete(late, "claimUntilMs")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("queues after the upgrade:\n got %v\nwant %v", got, want)
	}

	// Trust and the suspension, from the workspace's own state.
	var snap struct{ Trust map[string]float64 }
	if err := json.Unmarshal(engineSnapshot(t, s, 1), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Trust[a+"export"] != 1.5 {
		t.Errorf("trust after the upgrade: %v; want export's 1.5 (three releases)", snap.Trust)
	}
	if st, b := do("POST", api.PathLease, upgrade020Workspace, `{"resource":"lock:b","actorDid":"`+a+`rogue"}`); st != 403 || !strings.Contains(string(b), `"suspended"`) {
		t.Errorf("the agent 0.2.0 suspended: %d %s", st, b)
	}

	// The ledger: the same signing key, the tree 0.2.0 signed (13
	// entries, the same root), and a receipt of the held request's grant
	// that verifies.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Ledger().Wait(ctx, 1); err != nil {
		t.Fatalf("ledger did not catch up: %v", err)
	}
	vb, _ := os.ReadFile(filepath.Join(dir, "verifier.txt"))
	vkey := strings.TrimSpace(string(vb))
	if st, b := do("GET", "/api/v1/ledger/key", upgrade020Workspace, ""); st != 200 || strings.TrimSpace(string(b)) != vkey {
		t.Errorf("verifier key after the upgrade: %d %q, want 0.2.0's %q", st, b, vkey)
	}
	oldCP, _ := os.ReadFile(filepath.Join(dir, "checkpoint.txt"))
	st, cp := do("GET", "/api/v1/ledger/checkpoint", upgrade020Workspace, "")
	if st != 200 || strings.Join(strings.Split(string(cp), "\n")[:3], "\n") != strings.Join(strings.Split(string(oldCP), "\n")[:3], "\n") {
		t.Errorf("checkpoint after the upgrade: %d\n%s\nwant the tree 0.2.0 signed:\n%s", st, cp, oldCP)
	}
	for _, id := range []string{"lease_33b2fe543d3785fd", "lease_b6a4308ace3dd201"} {
		st, rc := do("GET", "/api/v1/ledger/receipt?leaseId="+id, upgrade020Workspace, "")
		if st != 200 {
			t.Errorf("receipt of %s: %d %s", id, st, rc)
			continue
		}
		if _, err := kledger.Verify(rc, vkey); err != nil {
			t.Errorf("receipt of %s does not verify: %v\n%s", id, err, rc)
		}
	}

	// Keys: the agent key still names only its own agent.
	if st, b := do("POST", api.PathLease, upgrade020Agent, `{"resource":"lock:c","actorDid":"`+a+`release"}`); st != 403 || !strings.Contains(string(b), `"actor_mismatch"`) {
		t.Errorf("agent key naming another agent: %d %s", st, b)
	}
	// A holder releases with the lease id 0.2.0 gave it; the next grant
	// takes fence 9, above the 8 that 0.2.0 gave.
	if st, b := do("POST", api.PathRelease, upgrade020Workspace, `{"resource":"lock:held","actorDid":"`+a+`held","leaseId":"lease_b6a4308ace3dd201"}`); st != 200 || !strings.Contains(string(b), `"released":true`) {
		t.Errorf("release with the 0.2.0 lease id: %d %s", st, b)
	}
	st, b = do("POST", api.PathLease, upgrade020Agent, `{"resource":"lock:new","actorDid":"`+a+`cost"}`)
	var g struct{ Lease struct{ Fence int64 } }
	json.Unmarshal(b, &g)
	if st != 200 || g.Lease.Fence != 9 {
		t.Errorf("grant after the upgrade: %d %s; want fence 9", st, b)
	}
	if st, b := do("POST", api.PathResume, upgrade020Operator, `{"actorDid":"`+a+`rogue"}`); st != http.StatusOK {
		t.Errorf("the operator key resumes: %d %s", st, b)
	}
}

// waitState is a wait answer's queues by resource: each queue's holders
// and then its waiters, as parsed JSON (its clock left out).
func waitState(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var w struct {
		Queues []struct {
			Resource string
			Class    string
			Holders  []any
			Waiters  []any
		}
		Deadlocks []any
	}
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("wait answer %s: %v", b, err)
	}
	out := map[string]any{"deadlocks": len(w.Deadlocks)}
	for _, q := range w.Queues {
		out[q.Resource] = append(append([]any{q.Class}, q.Holders...), q.Waiters...)
	}
	return out
}
