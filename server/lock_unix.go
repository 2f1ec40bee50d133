//go:build unix

package server

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir for this process, so that two
// servers never append to one log. The operating system drops it when the
// process ends, however it ends.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: create data directory: %w", err)
	}
	path := filepath.Join(dir, "serve.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("server: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("server: %s is in use by another leaseplane serve (lock %s: %v)", dir, path, err)
	}
	return func() { f.Close() }, nil
}

// DataDirInUse reports whether a running leaseplane serve holds dir's lock.
func DataDirInUse(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "serve.lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
