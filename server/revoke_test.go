package server

import (
	"context"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// TestRevocationIsImmediate: a key the server has cached stops working as
// soon as RevokeKey returns, and as soon as the server acknowledges a
// revocation made through another handle on the store (another process,
// as leaseplane keys revoke is), with the clock standing still, so that
// no cache lifetime helps.
func TestRevocationIsImmediate(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	ctx := context.Background()
	ws, err := ts.s.store.WorkspaceByName("default")
	if err != nil {
		t.Fatal(err)
	}
	agent, _, err := ts.s.store.CreateKey(ws, store.RoleAgent, "did:example:a", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := ts.s.store.CreateKey(ws, store.RoleAgent, "did:example:b", 0)
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(key, actor string) int {
		st, _, err := ts.s.Call(ctx, key, kernel.OpAcquire, []byte(`{"resource":"r-`+actor+`","actorDid":"`+actor+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := acquire(agent, "did:example:a"); st != 200 {
		t.Fatalf("before the revocation: %d", st)
	}
	if _, err := ts.s.RevokeKey(ctx, agent); err != nil {
		t.Fatal(err)
	}
	if st := acquire(agent, "did:example:a"); st != 401 {
		t.Fatalf("right after RevokeKey: %d, want 401", st)
	}

	// Another process revokes: it opens the store on its own.
	if st := acquire(other, "did:example:b"); st != 200 {
		t.Fatalf("before the revocation: %d", st)
	}
	cli, err := store.Open(ts.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.RevokeKey(other, 1); err != nil {
		t.Fatal(err)
	}
	epoch, _, err := cli.KeyEpochs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, applied, err := cli.KeyEpochs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if applied >= epoch {
			break
		}
	}
	if st := acquire(other, "did:example:b"); st != 401 {
		t.Fatalf("after the server acknowledged the revocation: %d, want 401", st)
	}
}
