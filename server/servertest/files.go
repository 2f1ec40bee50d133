package servertest

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// CopyDir copies the folder from into to (which may exist), folders 0700
// and files 0600, as a data folder's are; keep, when not nil, says which
// files (by their path below from) to copy.
func CopyDir(t testing.TB, from, to string, keep func(rel string) bool) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		if keep != nil && !keep(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}
