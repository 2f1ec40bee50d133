package ledger

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestEnsureKey(t *testing.T) {
	dir := t.TempDir()
	s1, created, err := EnsureKey(dir, "", "acme", bytes.NewReader(bytes.Repeat([]byte{3}, 32)))
	if err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	fi, err := os.Stat(KeyPath(dir, "acme"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v %v, want 0600", fi.Mode(), err)
	}
	s2, created, err := EnsureKey(dir, "", "acme", bytes.NewReader(bytes.Repeat([]byte{4}, 32)))
	if err != nil || created || s2 != s1 {
		t.Fatalf("second call made another key: %v %v", created, err)
	}
	v, err := VerifierKey(dir, "acme")
	if err != nil || !strings.HasPrefix(v, "leaseplane/acme+") || strings.Contains(v, "PRIVATE") {
		t.Fatalf("verifier %q %v", v, err)
	}
	if _, _, err := EnsureKey(dir, "plane.example", "other", nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := VerifierKey(dir, "other"); !strings.HasPrefix(v, "plane.example/leaseplane/other+") {
		t.Fatalf("origin with a host: %q", v)
	}
	if _, _, err := EnsureKey(dir, "", "../x", nil); err == nil {
		t.Error("a workspace name with a slash named a key file")
	}
	os.WriteFile(KeyPath(dir, "bad"), []byte("PRIVATE+KEY+nonsense"), 0o600)
	if _, err := VerifierKey(dir, "bad"); err == nil || strings.Contains(err.Error(), "nonsense") {
		t.Errorf("a bad key file: %v (must fail without quoting it)", err)
	}
}
