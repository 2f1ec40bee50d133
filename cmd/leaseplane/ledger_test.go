package main

// End-to-end tests of the ledger's command line: ledger key, export, watch,
// verify, lease --receipt, and the ledger across kill -9 under load.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/client"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// runBin runs the built binary with env and returns its exit status, stdout
// and stderr.
func runBin(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(servertest.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func TestLedgerCLI(t *testing.T) {
	data := t.TempDir()
	c := startChild(t, "native", data)
	env := []string{"LEASEPLANE_URL=" + c.url, "LEASEPLANE_KEY=" + c.key}
	dir := t.TempDir()
	receipt := filepath.Join(dir, "receipt.txt")
	code, out, errs := runBin(t, env, "lease", "lock:deploy", "--as", "did:example:ci", "--receipt", receipt)
	if code != 0 || !strings.Contains(out, `"ok":true`) {
		t.Fatalf("lease --receipt: %d %s %s", code, out, errs)
	}
	code, vkey, errs := runBin(t, nil, "ledger", "key", "--data", data, "--workspace", "default")
	vkey = strings.TrimSpace(vkey)
	if code != 0 || !strings.HasPrefix(vkey, "leaseplane/default+") {
		t.Fatalf("ledger key: %d %q %s", code, vkey, errs)
	}
	code, out, errs = runBin(t, nil, "verify", "--key", vkey, receipt)
	if code != 0 || !strings.HasPrefix(out, "receipt holds: entry 0 (coordination.lease lease_") || strings.Count(out, "\n") != 1 {
		t.Fatalf("verify receipt: %d %q %s", code, out, errs)
	}
	// exec --receipt saves the receipt before the command runs.
	receipt2 := filepath.Join(dir, "receipt2.txt")
	code, out, errs = runBin(t, env, "exec", "lock:job", "--as", "did:example:job", "--receipt", receipt2, "--", "cat", receipt2)
	if code != 0 || !strings.HasPrefix(out, "c2sp.org/tlog-proof@v1\n") {
		t.Fatalf("exec --receipt: %d %q %s", code, out, errs)
	}
	if code, out, errs = runBin(t, nil, "verify", "--key", vkey, receipt2); code != 0 {
		t.Fatalf("verify exec's receipt: %d %s %s", code, out, errs)
	}
	watch := filepath.Join(dir, "checkpoints.jsonl")
	if code, out, errs = runBin(t, env, "ledger", "watch", "--file", watch, "--once"); code != 0 || !strings.Contains(out, "kept") {
		t.Fatalf("watch: %d %s %s", code, out, errs)
	}
	// The ledger is written behind the grants, and the checkpoint route
	// waits for it only so long: --receipt waits until the grant is in a
	// signed tree, so the next checkpoint must have grown.
	if code, out, errs = runBin(t, env, "lease", "lock:more", "--as", "did:example:ci", "--receipt", filepath.Join(dir, "receipt3.txt")); code != 0 {
		t.Fatalf("lease lock:more --receipt: %d %s %s", code, out, errs)
	}
	if code, out, errs = runBin(t, env, "ledger", "watch", "--file", watch, "--once"); code != 0 || !strings.Contains(out, "consistent with the last kept one") {
		t.Fatalf("watch again: %d %s %s", code, out, errs)
	}
	bundle := filepath.Join(dir, "bundle.json")
	// A workspace key exports but may not mark: only an operator says what
	// was exported (the mark lets retention drop bodies).
	if code, out, errs = runBin(t, env, "ledger", "export", "--out", bundle); code != 0 || !strings.Contains(errs, `the export was not recorded by the plane: 403`) {
		t.Fatalf("export with a workspace key: %d %s %s", code, out, errs)
	}
	op := keysCLI(t, "create", "--data", data, "--workspace", "default", "--operator")
	opEnv := []string{"LEASEPLANE_URL=" + c.url, "LEASEPLANE_KEY=" + op}
	if code, out, errs = runBin(t, opEnv, "ledger", "export", "--out", bundle); code != 0 || !strings.Contains(errs, `recorded by the plane as exported: {"ok":true,"exported":`) {
		t.Fatalf("export: %d %s %s", code, out, errs)
	}
	code, out, errs = runBin(t, nil, "verify", "--key", vkey, bundle)
	if code != 0 || !strings.HasPrefix(out, "bundle holds: ") {
		t.Fatalf("verify bundle: %d %s %s", code, out, errs)
	}
	// A tampered bundle, a wrong key and a bad file: exit 1 naming what broke.
	b, _ := os.ReadFile(bundle)
	keyFile := filepath.Join(dir, "key.vkey")
	os.WriteFile(keyFile, []byte(vkey+"\n"), 0o644)
	// Another key of the same name: the swapped-key attack.
	_, other, err := kledger.GenerateKey(nil, "leaseplane/default")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, key, want string
	}{
		{"entry", strings.Replace(string(b), `"atMs":`, `"atMs":1`, 1), vkey, "entry 0: "},
		{"signature", strings.Replace(string(b), `\n\n— leaseplane/default `, `\n\n— leaseplane/default A`, 1), keyFile, "checkpoint"},
		{"key", string(b), other, "checkpoint signature"},
		{"nothing", "hello", vkey, "neither a receipt"},
	} {
		f := filepath.Join(dir, tc.name)
		os.WriteFile(f, []byte(tc.data), 0o644)
		code, out, errs := runBin(t, nil, "verify", "--key", tc.key, f)
		if code != 1 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: %d %q %q, want exit 1 naming %q", tc.name, code, out, errs, tc.want)
		}
	}
	if code, _, _ := runBin(t, nil, "verify", receipt); code != 2 {
		t.Errorf("verify without --key: exit %d, want 2", code)
	}
}

