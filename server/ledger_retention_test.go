package server

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/server/store"
)

// newRetentionServer is a test server whose ledger drops exported entry
// bodies an hour after they were written.
func newRetentionServer(t *testing.T) *testServer {
	t.Helper()
	ts := &testServer{t: t, clock: servertest.NewClock(), dir: t.TempDir()}
	s := mustNew(t, Config{DataDir: ts.dir, Engine: kernel.Native, Clock: ts.clock.Now, AfterFunc: ts.clock.AfterFunc,
		LedgerRetention: time.Hour, LedgerRetainEvery: time.Hour})
	ts.s = s
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	ts.key = mustBootstrap(t, s, "default")
	return ts
}

// checkpointOf is the ledger's current signed checkpoint, opened.
func (ts *testServer) checkpointOf(vkey string) kledger.Checkpoint {
	ts.t.Helper()
	st, b := ts.ledgerGet(ts.key, "checkpoint")
	if st != 200 {
		ts.t.Fatalf("checkpoint: %d %s", st, b)
	}
	cp, err := kledger.Open(b, vkey)
	if err != nil {
		ts.t.Fatalf("checkpoint does not open: %v\n%s", err, b)
	}
	return cp
}

// TestLedgerRetention: with a retention period, the bodies of entries an
// export covered are dropped once they are older than it; their receipts
// and entries answer 410 gone, while newer entries (and exported ones
// still within the period, and old ones no export covered) keep their
// receipts; every hash is kept, so consistency proofs between checkpoints
// from before and after still check, and checkpoints still sign.
func TestLedgerRetention(t *testing.T) {
	ts := newRetentionServer(t)
	agentKey := ts.newKey(store.RoleAgent, "did:example:one", 1)
	opKey := ts.newKey(store.RoleOperator, "", 1)
	vkey := ts.verifierKey()
	grant := func(res, actor string) string {
		t.Helper()
		st, b := ts.lease(res, actor)
		if st != 200 {
			t.Fatalf("lease %s: %d %s", res, st, b)
		}
		return ts.leaseID(b)
	}
	old := grant("lock:old", "did:example:one")
	if st, _, b := ts.do("POST", api.PathRelease, ts.key, `{"resource":"lock:old","actorDid":"did:example:one"}`); st != 200 {
		t.Fatalf("release: %d %s", st, b)
	}
	ts.ledgerWait()
	first := ts.checkpointOf(vkey) // covers the grant and the release: size 2

	// Recording an export: an operator key, a size the ledger has and the
	// root of that tree.
	mark := func(key string, size int64, root string) (int, []byte) {
		st, _, b := ts.do("POST", "/api/v1/ledger/exported?size="+strconv.FormatInt(size, 10)+"&root="+url.QueryEscape(root), key, "")
		return st, b
	}
	for _, tc := range []struct {
		name   string
		key    string
		size   int64
		root   string
		status int
		want   string
	}{
		{"agent key", agentKey, first.Size, first.Root.String(), 403, `"reason":"forbidden"`},
		{"workspace key", ts.key, first.Size, first.Root.String(), 403, `"reason":"forbidden"`},
		{"wrong root", opKey, first.Size, kledger.Hash{}.String(), 400, `"parameter":"root"`},
		{"past the end", opKey, first.Size + 5, first.Root.String(), 400, `"parameter":"size"`},
		{"bad root", opKey, first.Size, "nope", 400, `"parameter":"root"`},
		{"the export", opKey, first.Size, first.Root.String(), 200, `"exported":2`},
	} {
		if st, b := mark(tc.key, tc.size, tc.root); st != tc.status || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, st, b, tc.status, tc.want)
		}
	}
	if st, _, b := ts.do("GET", "/api/v1/ledger/exported?size=2&root="+url.QueryEscape(first.Root.String()), ts.key, ""); st != 405 {
		t.Errorf("GET exported: %d %s, want 405", st, b)
	}

	// Within the period nothing goes, exported or not.
	ts.clock.Advance(30 * time.Minute)
	ts.s.Ledger().Retain()
	if st, b := ts.ledgerGet(ts.key, "receipt?leaseId="+old); st != 200 {
		t.Fatalf("receipt within the retention period: %d %s", st, b)
	}

	// Two hours on: the exported entries are past the period; a new grant
	// is not.
	ts.clock.Advance(2 * time.Hour)
	fresh := grant("lock:fresh", "did:example:two")
	ts.ledgerWait()
	ts.s.Ledger().Retain()
	st, b := ts.ledgerGet(ts.key, "receipt?leaseId="+old)
	var refusal struct {
		OK     bool
		Reason string
		Error  string
	}
	if err := json.Unmarshal(b, &refusal); st != 410 || err != nil || refusal.OK || refusal.Reason != "gone" || refusal.Error == "" {
		t.Fatalf("receipt of a dropped grant: %d %s, want 410 gone", st, b)
	}
	for _, start := range []string{"0", "1"} {
		if st, b := ts.ledgerGet(ts.key, "entries?start="+start); st != 410 || !strings.Contains(string(b), `"reason":"gone"`) {
			t.Errorf("entries from %s after retention: %d %s, want 410 gone", start, st, b)
		}
	}
	st, b = ts.ledgerGet(ts.key, "entries?start=2")
	if st != 200 || !strings.Contains(string(b), `"leaseId":"`+fresh+`"`) {
		t.Errorf("entries from 2 after retention: %d %s", st, b)
	}
	st, b = ts.ledgerGet(ts.key, "receipt?leaseId="+fresh)
	if st != 200 {
		t.Fatalf("receipt of a kept grant: %d %s", st, b)
	}
	checkReceipt(t, b, vkey)

	// Hashes stay: inclusion of a dropped entry still proves, checkpoints
	// sign and are consistent with those from before the drop.
	if st, b := ts.ledgerGet(ts.key, "proof?index=0"); st != 200 {
		t.Errorf("inclusion proof of a dropped entry: %d %s", st, b)
	}
	grant("lock:later", "did:example:three")
	ts.ledgerWait()
	last := ts.checkpointOf(vkey)
	if last.Size != 4 {
		t.Fatalf("checkpoint after retention has size %d, want 4", last.Size)
	}
	st, b = ts.ledgerGet(ts.key, "consistency?from="+strconv.FormatInt(first.Size, 10)+"&to="+strconv.FormatInt(last.Size, 10))
	if st != 200 {
		t.Fatalf("consistency: %d %s", st, b)
	}
	var cons struct{ Hashes []string }
	if err := json.Unmarshal(b, &cons); err != nil {
		t.Fatal(err)
	}
	var proof []kledger.Hash
	for _, h := range cons.Hashes {
		x, err := kledger.ParseHash(h)
		if err != nil {
			t.Fatal(err)
		}
		proof = append(proof, x)
	}
	if err := kledger.CheckConsistency(proof, last.Size, last.Root, first.Size, first.Root); err != nil {
		t.Errorf("consistency from the checkpoint before the drop to the one after: %v", err)
	}

	// Old but never exported: kept. The fresh grant is past the period now,
	// yet no export covered it.
	ts.clock.Advance(3 * time.Hour)
	ts.s.Ledger().Retain()
	if st, b := ts.ledgerGet(ts.key, "receipt?leaseId="+fresh); st != 200 {
		t.Errorf("receipt of an old entry no export covered: %d %s", st, b)
	}
	if r, err := ts.s.Store().LedgerRetentionOf(context.Background(), ts.defaultWorkspace().ID); err != nil || r != (store.LedgerRetention{Exported: 2, Dropped: 2}) {
		t.Errorf("retention marks %+v (%v), want exported 2, dropped 2", r, err)
	}
}

