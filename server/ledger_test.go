package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
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
	"github.com/leaseplane/leaseplane/server/store"
	tdlog "github.com/transparency-dev/formats/log"
	tdproof "github.com/transparency-dev/formats/proof"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// ledgerGet answers a ledger route for key.
func (ts *testServer) ledgerGet(key, route string) (int, []byte) {
	ts.t.Helper()
	st, _, b := ts.do("GET", "/api/v1/ledger/"+route, key, "")
	return st, b
}

func (ts *testServer) ledgerWait() {
	ts.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for id := range ts.wsIDs() {
		if err := ts.s.Ledger().Wait(ctx, id); err != nil {
			ts.t.Fatalf("ledger of workspace %d did not catch up: %v", id, err)
		}
	}
}

func (ts *testServer) wsIDs() map[int64]bool {
	ts.s.wsMu.RLock()
	defer ts.s.wsMu.RUnlock()
	out := map[int64]bool{}
	for id := range ts.s.workspaces {
		out[id] = true
	}
	return out
}

type entry struct {
	Index int64           `json:"index"`
	Data  string          `json:"data"`
	Event json.RawMessage `json:"event"`
}

func (ts *testServer) entries(key string) []entry {
	ts.t.Helper()
	var all []entry
	for {
		st, b := ts.ledgerGet(key, "entries?start="+strconv.Itoa(len(all))+"&count=1000")
		if st != 200 {
			ts.t.Fatalf("entries: %d %s", st, b)
		}
		var page struct{ Entries []entry }
		if err := json.Unmarshal(b, &page); err != nil {
			ts.t.Fatal(err)
		}
		if len(page.Entries) == 0 {
			return all
		}
		all = append(all, page.Entries...)
	}
}

func (ts *testServer) leaseID(b []byte) string {
	ts.t.Helper()
	var a struct{ Lease struct{ ID string } }
	if err := json.Unmarshal(b, &a); err != nil || a.Lease.ID == "" {
		ts.t.Fatalf("no lease in %s", b)
	}
	return a.Lease.ID
}

func eventType(t *testing.T, raw []byte) string {
	var e struct{ Type string }
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return e.Type
}