// TestLedgerKill9 kills the server with SIGKILL under load, restarts it and
// checks that the ledger holds every grant and release answered before the
// kill, each once, that receipts handed out before the kill still check,
// that their checkpoints are prefixes of the new tree, and that the
// exported bundle verifies.
func TestLedgerKill9(t *testing.T) {
	data := t.TempDir()
	c := startChild(t, "native", data)
	key := c.key
	dir := t.TempDir()
	var mu sync.Mutex
	granted := map[string]bool{}  // lease ids answered granted
	released := map[string]bool{} // lease ids answered released
	var receipts []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	servertest.RunClients(&wg, 8, stop, func(i, n int) bool {
		body := fmt.Sprintf(`{"resource":"lock:r%d","actorDid":"did:example:w%d"}`, (i+n)%5, i)
		st, m, err := loadPost(c.url, key, "/api/v1/acp/coordination/lease", body)
		if err != nil {
			return false
		}
		if st != 200 {
			return true
		}
		id := m["lease"].(map[string]any)["id"].(string)
		mu.Lock()
		granted[id] = true
		mu.Unlock()
		st, m, err = loadPost(c.url, key, "/api/v1/acp/coordination/release", body)
		if err != nil {
			return false
		}
		if st == 200 {
			mu.Lock()
			for _, r := range m["releasedIds"].([]any) {
				released[r.(string)] = true
			}
			mu.Unlock()
		}
		return true
	})
	env := []string{"LEASEPLANE_URL=" + c.url, "LEASEPLANE_KEY=" + key}
	// Receipts handed out under load, before the kill.
	for start := time.Now(); len(receipts) < 3 && time.Since(start) < 30*time.Second; {
		mu.Lock()
		var id string
		for g := range granted {
			id = g
			break
		}
		mu.Unlock()
		if id == "" {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		f := filepath.Join(dir, fmt.Sprintf("receipt%d.txt", len(receipts)))
		b, err := fetchReceipt(ledgerClientFor(c.url, key), id)
		if err != nil {
			t.Fatalf("receipt under load: %v", err)
		}
		os.WriteFile(f, b, 0o644)
		receipts = append(receipts, f)
	}
	watch := filepath.Join(dir, "watch.jsonl")
	if code, out, errs := runBin(t, env, "ledger", "watch", "--file", watch, "--once"); code != 0 {
		t.Fatalf("watch before the kill: %d %s %s", code, out, errs)
	}
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(granted)
		mu.Unlock()
		if n >= 300 {
			break
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.cmd.Wait()
	close(stop)
	wg.Wait()

	c2 := startChild(t, "native", data)
	env = []string{"LEASEPLANE_URL=" + c2.url, "LEASEPLANE_KEY=" + key}
	_, vkey, _ := runBin(t, nil, "ledger", "key", "--data", data, "--workspace", "default")
	vkey = strings.TrimSpace(vkey)
	for _, f := range receipts {
		if code, out, errs := runBin(t, nil, "verify", "--key", vkey, f); code != 0 {
			t.Errorf("a receipt from before the kill: %d %s %s", code, out, errs)
		}
	}
	// Each receipt's checkpoint is a prefix of the tree after the restart.
	c2client := ledgerClientFor(c2.url, key)
	ctx := context.Background()
	note, err := ledgerGet(ctx, c2client, "checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	now, err := kledger.Open(note, vkey)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range receipts {
		b, _ := os.ReadFile(f)
		_, old, err := kledger.VerifyReceipt(b, vkey)
		if err != nil {
			t.Fatal(err)
		}
		body, err := ledgerGet(ctx, c2client, fmt.Sprintf("consistency?from=%d&to=%d", old.Size, now.Size))
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Hashes []string }
		json.Unmarshal(body, &p)
		proof := make([]kledger.Hash, len(p.Hashes))
		for i, h := range p.Hashes {
			if proof[i], err = kledger.ParseHash(h); err != nil {
				t.Fatal(err)
			}
		}
		if err := kledger.CheckConsistency(proof, now.Size, now.Root, old.Size, old.Root); err != nil {
			t.Errorf("the checkpoint of %s (size %d) is not a prefix of the tree after the restart (size %d): %v", f, old.Size, now.Size, err)
		}
	}
	// The ledger catches up with the log on start; export until it has
	// every answered grant.
	bundle := filepath.Join(dir, "bundle.json")
	var entries []map[string]any
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if code, out, errs := runBin(t, env, "ledger", "export", "--out", bundle); code != 0 {
			t.Fatalf("export after the restart: %d %s %s", code, out, errs)
		}
		b, _ := os.ReadFile(bundle)
		var doc struct {
			Entries []struct{ Event map[string]any }
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		entries = entries[:0]
		found := 0
		for _, e := range doc.Entries {
			entries = append(entries, e.Event)
			if e.Event["type"] == "coordination.lease" && granted[e.Event["leaseId"].(string)] {
				found++
			}
		}
		if found == len(granted) {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("after the restart the ledger has %d of the %d grants answered before the kill", found, len(granted))
		}
	}
	if code, out, errs := runBin(t, nil, "verify", "--key", vkey, bundle); code != 0 {
		t.Fatalf("verify the bundle after the restart: %d %s %s", code, out, errs)
	}
	seen := map[string]bool{}
	rel := 0
	for i, e := range entries {
		b, _ := json.Marshal(e)
		if seen[string(b)] {
			t.Fatalf("entry %d appears twice: %s", i, b)
		}
		seen[string(b)] = true
		if e["type"] == "coordination.release" && released[e["leaseId"].(string)] {
			rel++
		}
	}
	if rel != len(released) {
		t.Errorf("%d of the %d releases answered before the kill are entries", rel, len(released))
	}
	if code, out, errs := runBin(t, env, "ledger", "watch", "--file", watch, "--once"); code != 0 || !strings.Contains(out, "consistent") {
		t.Fatalf("the checkpoint after the restart is not consistent with the one kept before: %d %s %s", code, out, errs)
	}
	t.Logf("%d grants, %d releases answered before the kill; %d entries after the restart; %d receipts still check",
		len(granted), len(released), len(entries), len(receipts))
}

// TestServeLedgerRetentionFlag: a negative retention, or one without a
// ledger, is a usage error naming the flag.
func TestServeLedgerRetentionFlag(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--ledger-retention", "-1h"},
		{"serve", "--ledger-retention", "720h", "--no-ledger"},
	} {
		var out, e strings.Builder
		if code := run(args, nil, &out, &e); code != 2 || !strings.Contains(e.String(), "--ledger-retention") {
			t.Errorf("%v: exit %d %s", args, code, e.String())
		}
	}
}

