package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataFolderMustExist: commands on a data folder that does not exist
// refuse and create nothing; keys create --init makes one.
func TestDataFolderMustExist(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "dta")
	for _, args := range [][]string{
		{"keys", "create", "--data", missing, "--workspace", "default"},
		{"keys", "create", "--data", missing, "--workspace", "default", "--new-workspace"},
		{"keys", "list", "--data", missing},
		{"keys", "revoke", "--data", missing, "abc"},
		{"ledger", "key", "--data", missing, "--workspace", "default"},
		{"ledger", "status", "--data", missing, "--workspace", "default"},
	} {
		code, _, errOut := cli(t, args...)
		if code != exitRefused || !strings.Contains(errOut, "no leaseplane data folder") && !strings.Contains(errOut, "is not a leaseplane data folder") && !strings.Contains(errOut, "no ledger in") {
			t.Errorf("%q: exit %d stderr %q; want %d and a refusal naming the folder", args, code, errOut, exitRefused)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("%q made %s (%v)", args, missing, err)
		}
	}
	// --init makes the folder and the workspace.
	key := keysCLI(t, "create", "--data", missing, "--workspace", "default", "--init")
	if !strings.HasPrefix(key, "lp_") {
		t.Fatalf("keys create --init printed %q", key)
	}
	if _, err := os.Stat(filepath.Join(missing, "leaseplane.db")); err != nil {
		t.Fatalf("--init made no data folder: %v", err)
	}
}

// TestNewWorkspaceNeedsAWord: keys create on a workspace that does not
// exist refuses (naming the ones there) unless --new-workspace says so.
func TestNewWorkspaceNeedsAWord(t *testing.T) {
	data := t.TempDir()
	keysCLI(t, "create", "--data", data, "--workspace", "default", "--init")
	code, _, errOut := cli(t, "keys", "create", "--data", data, "--workspace", "defualt")
	if code != exitRefused || !strings.Contains(errOut, `no workspace "defualt" (it has: default)`) || !strings.Contains(errOut, "--new-workspace") {
		t.Errorf("a mistyped workspace: exit %d stderr %q", code, errOut)
	}
	_, out, _ := cli(t, "keys", "list", "--data", data)
	if strings.Contains(out, "defualt") {
		t.Errorf("the refused workspace was made: %s", out)
	}
	keysCLI(t, "create", "--data", data, "--workspace", "default") // an existing one needs no word
	keysCLI(t, "create", "--data", data, "--workspace", "staging", "--new-workspace")
	if _, out, _ := cli(t, "keys", "list", "--data", data); !strings.Contains(out, "staging") {
		t.Errorf("--new-workspace made no workspace: %s", out)
	}
}

// TestVersionFlag: --version prints what the version verb prints.
func TestVersionFlag(t *testing.T) {
	code, out, _ := cli(t, "--version")
	_, want, _ := cli(t, "version")
	if code != 0 || out != want || out == "" {
		t.Errorf("--version: exit %d %q, want 0 and %q", code, out, want)
	}
}

// TestUnreachableExitCode: a plane that cannot be reached is exit 7, not
// the 1 of a refusal.
func TestUnreachableExitCode(t *testing.T) {
	t.Setenv("LEASEPLANE_URL", "http://127.0.0.1:1")
	t.Setenv("LEASEPLANE_KEY", "lp_x_y")
	for _, args := range [][]string{
		{"lease", "r", "--as", "did:web:a"},
		{"release", "r", "--as", "did:web:a"},
		{"wait"},
		{"lease", "r"}, // asks the plane who the key is
		{"exec", "r", "--as", "did:web:a", "--", "true"},
	} {
		if code, _, errOut := cli(t, args...); code != exitNoPlane || !strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("%q: exit %d stderr %q, want %d", args, code, errOut, exitNoPlane)
		}
	}
	p := startPlane(t)
	mustCLI(t, 0, "lease", "r", "--as", "did:web:a")
	if code, _, _ := cli(t, "lease", "r", "--as", "did:web:b"); code != exitRefused {
		t.Errorf("a refusal: exit %d, want %d", code, exitRefused)
	}
	_ = p
}

// TestClaimsNotHeldBy: when only the claims of waiters ahead stand in the
// way, the CLI says so instead of "held by ;".
func TestClaimsNotHeldBy(t *testing.T) {
	startPlane(t)
	mustCLI(t, 0, "lease", "r", "--as", "did:web:a")
	cli(t, "lease", "r", "--as", "did:web:b") // b waits, admitted, with a claim
	mustCLI(t, 0, "release", "r", "--as", "did:web:a")
	code, _, errOut := cli(t, "lease", "r", "--as", "did:web:c")
	if code != exitRefused || strings.Contains(errOut, "held by") ||
		!strings.Contains(errOut, "refused lease_held: not held, but waiters ahead have claims on it (did:web:b)") {
		t.Errorf("exit %d stderr %q; want the claimants named", code, errOut)
	}
}