// checkReceipt verifies a receipt with our verification and with
// transparency-dev's formats and merkle packages.
func checkReceipt(t *testing.T, receipt []byte, vkey string) kledger.Verified {
	t.Helper()
	v, err := kledger.Verify(receipt, vkey)
	if err != nil {
		t.Fatalf("receipt does not verify: %v\n%s", err, receipt)
	}
	var p tdproof.TLogProof
	if err := p.Unmarshal(receipt); err != nil {
		t.Fatalf("TLogProof: %v", err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, _, err := tdlog.ParseCheckpoint(p.Checkpoint, verifier.Name(), verifier)
	if err != nil {
		t.Fatalf("transparency-dev refuses the checkpoint: %v", err)
	}
	hashes := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		hashes[i] = p.Hashes[i][:]
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, cp.Size, rfc6962.DefaultHasher.HashLeaf(p.ExtraData), hashes, cp.Hash); err != nil {
		t.Fatalf("merkle VerifyInclusion: %v", err)
	}
	return v
}

// TestLedgerRecordsEveryChange: grants, renewals, releases, lapses by alarm,
// and an operator's suspension with its revocations are entries, in order,
// exactly the kernel's events; every grant's receipt checks, with our
// verification and transparency-dev's; every two checkpoints are
// consistent.
func TestLedgerRecordsEveryChange(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	w := ts.defaultWorkspace()
	opKey := ts.newKey(store.RoleOperator, "", 1)
	vk := ts.verifierKey()
	if !strings.HasPrefix(vk, "leaseplane/default+") {
		t.Fatalf("verifier key %q", vk)
	}
	var checkpoints [][]byte
	checkpoint := func() {
		st, b := ts.ledgerGet(ts.key, "checkpoint")
		if st != 200 {
			t.Fatalf("checkpoint: %d %s", st, b)
		}
		checkpoints = append(checkpoints, b)
	}
	var ids []string
	step := func(what string, f func() (int, []byte)) []byte {
		st, b := f()
		if st != 200 {
			t.Fatalf("%s: %d %s", what, st, b)
		}
		ts.ledgerWait()
		checkpoint()
		return b
	}
	lease := func(res, actor string) func() (int, []byte) {
		return func() (int, []byte) { return ts.lease(res, actor) }
	}
	ids = append(ids, ts.leaseID(step("grant", lease("lock:a", "did:example:one"))))
	ts.clock.Advance(time.Second)
	step("renew", lease("lock:a", "did:example:one"))
	step("release", func() (int, []byte) {
		st, _, b := ts.do("POST", api.PathRelease, ts.key, `{"resource":"lock:a","actorDid":"did:example:one"}`)
		return st, b
	})
	ids = append(ids, ts.leaseID(step("grant b", lease("lock:b", "did:example:sleepy"))))
	ts.clock.Advance(30 * time.Second) // the alarm lapses lock:b
	ts.ledgerWait()
	checkpoint()
	ids = append(ids, ts.leaseID(step("grant c", lease("lock:c", "did:example:rogue"))))
	step("suspend", func() (int, []byte) {
		st, _, b := ts.do("POST", api.PathSuspend, opKey, `{"actorDid":"did:example:rogue"}`)
		return st, b
	})

	es := ts.entries(ts.key)
	var types []string
	for i, e := range es {
		data, err := base64.StdEncoding.DecodeString(e.Data)
		if err != nil || string(data) != string(e.Event) {
			t.Fatalf("entry %d: data %q is not its event %s", i, e.Data, e.Event)
		}
		if e.Index != int64(i) {
			t.Fatalf("entry %d has index %d", i, e.Index)
		}
		types = append(types, eventType(t, e.Event))
	}
	want := "coordination.lease,coordination.renew,coordination.release,coordination.lease,coordination.expire," +
		"coordination.lease,operator.suspend,coordination.revoke"
	if strings.Join(types, ",") != want {
		t.Fatalf("entries\n %s\nwant\n %s", strings.Join(types, ","), want)
	}
	// The entries are the events the command log keeps, byte for byte, in
	// order (with a ledger, the events table is not written: the ledger
	// holds them).
	logged, err := ts.s.Store().LogEvents(context.Background(), w.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var evs [][]byte
	for _, r := range logged {
		if err := kernel.ScanArray(r.Events, func(ev []byte) error { evs = append(evs, ev); return nil }); len(r.Events) > 0 && err != nil {
			t.Fatal(err)
		}
	}
	if len(evs) != len(es) {
		t.Fatalf("%d events in the log, %d entries", len(evs), len(es))
	}
	for i := range evs {
		if string(evs[i]) != string(es[i].Event) {
			t.Errorf("entry %d %s differs from the logged event %s", i, es[i].Event, evs[i])
		}
	}
	if evs, err := ts.s.Store().Events(context.Background(), w.ID, 0, 100); err != nil || len(evs) != 0 {
		t.Errorf("the events table holds %d events (%v) beside the ledger", len(evs), err)
	}

	for _, id := range ids {
		st, b := ts.ledgerGet(ts.key, "receipt?leaseId="+id)
		if st != 200 {
			t.Fatalf("receipt of %s: %d %s", id, st, b)
		}
		v := checkReceipt(t, b, vk)
		if !strings.Contains(string(v.Receipt.Entry), `"leaseId":"`+id+`"`) || eventType(t, v.Receipt.Entry) != "coordination.lease" {
			t.Errorf("receipt of %s holds %s", id, v.Receipt.Entry)
		}
	}
	if st, b := ts.ledgerGet(ts.key, "receipt?leaseId=lease_nope"); st != 404 {
		t.Errorf("receipt of an unknown lease: %d %s", st, b)
	}

	// Every two checkpoints are consistent.
	cps := make([]kledger.Checkpoint, len(checkpoints))
	for i, b := range checkpoints {
		c, err := kledger.Open(b, vk)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		cps[i] = c
	}
	for _, a := range cps {
		for _, b := range cps {
			if a.Size > b.Size {
				continue
			}
			st, body := ts.ledgerGet(ts.key, "consistency?from="+strconv.FormatInt(a.Size, 10)+"&to="+strconv.FormatInt(b.Size, 10))
			if st != 200 {
				t.Fatalf("consistency %d→%d: %d %s", a.Size, b.Size, st, body)
			}
			var p struct{ Hashes []string }
			json.Unmarshal(body, &p)
			hs := make([]kledger.Hash, len(p.Hashes))
			raw := make([][]byte, len(p.Hashes))
			for i, h := range p.Hashes {
				if hs[i], err = kledger.ParseHash(h); err != nil {
					t.Fatal(err)
				}
				raw[i] = hs[i][:]
			}
			if err := kledger.CheckConsistency(hs, b.Size, b.Root, a.Size, a.Root); err != nil {
				t.Errorf("%d→%d: %v", a.Size, b.Size, err)
			}
			if a.Size > 0 {
				if err := proof.VerifyConsistency(rfc6962.DefaultHasher, uint64(a.Size), uint64(b.Size), raw, a.Root[:], b.Root[:]); err != nil {
					t.Errorf("%d→%d: merkle: %v", a.Size, b.Size, err)
				}
			}
		}
	}
	// Inclusion proofs from the proof route check against a checkpoint.
	last := cps[len(cps)-1]
	for i := int64(0); i < last.Size; i++ {
		st, body := ts.ledgerGet(ts.key, "proof?index="+strconv.FormatInt(i, 10)+"&size="+strconv.FormatInt(last.Size, 10))
		if st != 200 {
			t.Fatalf("proof %d: %d %s", i, st, body)
		}
		var p struct{ Hashes []string }
		json.Unmarshal(body, &p)
		hs := make([]kledger.Hash, len(p.Hashes))
		for k, h := range p.Hashes {
			hs[k], _ = kledger.ParseHash(h)
		}
		data, _ := base64.StdEncoding.DecodeString(es[i].Data)
		if err := kledger.CheckInclusion(hs, last.Size, last.Root, i, kledger.LeafHash(data)); err != nil {
			t.Errorf("proof %d: %v", i, err)
		}
	}
}

// TestLedgerWorkspacesApart: a workspace's keys see only its own ledger.
func TestLedgerWorkspacesApart(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	keyB := ts.newWorkspaceKey("other")
	_, a := ts.lease("lock:secret", "did:example:a")
	idA := ts.leaseID(a)
	st, _, b := ts.do("POST", api.PathLease, keyB, `{"resource":"lock:mine","actorDid":"did:example:b"}`)
	if st != 200 {
		t.Fatalf("lease in B: %d %s", st, b)
	}
	ts.ledgerWait()
	esB := ts.entries(keyB)
	if len(esB) != 1 || strings.Contains(string(esB[0].Event), "secret") {
		t.Fatalf("B's entries: %+v", esB)
	}
	if st, b := ts.ledgerGet(keyB, "receipt?leaseId="+idA); st != 404 {
		t.Errorf("B asked for A's receipt: %d %s", st, b)
	}
	_, ka := ts.ledgerGet(ts.key, "key")
	_, kb := ts.ledgerGet(keyB, "key")
	if !strings.HasPrefix(string(kb), "leaseplane/other+") || string(ka) == string(kb) {
		t.Errorf("keys A %q B %q", ka, kb)
	}
	_, cpB := ts.ledgerGet(keyB, "checkpoint")
	if _, err := kledger.Open(cpB, strings.TrimSpace(string(ka))); err == nil {
		t.Error("B's checkpoint verifies with A's key")
	}
}

// TestLedgerBadParameters: bad input is 400 naming the parameter.
func TestLedgerBadParameters(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	ts.lease("lock:a", "did:example:a")
	ts.lease("lock:b", "did:example:a")
	ts.ledgerWait()
	for _, tc := range []struct{ route, param string }{
		{"entries?start=-1", "start"},
		{"entries?start=x", "start"},
		{"entries?start=01", "start"},
		{"entries?start=3", "start"},
		{"entries?count=0", "count"},
		{"entries?count=1001", "count"},
		{"entries?count=1&count=2", "count"},
		{"proof", "index"},
		{"proof?index=2&size=2", "index"},
		{"proof?index=0&size=3", "size"},
		{"proof?index=0&size=1e3", "size"},
		{"consistency", "from"},
		{"consistency?from=2&to=1", "from"},
		{"consistency?from=0&to=9", "to"},
		{"receipt", "leaseId"},
		{"receipt?leaseId=" + url.QueryEscape(strings.Repeat("x", 300)), "leaseId"},
	} {
		st, b := ts.ledgerGet(ts.key, tc.route)
		if st != 400 || field(t, b, "parameter") != tc.param || !strings.Contains(field(t, b, "error").(string), tc.param) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.route, st, b, tc.param)
		}
	}
	if st, b := ts.ledgerGet("", "key"); st != 401 {
		t.Errorf("no key: %d %s", st, b)
	}
	if st, b := ts.ledgerGet(ts.key, "nope"); st != 404 {
		t.Errorf("unknown route: %d %s", st, b)
	}
	if st, _, b := ts.do("POST", "/api/v1/ledger/key", ts.key, ""); st != 405 {
		t.Errorf("POST: %d %s", st, b)
	}
}

