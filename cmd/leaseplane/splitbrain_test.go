package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// TestSplitBrain starts two servers from copies of one data folder, as an
// operator who restored a backup beside the running plane would: each
// grants the same lock to a different agent. Each ledger alone is clean;
// their exports merged are not, and `detect --events` says so, citing both
// grants.
func TestSplitBrain(t *testing.T) {
	d1 := filepath.Join(t.TempDir(), "data")
	_, out, stop := startServeAt(t, d1)
	_, key := servertest.ReadServeStart(strings.NewReader(out.String()))
	if key == "" {
		t.Fatalf("no first-start key in %q", out.String())
	}
	stop()
	d2 := filepath.Join(t.TempDir(), "copy")
	if b, err := exec.Command("cp", "-a", d1, d2).CombinedOutput(); err != nil {
		t.Fatalf("copy the data folder: %v %s", err, b)
	}
	t.Setenv("LEASEPLANE_KEY", key)
	var bundles []string
	for i, side := range []struct{ data, agent string }{{d1, "did:web:acme.example:agent:alpha"}, {d2, "did:web:acme.example:agent:beta"}} {
		url, _, _ := startServeAt(t, side.data)
		t.Setenv("LEASEPLANE_URL", url)
		// --receipt waits until the ledger holds the grant
		receipt := filepath.Join(t.TempDir(), "receipt")
		if code, o, e := cli(t, "lease", "lock:deploy/production", "--as", side.agent, "--receipt", receipt); code != 0 {
			t.Fatalf("lease on server %d: exit %d %s %s", i, code, o, e)
		}
		bundle := filepath.Join(t.TempDir(), "bundle.json")
		if code, o, e := cli(t, "ledger", "export", "--url", url, "--out", bundle); code != 0 {
			t.Fatalf("export of server %d: exit %d %s %s", i, code, o, e)
		}
		bundles = append(bundles, bundle)
	}
	vkey := strings.TrimSpace(func() string {
		_, o, _ := cli(t, "ledger", "key", "--data", d1, "--workspace", firstWorkspace)
		return o
	}())
	for _, b := range bundles {
		if code, o, e := cli(t, "detect", "--key", vkey, b); code != 0 || !strings.Contains(o, "0 findings") {
			t.Errorf("one plane's bundle alone: exit %d\n%s%s", code, o, e)
		}
	}
	// a bundle that does not verify is not looked at
	raw, _ := os.ReadFile(bundles[0])
	bad := filepath.Join(t.TempDir(), "tampered.json")
	os.WriteFile(bad, bytes.Replace(raw, []byte("agent:alpha"), []byte("agent:alphb"), 1), 0o644)
	if code, o, e := cli(t, "detect", "--key", vkey, bad); code != 2 || !strings.Contains(e, "does not verify") {
		t.Errorf("a tampered bundle: exit %d\n%s%s", code, o, e)
	}
	// merge: each bundle's events, one a line (jq -c '.entries[].event')
	var merged bytes.Buffer
	for _, b := range bundles {
		raw, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Entries []struct{ Event json.RawMessage }
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		for _, e := range v.Entries {
			merged.Write(e.Event)
			merged.WriteByte('\n')
		}
	}
	file := filepath.Join(t.TempDir(), "merged.jsonl")
	os.WriteFile(file, merged.Bytes(), 0o644)
	code, o, e := cli(t, "detect", "--events", file)
	if code != 1 {
		t.Fatalf("detect --events on the merged exports: exit %d, want 1\n%s%s", code, o, e)
	}
	var overlap string
	for _, line := range strings.Split(o, "\n") {
		if strings.HasPrefix(line, "overlap: lock:deploy/production: ") {
			overlap = line
		}
	}
	if !strings.Contains(overlap, "agent:alpha, write, fence 1") || !strings.Contains(overlap, "agent:beta, write, fence 1") {
		t.Errorf("the overlap does not cite both grants:\n%s", o)
	}
	if !strings.Contains(o, "fence: lock:deploy/production: fence 1 of") {
		t.Errorf("the reused fence is not reported:\n%s", o)
	}
}
