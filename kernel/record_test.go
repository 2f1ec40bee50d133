package kernel_test

import (
	"reflect"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

// TestRecordRoundTrip: a command record gives back the command, every
// field included; an op without a code travels as none with Invalid set.
func TestRecordRoundTrip(t *testing.T) {
	for _, c := range []kernel.Command{
		{Op: kernel.OpAcquire, NowMs: 1 << 50, Resource: "lock:é", ActorDid: "did:web:a", Mode: "read",
			WaitUpToMs: 30000, HasWaitUpTo: true},
		{Op: kernel.OpRelease, Resource: "r", ActorDid: "did:x:y", LeaseID: "", HasLeaseID: true},
		{Op: kernel.OpWait, Prefix: "lock:", After: "lock:a", Limit: 7},
		{Op: kernel.OpCancel, AskID: "ask_12", HasAskID: true},
		{Invalid: "op is required"},
	} {
		b := kernel.AppendRecord([]byte("x"), c)
		if len(b) != 1+kernel.RecordLen(c) {
			t.Fatalf("%+v: record of %d bytes, RecordLen %d", c, len(b)-1, kernel.RecordLen(c))
		}
		got, err := kernel.ParseRecord(b[1:])
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
	got, err := kernel.ParseRecord(kernel.AppendRecord(nil, kernel.Command{Op: "grab"}))
	if err != nil || got.Op != "" || got.Invalid == "" {
		t.Fatalf("an unknown op: %+v, %v", got, err)
	}
	if _, err := kernel.ParseRecord(make([]byte, 10)); err == nil {
		t.Fatal("a short record parsed")
	}
}

// TestEmptyCancelNotLogged: a host's cancel {} at start that ends no ask
// only moves the clock, and is not logged; one that ends an ask is.
func TestEmptyCancelNotLogged(t *testing.T) {
	r, err := kernel.ParseRules(nil)
	if err != nil {
		t.Fatal(err)
	}
	m := kernel.New(r)
	if rd := m.Step(kernel.Command{Op: kernel.OpCancel, NowMs: 5000}); rd.Log || rd.Status != 200 {
		t.Fatalf("an empty cancel: %+v", rd)
	}
	m.Step(kernel.Command{Op: kernel.OpAcquire, NowMs: 6000, Resource: "r", ActorDid: "did:x:a"})
	held := m.Step(kernel.Command{Op: kernel.OpAcquire, NowMs: 6001, Resource: "r", ActorDid: "did:x:b", WaitUpToMs: 1000, HasWaitUpTo: true})
	if held.AskID == "" {
		t.Fatalf("no held ask: %+v", held)
	}
	if rd := m.Step(kernel.Command{Op: kernel.OpCancel, NowMs: 6002}); !rd.Log {
		t.Fatalf("a cancel that ended %s is not logged: %+v", held.AskID, rd)
	}
}