// TestLedgerOutage: while ledger writes fail, leases are still granted;
// once they work again the ledger holds every event exactly once, in order,
// and its bundle checks.
func TestLedgerOutage(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	fault := errors.New("injected ledger write failure")
	ts.lease("lock:before", "did:example:a")
	ts.ledgerWait()
	ts.ledgerFault.Store(&fault)
	const n = 50
	for i := range n {
		if st, b := ts.lease("lock:r"+strconv.Itoa(i), "did:example:a"); st != 200 {
			t.Fatalf("lease %d during the outage: %d %s", i, st, b)
		}
	}
	// The writer retries on its own; wait until the fault has hit it.
	for deadline := time.Now().Add(20 * time.Second); ts.s.Ledger().Stats().Failures == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the injected fault never hit a ledger write")
		}
	}
	ts.ledgerFault.Store(nil)
	ts.ledgerWait()
	_, _, metrics := ts.do("GET", "/metrics", "", "")
	if !strings.Contains(string(metrics), "leaseplane_ledger_write_failures_total ") || strings.Contains(string(metrics), "leaseplane_ledger_write_failures_total 0\n") {
		t.Errorf("the metrics do not count the ledger's failed writes")
	}
	es := ts.entries(ts.key)
	if len(es) != n+1 {
		t.Fatalf("%d entries, want %d", len(es), n+1)
	}
	seen := map[string]bool{}
	for i, e := range es {
		var ev struct{ Resource string }
		json.Unmarshal(e.Event, &ev)
		want := "lock:before"
		if i > 0 {
			want = "lock:r" + strconv.Itoa(i-1)
		}
		if ev.Resource != want || seen[string(e.Event)] {
			t.Fatalf("entry %d is %s, want the grant of %s once", i, e.Event, want)
		}
		seen[string(e.Event)] = true
	}
	checkBundle(t, ts, es)
}

