package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// MaxFence is the largest fence a restored plane raises a counter to:
// fences are JSON integers, and JavaScript holds them exactly only up to
// 2^53 − 1.
const MaxFence = 1<<53 - 1

// snapshotFence is the fence counter a kernel snapshot holds (its
// top-level "fence" member).
func snapshotFence(snap []byte) (int64, error) {
	fence := int64(-1)
	err := kernel.ScanObject(snap, func(name string, v []byte) error {
		if name == "fence" {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return fmt.Errorf("fence %q is not an integer", v)
			}
			fence = n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read the snapshot's fence: %w", err)
	}
	if fence < 0 {
		return 0, errors.New("read the snapshot's fence: the snapshot has no fence counter")
	}
	return fence, nil
}

// withFence is snap with its fence counter set to fence. A kernel snapshot
// is canonical JSON whose top-level members come in a fixed order (v,
// rules, nowMs, seq, fence, ...), and inside a JSON string every quote is
// escaped, so the first `,"fence":` is the counter's. The kernel's
// Restore checks the result is canonical, and the caller compares the
// restored machine's snapshot with it.
func withFence(snap []byte, fence int64) ([]byte, error) {
	old, err := snapshotFence(snap)
	if err != nil {
		return nil, err
	}
	member := []byte(`,"fence":` + strconv.FormatInt(old, 10) + `,`)
	i := bytes.Index(snap, member)
	if i < 0 {
		return nil, errors.New("the snapshot's fence counter is not where a kernel snapshot keeps it")
	}
	out := make([]byte, 0, len(snap)+20)
	out = append(out, snap[:i]...)
	out = append(out, `,"fence":`...)
	out = strconv.AppendInt(out, fence, 10)
	out = append(out, ',')
	out = append(out, snap[i+len(member):]...)
	if got, err := snapshotFence(out); err != nil || got != fence {
		return nil, fmt.Errorf("the raised snapshot reads fence %d (%v), want %d", got, err, fence)
	}
	return out, nil
}

// raiseFences gives a freshly loaded workspace of a restored data folder
// its fence raise (store.SetFenceRaise), once: its counter goes to
// max(counter + Raise, Floor), the machine is restarted from the raised
// snapshot, and that snapshot is written at the workspace's last logged
// command before the raise is marked done. A crash between the two raises
// it again on the next start, never less: fences only go up. ws.mu is held
// and ws.eng is the machine just loaded.
func (s *Server) raiseFences(ws *workspace) error {
	if store.IsDrillWorkspace(ws.name) {
		return nil // its fences are its own scenario's: its reference replay starts at 1
	}
	r, ok, err := s.store.PendingFenceRaise(context.Background(), ws.id)
	if err != nil || !ok {
		return err
	}
	snap, err := ws.eng.Snapshot()
	if err != nil {
		return fmt.Errorf("server: snapshot workspace %s to raise its fences: %w", ws.name, err)
	}
	from, err := snapshotFence(snap)
	if err != nil {
		return fmt.Errorf("server: workspace %s: %w", ws.name, err)
	}
	to := max(from+r.Raise, r.Floor)
	if to > MaxFence || to < from {
		return fmt.Errorf("server: workspace %s: raising its fence counter from %d by %d (floor %d) passes %d, the largest fence JSON clients read exactly",
			ws.name, from, r.Raise, r.Floor, int64(MaxFence))
	}
	if to > from {
		raised, err := withFence(snap, to)
		if err != nil {
			return fmt.Errorf("server: workspace %s: %w", ws.name, err)
		}
		eng, err := s.engine.Restore(raised)
		if err != nil {
			return fmt.Errorf("server: workspace %s: restart from the raised snapshot: %w", ws.name, err)
		}
		if back, err := eng.Snapshot(); err != nil || !bytes.Equal(back, raised) {
			eng.Close()
			return fmt.Errorf("server: workspace %s: the machine restarted with fence %d does not give its snapshot back (%v)", ws.name, to, err)
		}
		if err := s.store.SaveSnapshot(ws.id, ws.seq, raised); err != nil {
			eng.Close()
			return err
		}
		ws.eng.Close()
		ws.eng = eng
		ws.snapBytes, ws.sinceSnap, ws.logBytes = len(raised), 0, 0
	}
	if err := s.store.FenceRaised(ws.id, from, to, s.nowMs()); err != nil {
		return err
	}
	s.log.Warn("restored data folder: fence counter raised, so that no fence the lost plane handed out is handed out again",
		"workspace", ws.name, "from", from, "to", to)
	return nil
}
