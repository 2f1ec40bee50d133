package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/server/store"
)

// TestSnapshotDoesNotStallOtherCommits holds one workspace's snapshot
// write and checks that another workspace's commands, and the first one's
// own, still commit and are answered meanwhile; after the write the
// snapshot is the one a restart starts from.
func TestSnapshotDoesNotStallOtherCommits(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	clock := servertest.NewClock()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Engine: kernel.Native, Clock: clock.Now, AfterFunc: clock.AfterFunc, SnapshotEvery: 3,
		faults: faults{snapshot: func() {
			once.Do(func() {
				close(entered)
				<-release
			})
		}}}
	s := mustNew(t, cfg)
	keyA := mustBootstrap(t, s, "a")
	wb, _, err := s.store.EnsureWorkspace("b", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	keyB, _, err := s.store.CreateKey(wb, store.RoleWorkspace, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acquire := func(key, resource string) int {
		st, _, err := s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"`+resource+`","actorDid":"did:example:x"}`))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	go func() {
		for _, r := range []string{"r1", "r2", "r3"} { // the third is snapshotted
			if st := acquire(keyA, r); st != 200 {
				t.Errorf("acquire %s in a: %d", r, st)
			}
		}
	}()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the snapshot of workspace a was never written")
	}
	done := make(chan [2]int, 1)
	go func() { done <- [2]int{acquire(keyB, "r"), acquire(keyA, "r4")} }()
	select {
	case st := <-done:
		if st != [2]int{200, 200} {
			t.Fatalf("while a's snapshot was being written: b answered %d, a %d", st[0], st[1])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("commands wait for another workspace's snapshot write")
	}
	close(release)
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st := servertest.OpenStore(t, dir)
	defer st.Close()
	w := servertest.Workspace(t, st, "a")
	if _, seq, _, err := st.Load(ctx, w.ID); err != nil || seq != 4 {
		t.Fatalf("workspace a's snapshot after shutdown: seq %d, %v; want 4", seq, err)
	}
}
