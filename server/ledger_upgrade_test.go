package server

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// The workspace key of the data folder in testdata/ledger-rows32 (test data
// only).
const rows32WorkspaceKey = "lp_b532da44fe1a_j8xqUiHzODJftubVynKWD8Pd3X4-YkwAOiTQPf2X17k"

// TestLedgerFromUnpackedRows starts the current server on a data folder
// whose ledger.db the builds before packed rows wrote (testdata/ledger-rows32:
// 103 entries in uncompressed rows of one entry each, 93 of them exported,
// with receipts and a bundle taken from that server): the ledger is packed
// on open, and then its tree is the one the old server signed (the same
// root at 93 and at 103, and consistent with both), every entry of the old
// bundle reads back byte for byte, the old receipts still verify and the
// receipt of the same grant made now verifies, and new entries go on.
func TestLedgerFromUnpackedRows(t *testing.T) {
	src := filepath.Join("testdata", "ledger-rows32")
	dir := t.TempDir()
	servertest.CopyDir(t, filepath.Join(src, "data"), dir, nil)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	vkey := strings.TrimSpace(string(read("default.vkey")))
	ts := newTestServer(t, dir)
	ts.key = rows32WorkspaceKey
	if st, b := ts.ledgerGet(ts.key, "key"); st != 200 || strings.TrimSpace(string(b)) != vkey {
		t.Fatalf("verifier key after the upgrade: %d %s, want %s", st, b, vkey)
	}

	oldCP, err := kledger.Open(read("checkpoint.txt"), vkey)
	if err != nil {
		t.Fatal(err)
	}
	cp := ts.checkpointOf(vkey)
	if cp.Size != oldCP.Size || cp.Root != oldCP.Root {
		t.Fatalf("checkpoint after the upgrade: size %d root %s, want the old server's %d %s", cp.Size, cp.Root, oldCP.Size, oldCP.Root)
	}

	// Every entry of the old bundle, byte for byte.
	var bundle struct {
		Entries []struct {
			Index int
			Data  string
		}
	}
	if err := json.Unmarshal(read("bundle.json"), &bundle); err != nil {
		t.Fatal(err)
	}
	got := ts.entries(ts.key)
	if len(got) != int(cp.Size) || len(bundle.Entries) != 93 {
		t.Fatalf("%d entries after the upgrade, bundle %d; want %d and 93", len(got), len(bundle.Entries), cp.Size)
	}
	for i, e := range bundle.Entries {
		if got[i].Data != e.Data {
			t.Fatalf("entry %d after the upgrade differs from the old bundle's", i)
		}
	}

	// The old receipts verify, and under the old checkpoint of size 93.
	for _, name := range []string{"grant0.receipt", "grant-read.receipt"} {
		v := checkReceipt(t, read(name), vkey)
		if !strings.Contains(v.Summary(), "tree of size 93") {
			t.Errorf("%s: %s", name, v.Summary())
		}
	}
	for _, from := range []int64{93, oldCP.Size} {
		st, b := ts.ledgerGet(ts.key, "consistency?from="+strconv.FormatInt(from, 10)+"&to="+strconv.FormatInt(cp.Size, 10))
		if st != 200 {
			t.Fatalf("consistency from %d: %d %s", from, st, b)
		}
	}
	st, b := ts.ledgerGet(ts.key, "receipt?leaseId=lease_33b2fe543d3785fd")
	if st != 200 {
		t.Fatalf("receipt of the first grant after the upgrade: %d %s", st, b)
	}
	v := checkReceipt(t, b, vkey)
	old, _ := kledger.ParseReceipt(read("grant0.receipt"))
	now, _ := kledger.ParseReceipt(b)
	if now.Index != old.Index || base64.StdEncoding.EncodeToString(now.Entry) != base64.StdEncoding.EncodeToString(old.Entry) {
		t.Errorf("the first grant's receipt now is of entry %d (%s), the old one of %d", now.Index, v.Summary(), old.Index)
	}

	// New entries go on from there, in the last row.
	st, b = ts.lease("lock:after-upgrade", "did:web:acme.example:agent:new")
	if st != 200 {
		t.Fatalf("lease after the upgrade: %d %s", st, b)
	}
	id := ts.leaseID(b)
	ts.ledgerWait()
	st, b = ts.ledgerGet(ts.key, "receipt?leaseId="+id)
	if st != 200 {
		t.Fatalf("receipt of a new grant: %d %s", st, b)
	}
	checkReceipt(t, b, vkey)
	// (and the expiries of the leases the old server left held, on this
	// test's later clock)
	if n := len(ts.entries(ts.key)); n <= int(cp.Size) {
		t.Errorf("%d entries after one more grant, want more than %d", n, cp.Size)
	}
}
