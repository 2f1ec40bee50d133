package kernel_test

import (
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

// TestWrapFactory: a wrapped factory passes every engine it makes, new or
// restored, through its wrapper, keeps its name unless given one, and
// wraps nothing when the engine could not be made.
func TestWrapFactory(t *testing.T) {
	wrapped := 0
	f := kernel.WrapFactory(kernel.Native, "", func(e kernel.Engine) kernel.Engine { wrapped++; return e })
	if f.Name() != "native" {
		t.Errorf("name %q, want native", f.Name())
	}
	if g := kernel.WrapFactory(kernel.Native, "odd", nil); g.Name() != "odd" {
		t.Errorf("name %q, want odd", g.Name())
	}
	e, err := f.New(nil)
	if err != nil || wrapped != 1 {
		t.Fatalf("New: %v, %d wrapped", err, wrapped)
	}
	snap, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Restore(snap); err != nil || wrapped != 2 {
		t.Fatalf("Restore: %v, %d wrapped", err, wrapped)
	}
	if e, err := f.Restore([]byte("not a snapshot")); err == nil || e != nil || wrapped != 2 {
		t.Errorf("Restore of a bad snapshot: %v, %v, %d wrapped", e, err, wrapped)
	}
}
