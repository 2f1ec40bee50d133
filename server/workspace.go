package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/drill"
	"github.com/leaseplane/leaseplane/server/store"
)

// workspace is one tenant's machine and what keeps it durable and on time.
type workspace struct {
	id   int64
	name string

	mu        sync.Mutex
	eng       kernel.Engine // nil until loaded
	seq       int64         // last logged command applied to eng
	sinceSnap int           // logged commands since the last snapshot
	logBytes  int           // bytes logged since the last snapshot
	snapBytes int           // size of the last snapshot
	loaded    uint64        // gen at the last load
	// rules is the canonical JSON of the rules the machine runs; the first
	// command logged after a load records them (rulesLogged), so the log
	// says what every command ran under.
	rules       []byte
	rulesLogged bool
	last        *ticket // commit of the last change applied
	closed      bool

	// tape, when not nil (a drill workspace), gets every command applied.
	tape []drill.TapeEntry

	alarmAt   int64 // the time the armed timer ticks at; 0 when none
	alarmStop func() bool

	// parked are the held lease requests waiting for the kernel to answer
	// their asks, by askId (held.go).
	parked map[string]*parked

	// gen rises when the machine in memory may differ from the disk (a
	// failed commit, an engine failure); commands then wait for a reload.
	gen atomic.Uint64
}

func (ws *workspace) needsReload() bool { return ws.eng == nil || ws.loaded != ws.gen.Load() }

// errShutdown is why the server answers 503 (commands and health alike)
// once it has begun to shut down.
var errShutdown = errors.New("the server is shutting down")

