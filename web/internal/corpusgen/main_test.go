package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyCorpus(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write := func(dir, name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(src, "a.json", `{"steps":[]}`)
	write(src, "a.golden", "not copied")
	write(dst, "a.json", "stale")
	write(dst, "gone.json", "removed from the corpus")
	if err := copyCorpus(src, dst); err != nil {
		t.Fatal(err)
	}
	got, _ := filepath.Glob(filepath.Join(dst, "*"))
	if len(got) != 1 || filepath.Base(got[0]) != "a.json" {
		t.Fatalf("dst holds %v, want only a.json", got)
	}
	if b, _ := os.ReadFile(got[0]); string(b) != `{"steps":[]}` {
		t.Errorf("a.json = %q, want the source's bytes", b)
	}
	if err := copyCorpus(t.TempDir(), dst); err == nil || !strings.Contains(err.Error(), "no scenarios") {
		t.Errorf("an empty source: %v, want an error naming it", err)
	}
}