// TestLedgerStatus: ledger status reads a data folder (here one whose
// ledger.db the build before packed rows wrote, packed as it opens) and
// prints its entries, bytes, the oldest body kept and the export mark;
// a workspace that is not there is refused.
func TestLedgerStatus(t *testing.T) {
	src := filepath.Join("..", "..", "server", "testdata", "ledger-rows32", "data")
	dir := t.TempDir()
	for _, f := range []string{"leaseplane.db", "ledger.db", "snapshots.db", "events.db"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"ledger", "status", "--data", dir}, nil, &out, &errb); code != 0 {
		t.Fatalf("ledger status: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"workspace     default\n", "entries       103\n", " an entry;", "oldest body   entry 0, written 2026-",
		"export mark   93 (bodies dropped below 0)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ledger status prints\n%s\nwithout %q", out.String(), want)
		}
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"ledger", "status", "--data", dir, "--workspace", "nope"}, nil, &out, &errb); code != exitRefused ||
		!strings.Contains(errb.String(), `no workspace "nope"`) {
		t.Errorf("status of a missing workspace: exit %d, %q", code, errb.String())
	}
}

// ledgerClientFor is a ledger client of the plane at url with key.
func ledgerClientFor(u, key string) *client.Client {
	return client.New(u, key, &http.Client{Timeout: requestTimeout})
}
