package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDetectEvents runs `leaseplane detect --events` on crafted files: the
// exit status says whether anything was found, and each finding names
// both leases.
func TestDetectEvents(t *testing.T) {
	const dir = "../../kernel/detect/testdata/"
	tests := []struct {
		file   string
		code   int
		output []string
	}{
		{"same-resource-overlap.jsonl", 1, []string{"overlap: lock:x: lease_a1 (did:web:acme.example:agent:a, write, fence 1, entry 1) and lease_b2 (did:web:acme.example:agent:b, write, fence 2, entry 2) overlap from 2000 ms (exclusive)", "2 entries, 1 findings"}},
		{"fence-equal.jsonl", 1, []string{"fence: lock:x: fence 1 of lease_b1", "3 entries, 1 findings"}},
		{"read-read-shared.jsonl", 0, []string{"lease-overlap: 3 entries, 0 findings"}},
		{"one-after-another.jsonl", 0, []string{"0 findings"}},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := run([]string{"detect", "--events", dir + tt.file}, nil, &out, &errOut)
		if code != tt.code {
			t.Errorf("%s: exit %d, want %d (stderr %q)", tt.file, code, tt.code, errOut.String())
		}
		for _, w := range tt.output {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tt.file, w, out.String())
			}
		}
	}

	// --json, from stdin
	in, err := os.ReadFile(dir + "renewal-extends-into-grant.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"detect", "--json", "--events", "-"}, bytes.NewReader(in), &out, &errOut); code != 1 {
		t.Fatalf("--json: exit %d (%s)", code, errOut.String())
	}
	var got struct {
		Entries  int
		Findings []struct {
			Kind string
			A, B struct {
				LeaseID string
				Entry   int
			}
		}
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if got.Entries != 3 || len(got.Findings) != 1 || got.Findings[0].A.LeaseID != "lease_a1" || got.Findings[0].A.Entry != 2 ||
		got.Findings[0].B.LeaseID != "lease_b2" || got.Findings[0].B.Entry != 3 {
		t.Errorf("--json: %+v", got)
	}
}

func TestDetectUnreadable(t *testing.T) {
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"type\":\"coordination.lease\",\"atMs\":1}\n\nnot json\n"), 0o644)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"detect", "--events", filepath.Join(tmp, "missing.jsonl")}, "no such file"},
		{[]string{"detect", "--events", bad}, "line 1: a coordination.lease event has no resource"},
		{[]string{"detect"}, "usage: leaseplane detect"},
		{[]string{"detect", "--events", bad, "extra"}, "usage: leaseplane detect"},
		{[]string{"detect", "--bogus"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		if code := run(tt.args, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, errOut.String(), tt.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"detect", "-h"}, nil, &out, &errOut); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}
