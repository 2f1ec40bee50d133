package ledger

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
)

// KeyDir is the folder of the data directory that holds the workspaces'
// signing keys, one file each, mode 0600.
const KeyDir = "ledger-keys"

// KeyPath is where a workspace's signing key is kept.
func KeyPath(dataDir, workspace string) string {
	return filepath.Join(dataDir, KeyDir, workspace+".key")
}

// EnsureKey returns the signing key of a workspace, making it (from rnd;
// nil means crypto/rand) when there is none yet. The key is named for the
// origin host/leaseplane/<workspace> (host may be empty); an existing key
// keeps the origin it was made with, so an origin never changes. The file
// is created whole or not at all, so two processes making it at once agree
// on one key.
func EnsureKey(dataDir, host, workspace string, rnd io.Reader) (signer string, created bool, err error) {
	if strings.ContainsAny(workspace, "/\\") || workspace == "" {
		return "", false, fmt.Errorf("ledger: workspace name %q cannot name a key file", workspace)
	}
	path := KeyPath(dataDir, workspace)
	if s, err := readKey(path); err == nil {
		return s, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	signer, _, err = kledger.GenerateKey(rnd, kledger.Origin(host, workspace))
	if err != nil {
		return "", false, fmt.Errorf("ledger: make the signing key of workspace %s: %w", workspace, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("ledger: create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".new-key-*")
	if err != nil {
		return "", false, fmt.Errorf("ledger: write the signing key of workspace %s: %w", workspace, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("ledger: write the signing key of workspace %s: %w", workspace, err)
	}
	_, err = tmp.WriteString(signer + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("ledger: write the signing key of workspace %s: %w", workspace, err)
	}
	// Link fails when the key exists: then the other writer's key stands.
	if err := os.Link(tmp.Name(), path); err != nil {
		if s, rerr := readKey(path); rerr == nil {
			return s, false, nil
		}
		return "", false, fmt.Errorf("ledger: keep the signing key of workspace %s: %w", workspace, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return signer, true, nil
}

// readKey reads and checks a signing key file. Its error never quotes the
// key.
func readKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if _, err := kledger.VerifierOf(s); err != nil {
		return "", fmt.Errorf("ledger: %s does not hold a signing key", path)
	}
	return s, nil
}

// VerifierKey is the public verifier key of a workspace whose signing key
// exists.
func VerifierKey(dataDir, workspace string) (string, error) {
	s, err := readKey(KeyPath(dataDir, workspace))
	if err != nil {
		return "", err
	}
	return kledger.VerifierOf(s)
}
