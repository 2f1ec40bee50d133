package servertest

import (
	"testing"

	"github.com/leaseplane/leaseplane/server/store"
)

// OpenStore opens the store in dir (no server running on it), failing the
// test when it cannot; the caller closes it.
func OpenStore(t testing.TB, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Workspace is the workspace name as st holds it.
func Workspace(t testing.TB, st *store.Store, name string) store.Workspace {
	t.Helper()
	w, err := st.WorkspaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
