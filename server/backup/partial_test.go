package backup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestPartialBackupsRemoved: a backup killed on the way leaves its hidden
// partial folder (with copies of key hashes and signing keys); the next
// backup beside it removes it, as does a restore, while a folder that is
// not a partial backup, or one a live process is still writing, stays; a
// backup that fails removes its own.
func TestPartialBackupsRemoved(t *testing.T) {
	dir, _, _ := backedUpPlane(t)
	parent := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	partial := func(name string, pid int) string {
		p := filepath.Join(parent, name)
		if err := os.MkdirAll(filepath.Join(p, "ledger-keys"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(p, "ledger-keys", "1.key"), []byte("secret"), 0o600)
		if pid != 0 {
			os.WriteFile(filepath.Join(p, partialMark), []byte(strconv.Itoa(pid)), 0o600)
		}
		return p
	}
	abandoned := partial(".b1"+partialInfix+"111", dead.Process.Pid)
	writing := partial(".b2"+partialInfix+"222", os.Getppid()) // a live process
	foreign := partial(".notes"+partialInfix+"333", 0)         // no mark: not ours
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	b3 := filepath.Join(parent, "b3")
	if _, err := Take(context.Background(), dir, b3, time.Now); err != nil {
		t.Fatal(err)
	}
	if exists(abandoned) || !exists(writing) || !exists(foreign) {
		t.Fatalf("after a backup: abandoned partial kept %v, live one kept %v, foreign folder kept %v; want false, true, true",
			exists(abandoned), exists(writing), exists(foreign))
	}
	if exists(filepath.Join(b3, partialMark)) {
		t.Fatal("the finished backup still carries the partial mark")
	}
	if _, err := ReadManifest(b3); err != nil {
		t.Fatal(err)
	}
	again := partial(".b4"+partialInfix+"444", dead.Process.Pid)
	if _, err := Restore(context.Background(), b3, filepath.Join(t.TempDir(), "restored"), Options{Now: time.Now}); err != nil {
		t.Fatal(err)
	}
	if exists(again) {
		t.Fatal("a restore left the abandoned partial backup beside it")
	}
	// A backup that fails (its context ended) leaves nothing behind.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Take(ctx, dir, filepath.Join(parent, "b5"), time.Now); err == nil {
		t.Fatal("a backup with an ended context succeeded")
	}
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if n := e.Name(); n != "b3" && n != filepath.Base(writing) && n != filepath.Base(foreign) {
			t.Errorf("left in the backups' folder: %s", n)
		}
	}
}