// workspace returns the loaded workspace with this id, loading it (and
// arming its alarm) on first use: keys made by `leaseplane keys create`
// while the server runs can name a workspace it has not seen.
func (s *Server) workspace(id int64) (*workspace, error) {
	s.wsMu.RLock()
	ws := s.workspaces[id]
	s.wsMu.RUnlock()
	if ws != nil {
		return ws, nil
	}
	w, err := s.store.WorkspaceByID(id)
	if err != nil {
		return nil, err
	}
	if s.ledger != nil && !store.IsDrillWorkspace(w.Name) {
		// The workspace's signing key is made with it (or on its first
		// load by a server that has a ledger). A drill's workspace has no
		// ledger: it lives for one drill.
		// Failing to open it (the key cannot be written) does not stop
		// the workspace: its events stay in the log, and the ledger
		// catches up once a ledger request opens it.
		if err := s.ledger.Workspace(w.ID, w.Name); err != nil {
			s.log.Error("the workspace's ledger cannot be opened; leases go on, the ledger catches up later",
				"workspace", w.Name, "err", err)
		}
	}
	s.wsMu.Lock()
	if ws = s.workspaces[id]; ws == nil {
		ws = &workspace{id: w.ID, name: w.Name}
		s.workspaces[id] = ws
		s.metrics.workspaces.Set(float64(len(s.workspaces)))
	}
	s.wsMu.Unlock()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.needsReload() {
		if err := s.load(ws); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

// load rebuilds ws's machine from its snapshot and log; ws.mu is held.
func (s *Server) load(ws *workspace) error {
	gen := ws.gen.Load()
	start := time.Now()
	w, err := s.store.WorkspaceByID(ws.id)
	if err != nil {
		return err
	}
	snap, snapSeq, recs, err := s.store.Load(context.Background(), ws.id)
	if err != nil {
		return err
	}
	var eng kernel.Engine
	if snap != nil {
		eng, err = s.engine.Restore(snap)
	} else {
		eng, err = s.engine.New(w.Rules)
	}
	if err != nil {
		return fmt.Errorf("server: start machine of workspace %s: %w", ws.name, err)
	}
	rules, err := machineRules(snap, w.Rules)
	if err != nil {
		eng.Close()
		return fmt.Errorf("server: rules of workspace %s: %w", ws.name, err)
	}
	for _, r := range recs {
		if r.Op == HostOp {
			continue // an entry of the host's own (recordEvent), not a command
		}
		// Each command decides again by the semantics it was logged under:
		// a log of leaseplane 0.1 replays as 0.1 decided it (semantics 1),
		// and the machine moves to the current semantics after it.
		if err := eng.SetSemantics(r.Semantics); err != nil {
			eng.Close()
			return fmt.Errorf("server: replay command %d of workspace %s under semantics %d: %w", r.Seq, ws.name, r.Semantics, err)
		}
		if r.Rules != nil {
			if logged, err := kernel.ParseRules(r.Rules); err != nil || string(logged.AppendJSON(nil)) != string(rules) {
				s.log.Error("a logged command ran under other rules than the machine replaying it", "workspace", ws.name,
					"seq", r.Seq, "logged", string(r.Rules), "machine", string(rules))
			}
		}
		res, err := eng.Step(kernel.DecodeCommand(kernel.Op(r.Op), r.NowMs, r.Body))
		if err != nil {
			eng.Close()
			return fmt.Errorf("server: replay command %d of workspace %s: %w", r.Seq, ws.name, err)
		}
		if res.Status != r.Status {
			s.log.Error("replay answered differently than logged", "workspace", ws.name, "seq", r.Seq,
				"op", r.Op, "logged", r.Status, "replayed", res.Status)
		}
		if len(res.Events) > 0 && s.ledger == nil {
			s.events.sink(ws.id, r.Seq, res.Events) // with a ledger, it catches up from the log
		}
	}
	if err := eng.SetSemantics(kernel.Semantics); err != nil {
		eng.Close()
		return fmt.Errorf("server: move workspace %s to semantics %d: %w", ws.name, kernel.Semantics, err)
	}
	if ws.eng != nil {
		ws.eng.Close()
	}
	ws.eng = eng
	ws.rules, ws.rulesLogged = rules, false
	ws.seq = snapSeq
	if n := len(recs); n > 0 {
		ws.seq = recs[n-1].Seq
	}
	ws.sinceSnap = len(recs)
	ws.snapBytes = len(snap)
	ws.logBytes = 0
	for _, r := range recs {
		ws.logBytes += len(r.Body) + logRowOverhead
	}
	if err := s.raiseFences(ws); err != nil {
		return err // ws.loaded stays behind ws.gen: the next command loads again
	}
	ws.last = nil
	ws.loaded = gen
	ws.alarmAt = 0
	// The asks of the log have no request waiting any more (a new process,
	// or a reload after a failed write whose held requests are answered
	// 503 now): they end, as SPEC says a host starting from its log does.
	// At the machine's own time (NowMs 0 moves no clock): logged only when
	// there were asks.
	ws.unparkAll()
	if a := s.stepLocked(ws, kernel.Command{Op: kernel.OpCancel}, []byte("{}")); a.err != nil {
		return a.err
	}
	s.arm(ws)
	s.log.Info("workspace loaded", "workspace", ws.name, "snapshotSeq", snapSeq, "replayed", len(recs),
		"ms", time.Since(start).Milliseconds())
	return nil
}

// machineRules is the canonical JSON of the rules a workspace's machine
// runs: its snapshot's, or, with no snapshot, the workspace's.
func machineRules(snap, workspaceRules []byte) ([]byte, error) {
	raw := workspaceRules
	if snap != nil {
		raw = nil
		err := kernel.ScanObject(snap, func(name string, v []byte) error {
			if name == "rules" {
				raw = v
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	r, err := kernel.ParseRules(raw)
	if err != nil {
		return nil, err
	}
	return r.AppendJSON(nil), nil
}

// logEvents is how the command log keeps a command's events: their JSON
// array, or nil for none.
func logEvents(events []kernel.Event) []byte {
	if len(events) == 0 {
		return nil
	}
	return kernel.AppendEvents(nil, events)
}

// logRowOverhead is about what a log row costs beside its body.
const logRowOverhead = 32

// applied is a command's outcome, still to be made durable.
type applied struct {
	rd     kernel.Ready
	ticket *ticket // the commit to wait for; nil when none
	err    error   // the server failed: answer 503
}

// applyLocked applies one decoded command to ws (ws.mu held) at the
// plane's time, reloading ws first when it needs it: stepLocked. body is
// what the log keeps of it: the request body it was decoded from, or nil
// when part of it came from elsewhere (a query parameter), then the
// command's own encoding (kernel.Command.AppendRequest).
//
// A panic in the engine (a kernel bug) is answered like an engine failure:
// 503, and the machine is rebuilt from disk before its next command.
func (s *Server) applyLocked(ws *workspace, c kernel.Command, body []byte) (out applied) {
	defer func() {
		if v := recover(); v != nil {
			ws.gen.Add(1)
			s.log.Error("engine panicked; the workspace will be reloaded", "workspace", ws.name, "op", c.Op, "panic", v)
			out = applied{err: fmt.Errorf("engine panicked: %v", v)}
		}
	}()
	if ws.closed {
		return applied{err: errShutdown}
	}
	if ws.needsReload() {
		s.metrics.reloads.Inc()
		if err := s.load(ws); err != nil {
			s.log.Error("reload of workspace failed", "workspace", ws.name, "err", err)
			return applied{err: err}
		}
	}
	c.NowMs = s.nowMs()
	return s.stepLocked(ws, c, body)
}

// stepLocked is the one place a command meets the engine (ws.mu held, ws
// loaded): Step, then what its Ready says, nothing more. A logged command
// goes to the committer in order (with a snapshot when one is due); the
// answers of the held asks that ended go to the requests parked on them,
// with the commit to wait for before they are written; the alarm is
// re-armed.
func (s *Server) stepLocked(ws *workspace, c kernel.Command, body []byte) applied {
	rd, err := ws.eng.Step(c)
	if err != nil {
		ws.gen.Add(1)
		s.log.Error("engine failed; the workspace will be reloaded", "workspace", ws.name, "op", c.Op, "err", err)
		return applied{err: fmt.Errorf("engine: %w", err)}
	}
	s.metrics.steps.Add(1)
	if rd.Log && body == nil {
		body = c.AppendRequest(nil)
	}
	out := applied{rd: rd}
	if ws.tape != nil {
		ws.tape = append(ws.tape, drill.TapeEntry{Op: c.Op, NowMs: c.NowMs, Body: bytes.Clone(body), Status: rd.Status,
			Answer: bytes.Clone(rd.Answer), Events: kernel.AppendEvents(nil, rd.Events), Changed: rd.Log})
	}
	if rd.Log {
		ws.seq++
		rec := store.Record{
			Workspace: ws.id,
			Seq:       ws.seq,
			NowMs:     c.NowMs,
			Op:        string(c.Op),
			Body:      append([]byte(nil), body...),
			Status:    rd.Status,
			Events:    logEvents(rd.Events), // the ledger is derived from the log
			Semantics: kernel.Semantics,
		}
		if !ws.rulesLogged {
			rec.Rules, ws.rulesLogged = ws.rules, true
		}
		ws.sinceSnap++
		ws.logBytes += len(body) + logRowOverhead
		// A snapshot every SnapshotEvery commands, but never more often
		// than one per a quarter of its own size logged: a huge state is
		// not rewritten every few commands, and replay stays bounded by a
		// fraction of the state's size.
		var snap []byte
		if ws.sinceSnap >= s.cfg.SnapshotEvery && ws.logBytes >= ws.snapBytes/4 {
			var err error
			if snap, err = ws.eng.Snapshot(); err != nil {
				s.log.Warn("snapshot failed; will try again", "workspace", ws.name, "err", err)
				snap = nil
			} else {
				ws.sinceSnap = 0
				ws.logBytes = 0
				ws.snapBytes = len(snap)
			}
		}
		// A step that only made a held ask is answered by a later step:
		// its commit need not start for it alone (committer.enqueue).
		lazy := rd.AskID != "" && len(rd.Answers) == 0 && len(rd.Events) == 0 && snap == nil
		t := s.commit.enqueue(ws, ws.loaded, rec, rd.Events, lazy)
		s.metrics.logged.Add(1)
		if snap != nil {
			// Written by the snapshotter once this command has committed,
			// outside the commit: see snapshotter.
			s.snaps.enqueue(ws, rec.Seq, snap, t)
		}
		ws.last = t
		out.ticket = t
	} else {
		out.ticket = ws.last
	}
	if len(rd.Answers) > 0 {
		s.deliverLocked(ws, rd, out.ticket)
	}
	s.arm(ws)
	return out
}

// wait blocks until a's commit is done and reports its failure.
func (a applied) wait() error {
	if a.err != nil {
		return a.err
	}
	if a.ticket != nil {
		return a.ticket.wait()
	}
	return nil
}

// arm sets ws's timer to the machine's next alarm (ws.mu held).
func (s *Server) arm(ws *workspace) {
	if ws.closed || ws.eng == nil || s.cfg.faults.disableAlarms {
		return
	}
	at, ok, err := ws.eng.NextAlarm()
	if err != nil {
		s.log.Error("engine failed to give its next alarm", "workspace", ws.name, "err", err)
		ws.gen.Add(1)
		ok = false
	}
	if !ok {
		// An armed timer may stay: when it fires it finds nothing due.
		return
	}
	if ws.alarmStop != nil && ws.alarmAt > 0 && ws.alarmAt <= at {
		// The armed timer fires no later than needed; when it does, alarm
		// re-arms for what is due then. Re-arming only for an earlier time
		// spares a timer per command.
		return
	}
	ws.disarm()
	ws.alarmAt = at
	d := time.Duration(at-s.nowMs()) * time.Millisecond
	if d < 0 {
		d = 0
	}
	ws.alarmStop = s.cfg.AfterFunc(d, func() { s.alarm(ws, at) })
}

// disarm stops ws's timer (ws.mu held).
func (ws *workspace) disarm() {
	if ws.alarmStop != nil {
		ws.alarmStop()
		ws.alarmStop = nil
	}
	ws.alarmAt = 0
}

// alarm sends tick to ws when its timer for at fires. at 0 is a retry
// after a failure and always ticks.
func (s *Server) alarm(ws *workspace, at int64) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return
	}
	ws.mu.Lock()
	if at != 0 && ws.alarmAt != at {
		ws.mu.Unlock() // re-armed meanwhile: a newer timer owns the tick
		return
	}
	if now := s.nowMs(); at != 0 && now < at {
		// Early (a clock that moved back): wait again.
		ws.alarmStop = s.cfg.AfterFunc(time.Duration(at-now)*time.Millisecond, func() { s.alarm(ws, at) })
		ws.mu.Unlock()
		return
	}
	ws.alarmStop = nil
	ws.alarmAt = 0
	if at != 0 && ws.eng != nil && !ws.needsReload() {
		next, ok, err := ws.eng.NextAlarm()
		if err == nil && (!ok || next > s.nowMs()) {
			// Nothing is due yet (what this timer was for was released or
			// renewed): no tick, just a timer for what is due next.
			s.arm(ws)
			ws.mu.Unlock()
			return
		}
	}
	a := s.applyLocked(ws, kernel.Command{Op: kernel.OpTick}, []byte("{}"))
	ws.mu.Unlock()
	s.metrics.alarms.Inc()
	if err := a.wait(); err != nil {
		s.log.Error("alarm tick failed; retrying in 1 s", "workspace", ws.name, "err", err)
		ws.mu.Lock()
		if !ws.closed {
			ws.disarm()
			ws.alarmAt = -1
			ws.alarmStop = s.cfg.AfterFunc(time.Second, func() { s.alarm(ws, 0) })
		}
		ws.mu.Unlock()
	}
}
