package server

// snapshotter writes workspaces' periodic snapshots, one at a time, each
// once the command it follows has committed, through the store's
// snapshots file. It keeps the writing of a large snapshot out of the
// committer: another workspace's commands commit meanwhile. A snapshot
// whose command failed to commit is dropped (the workspace is reloaded from
// disk and snapshots again later), and so is one that finds the queue full
// (the log still holds every command; replay is only longer until the
// next).
type snapshotter struct {
	s    *Server
	in   chan snapJob
	done chan struct{}
}

type snapJob struct {
	ws    *workspace
	seq   int64
	state []byte
	t     *ticket
}

// snapQueue bounds the snapshots waiting to be written.
const snapQueue = 64

func newSnapshotter(s *Server) *snapshotter {
	return &snapshotter{s: s, in: make(chan snapJob, snapQueue), done: make(chan struct{})}
}

// enqueue hands over ws's state after command seq, to be written once t
// has committed; it never blocks.
func (w *snapshotter) enqueue(ws *workspace, seq int64, state []byte, t *ticket) {
	select {
	case w.in <- snapJob{ws, seq, state, t}:
	default:
		w.s.log.Warn("snapshot queue full; snapshot dropped", "workspace", ws.name, "seq", seq)
	}
}

// stop writes what is queued and ends the snapshotter; the committer must
// have stopped first, so that every queued ticket is done.
func (w *snapshotter) stop() {
	close(w.in)
	<-w.done
}

func (w *snapshotter) run() {
	defer close(w.done)
	for j := range w.in {
		<-j.t.done
		if j.t.err != nil {
			continue
		}
		if err := w.s.store.SaveSnapshot(j.ws.id, j.seq, j.state); err != nil {
			w.s.log.Warn("snapshot not written (the commands were); will snapshot again later", "workspace", j.ws.name, "seq", j.seq, "err", err)
		}
	}
}