// TestLedgerLostTail: a ledger.db that lost its last writes (a disk that
// rolled back, a copy restored) is repaired from the durable command log
// on the next start: the same entries at the same indexes, none twice, and
// a receipt handed out from the lost part still checks against the new
// checkpoints.
func TestLedgerLostTail(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, dir)
	_, vk := ts.ledgerGet(ts.key, "key")
	vkey := strings.TrimSpace(string(vk))
	ts.lease("lock:kept", "did:example:a")
	ts.ledgerWait()
	if err := ts.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	early, err := os.ReadFile(filepath.Join(dir, store.LedgerFileName))
	if err != nil {
		t.Fatal(err)
	}
	ts2 := newTestServer(t, dir)
	ts2.key = ts.key
	var receipts [][]byte
	for i := range 5 {
		st, b := ts2.lease("lock:lost"+strconv.Itoa(i), "did:example:a")
		if st != 200 {
			t.Fatalf("lease: %d %s", st, b)
		}
		st, r := ts2.ledgerGet(ts2.key, "receipt?leaseId="+ts2.leaseID(b))
		if st != 200 {
			t.Fatalf("receipt: %d %s", st, r)
		}
		receipts = append(receipts, r)
	}
	before := ts2.entries(ts2.key)
	if err := ts2.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The tail is lost: ledger.db as it was after the first start.
	for _, suffix := range []string{"-wal", "-shm"} {
		os.Remove(filepath.Join(dir, store.LedgerFileName+suffix))
	}
	if err := os.WriteFile(filepath.Join(dir, store.LedgerFileName), early, 0o600); err != nil {
		t.Fatal(err)
	}
	ts3 := newTestServer(t, dir)
	ts3.key = ts.key
	ts3.s.workspace(1) // the workspace's load opens its ledger, which catches up
	ts3.ledgerWait()
	after := ts3.entries(ts3.key)
	if len(after) != len(before) || len(after) != 6 {
		t.Fatalf("%d entries after the repair, %d before the loss, want 6", len(after), len(before))
	}
	for i := range after {
		if after[i].Data != before[i].Data {
			t.Errorf("entry %d differs after the repair: %s, was %s", i, after[i].Event, before[i].Event)
		}
	}
	checkBundle(t, ts3, after)
	now := ts3.checkpointOf(vkey)
	for _, r := range receipts {
		v := checkReceipt(t, r, vkey)
		st, body := ts3.ledgerGet(ts3.key, "consistency?from="+strconv.FormatInt(v.Checkpoint.Size, 10)+"&to="+strconv.FormatInt(now.Size, 10))
		var p struct{ Hashes []string }
		if err := json.Unmarshal(body, &p); st != 200 || err != nil {
			t.Fatalf("consistency: %d %s", st, body)
		}
		hs := make([]kledger.Hash, len(p.Hashes))
		for k, h := range p.Hashes {
			hs[k], _ = kledger.ParseHash(h)
		}
		if err := kledger.CheckConsistency(hs, now.Size, now.Root, v.Checkpoint.Size, v.Checkpoint.Root); err != nil {
			t.Errorf("a receipt from the lost tail (tree %d) is not consistent with the repaired tree: %v", v.Checkpoint.Size, err)
		}
	}
}
