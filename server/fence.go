package server

import (
	"bytes"
	"context"
	"fmt"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// MaxFence is the largest fence a restored plane raises a counter to:
// fences are JSON integers, and JavaScript holds them exactly only up to
// 2^53 − 1.
const MaxFence = 1<<53 - 1

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
	from, err := kernel.SnapshotFence(snap)
	if err != nil {
		return fmt.Errorf("server: workspace %s: read the fence counter: %w", ws.name, err)
	}
	to := max(from+r.Raise, r.Floor)
	if to > MaxFence || to < from {
		return fmt.Errorf("server: workspace %s: raising its fence counter from %d by %d (floor %d) passes %d, the largest fence JSON clients read exactly",
			ws.name, from, r.Raise, r.Floor, int64(MaxFence))
	}
	if to > from {
		raised, err := kernel.WithFence(snap, to)
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
