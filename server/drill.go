package server

import (
	"context"
	"net/http"
	"time"

	"github.com/leaseplane/leaseplane/server/drill"
	"github.com/leaseplane/leaseplane/server/store"
)

// The drills (package server/drill) reach the server through drillHost
// and drillWorkspace; the runs are queued by drillRunner (drillrun.go).

// DrillNames are the drills in the order a run runs them.
var DrillNames = drill.Names

// runDrills runs the drills of one run in order; progress is called after
// each drill with the results so far.
func (s *Server) runDrills(ctx context.Context, runID int64, progress func([]drill.Result)) ([]drill.Result, error) {
	return drill.Run(ctx, drillHost{s}, runID, s.cfg.faults.drillNames, progress)
}

// drillHost is what the drills need of the server.
type drillHost struct{ s *Server }

func (h drillHost) NowMs() int64                                   { return h.s.nowMs() }
func (h drillHost) SleepUntil(ctx context.Context, ms int64) error { return h.s.sleepUntil(ctx, ms) }
func (h drillHost) Handler() http.Handler                          { return h.s.handler }

// NewWorkspace makes a drill workspace with a workspace key and an
// operator key, loads it and starts its tape.
func (h drillHost) NewWorkspace(_ context.Context, name string, rules []byte) (drill.Workspace, error) {
	s := h.s
	now := s.nowMs()
	w, err := s.store.CreateDrillWorkspace(name, rules, now)
	if err != nil {
		return nil, err
	}
	d := &drillWorkspace{s: s, id: w.ID}
	fail := func(err error) (drill.Workspace, error) {
		d.Drop(context.Background())
		return nil, err
	}
	if d.wkey, _, err = s.store.CreateKey(w, store.RoleWorkspace, "", now); err != nil {
		return fail(err)
	}
	if d.okey, _, err = s.store.CreateKey(w, store.RoleOperator, "", now); err != nil {
		return fail(err)
	}
	if d.ws, err = s.workspace(w.ID); err != nil {
		return fail(err)
	}
	d.ws.mu.Lock()
	d.ws.tape = []drill.TapeEntry{}
	d.ws.mu.Unlock()
	return d, nil
}

// drillWorkspace is one drill's workspace.
type drillWorkspace struct {
	s          *Server
	id         int64
	ws         *workspace // nil until loaded
	wkey, okey string
}

func (d *drillWorkspace) Keys() (string, string) { return d.wkey, d.okey }

func (d *drillWorkspace) Tape(_ context.Context, from int) ([]drill.TapeEntry, error) {
	d.ws.mu.Lock()
	defer d.ws.mu.Unlock()
	return append([]drill.TapeEntry(nil), d.ws.tape[from:]...), nil
}

func (d *drillWorkspace) Durable(ctx context.Context) ([]drill.Record, error) {
	d.ws.mu.Lock()
	last := d.ws.last
	d.ws.mu.Unlock()
	if last != nil {
		select {
		case <-last.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	recs, err := d.s.store.LogSince(ctx, d.id, 0)
	out := make([]drill.Record, len(recs))
	for i, r := range recs {
		out[i] = drill.Record{Op: r.Op, NowMs: r.NowMs, Body: r.Body, Status: r.Status}
	}
	return out, err
}

func (d *drillWorkspace) Drop(context.Context) error { return d.s.dropDrillWorkspace(d.id, d.ws) }

// sleepUntil waits until the server's clock reaches ms, on the server's
// timers.
func (s *Server) sleepUntil(ctx context.Context, ms int64) error {
	for {
		d := ms - s.nowMs()
		if d <= 0 {
			return ctx.Err()
		}
		ch := make(chan struct{})
		stop := s.cfg.AfterFunc(time.Duration(d)*time.Millisecond, func() { close(ch) })
		select {
		case <-ch:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
}

// dropDrillWorkspace stops a drill workspace (no further commands or
// alarms), waits for its last commit and deletes it from memory, the key
// cache and the store.
func (s *Server) dropDrillWorkspace(id int64, ws *workspace) error {
	if ws != nil {
		ws.mu.Lock()
		ws.disarm()
		ws.closed = true
		last := ws.last
		ws.mu.Unlock()
		if last != nil {
			<-last.done
		}
		ws.mu.Lock()
		if ws.eng != nil {
			ws.eng.Close()
			ws.eng = nil
		}
		ws.tape = nil
		ws.mu.Unlock()
	}
	s.wsMu.Lock()
	delete(s.workspaces, id)
	s.metrics.workspaces.Set(float64(len(s.workspaces)))
	s.wsMu.Unlock()
	s.keys.mu.Lock()
	for k, e := range s.keys.entries {
		if e.key.WorkspaceID == id {
			delete(s.keys.entries, k)
		}
	}
	s.keys.mu.Unlock()
	return s.store.DeleteDrillWorkspace(id)
}
