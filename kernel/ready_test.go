package kernel_test

import (
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

// TestReadySaysWhatToDo checks Step's Ready: typed events, what to log,
// the alarm, and when a snapshot is due.
func TestReadySaysWhatToDo(t *testing.T) {
	m := kernel.New(kernel.Rules{})
	acq := kernel.Command{Op: kernel.OpAcquire, NowMs: 1000, Resource: "lock:a", ActorDid: "did:x:a"}
	r := m.Step(acq)
	if r.Status != 200 || !r.Log || !r.Changed || !r.AlarmOK || r.NextAlarm != 31000 || r.SnapshotDue || r.AskID != "" {
		t.Fatalf("grant: %+v", r)
	}
	if len(r.Events) != 1 {
		t.Fatalf("grant: events %+v", r.Events)
	}
	e := r.Events[0]
	if e.Type != "coordination.lease" || e.Resource != "lock:a" || e.ActorDid != "did:x:a" || e.Fence != 1 ||
		e.LeaseID != kernel.LeaseID("lock:a", 1) || e.AtMs != 1000 {
		t.Fatalf("grant event: %+v", e)
	}
	// A wait that only moves the clock is not logged; one that lapses is.
	if r := m.Step(kernel.Command{Op: kernel.OpWait, NowMs: 2000}); r.Log || !r.Changed || r.Status != 200 {
		t.Fatalf("wait that moves the clock: %+v", r)
	}
	if r := m.Step(kernel.Command{Op: kernel.OpTick, NowMs: 31000}); !r.Log || len(r.Events) != 1 || r.Events[0].Type != "coordination.expire" || r.AlarmOK {
		t.Fatalf("tick that expires: %+v", r)
	}
	// A refusal that only moves the clock is logged (it is not a wait or a tick).
	m.Step(kernel.Command{Op: kernel.OpSuspend, NowMs: 31000, ActorDid: "did:x:s"})
	if r := m.Step(kernel.Command{Op: kernel.OpAcquire, NowMs: 32000, Resource: "lock:a", ActorDid: "did:x:s"}); !r.Log || r.Status != 403 {
		t.Fatalf("suspended refusal: %+v", r)
	}
	// An undecodable command is answered by Step and changes nothing.
	bad := kernel.DecodeCommand(kernel.OpAcquire, 40000, []byte(`{"resource":1}`))
	if r := m.Step(bad); r.Status != 400 || r.Log || r.Changed || m.Now() != 32000 {
		t.Fatalf("invalid: %+v", r)
	}
	// SnapshotDue after SnapshotEvery logged commands since the last Snapshot.
	m.Snapshot()
	due := 0
	for i := range kernel.SnapshotEvery {
		r := m.Step(kernel.Command{Op: kernel.OpAcquire, NowMs: int64(40000 + i), Resource: "lock:b", ActorDid: "did:x:b"})
		if r.SnapshotDue {
			due = i + 1
			break
		}
	}
	if due != kernel.SnapshotEvery {
		t.Fatalf("snapshot due after %d logged commands, want %d", due, kernel.SnapshotEvery)
	}
	m.Snapshot()
	if r := m.Step(kernel.Command{Op: kernel.OpAcquire, NowMs: 50000, Resource: "lock:b", ActorDid: "did:x:b"}); r.SnapshotDue {
		t.Fatal("snapshot due right after a snapshot")
	}
}