// checkBundle builds the bundle of the whole ledger and verifies it.
func checkBundle(t *testing.T, ts *testServer, es []entry) {
	t.Helper()
	_, cp := ts.ledgerGet(ts.key, "checkpoint")
	_, vkey := ts.ledgerGet(ts.key, "key")
	var b kledger.Bundle
	b.Checkpoint = cp
	for _, e := range es {
		data, _ := base64.StdEncoding.DecodeString(e.Data)
		b.Entries = append(b.Entries, data)
	}
	if _, err := kledger.Verify(b.Marshal(), strings.TrimSpace(string(vkey))); err != nil {
		t.Fatalf("the bundle does not verify: %v", err)
	}
}

// TestLedgerCatchesUpAfterRestart: commands whose events never reached the
// ledger (its writes failing until the server stopped) are in it after a
// restart, once each, and receipts from before still check.
func TestLedgerCatchesUpAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, dir)
	_, b := ts.lease("lock:first", "did:example:a")
	id := ts.leaseID(b)
	ts.ledgerWait()
	_, receipt := ts.ledgerGet(ts.key, "receipt?leaseId="+id)
	_, vkey := ts.ledgerGet(ts.key, "key")
	fault := errors.New("injected")
	ts.ledgerFault.Store(&fault)
	for i := range 20 {
		ts.lease("lock:x"+strconv.Itoa(i), "did:example:a")
	}
	if err := ts.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := ts.key
	ts2 := newTestServer(t, dir)
	ts2.key = key
	ts2.ledgerWait()
	es := ts2.entries(key)
	if len(es) != 21 {
		t.Fatalf("%d entries after the restart, want 21", len(es))
	}
	checkBundle(t, ts2, es)
	_, vkey2 := ts2.ledgerGet(key, "key")
	if string(vkey) != string(vkey2) {
		t.Fatalf("the verifier key changed across a restart: %s / %s", vkey, vkey2)
	}
	v := checkReceipt(t, receipt, strings.TrimSpace(string(vkey)))
	// The old receipt's checkpoint is a prefix of the new tree.
	_, cp := ts2.ledgerGet(key, "checkpoint")
	now, err := kledger.Open(cp, strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	_, body := ts2.ledgerGet(key, "consistency?from="+strconv.FormatInt(v.Checkpoint.Size, 10)+"&to="+strconv.FormatInt(now.Size, 10))
	var p struct{ Hashes []string }
	json.Unmarshal(body, &p)
	hs := make([]kledger.Hash, len(p.Hashes))
	for k, h := range p.Hashes {
		hs[k], _ = kledger.ParseHash(h)
	}
	if err := kledger.CheckConsistency(hs, now.Size, now.Root, v.Checkpoint.Size, v.Checkpoint.Root); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerKeyUnwritable: when the workspace's signing key cannot be
// written, leases are still granted; once it can, the ledger opens on the
// next ledger request and holds every event.
func TestLedgerKeyUnwritable(t *testing.T) {
	dir := t.TempDir()
	ts := newTestServer(t, dir)
	keyB := ts.newWorkspaceKey("late")
	// A file where the key would go makes the key unwritable.
	keyFile := filepath.Join(dir, "ledger-keys", "late.key")
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		st, _, b := ts.do("POST", api.PathLease, keyB, `{"resource":"lock:`+strconv.Itoa(i)+`","actorDid":"did:example:b"}`)
		if st != 200 {
			t.Fatalf("lease %d without a ledger key: %d %s", i, st, b)
		}
	}
	if st, b := ts.ledgerGet(keyB, "key"); st != 503 {
		t.Fatalf("the ledger with an unwritable key: %d %s", st, b)
	}
	os.Remove(keyFile)
	if st, b := ts.ledgerGet(keyB, "key"); st != 200 {
		t.Fatalf("the ledger once the key can be made: %d %s", st, b)
	}
	ts.ledgerWait()
	if es := ts.entries(keyB); len(es) != 3 {
		t.Fatalf("%d entries, want the 3 grants", len(es))
	}
}
