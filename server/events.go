package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/store"
)

// RouteEvents streams a workspace's events as Server-Sent Events.
const RouteEvents = api.PathEvents

// The events stream (GET RouteEvents) sends a workspace's events as they
// are committed: the committer hands every committed command's events to
// the hub (publish) right after the commit and before the answers leave,
// so a client that was answered a change can already see its event. The
// bytes of each event are the ones the kernel emitted, which are also the
// bytes of its ledger entry, and its SSE id is its ledger index: the
// number of events the workspace emitted before it. The hub counts that
// index itself from the command log (the ledger's position plus the
// events logged after it), so the stream never waits for the ledger's
// writer, which is best effort.
//
// A workspace's hub state is made on its first stream (load), and kept:
// from then on every committed command's events are numbered and the last
// eventRing of them kept in memory for resuming (Last-Event-ID). Older
// indexes are read from the ledger; 410 when retention dropped them.

// eventRing is how many recent events a workspace keeps for resuming.
const eventRing = 4096

// eventSubBuffer is how many events a stream may fall behind before it
// is ended (the client resumes with Last-Event-ID).
const eventSubBuffer = 1024

// eventPing is the cadence of keep-alive comments, at which the stream's
// key is also checked again (a revoked key ends it).
const eventPing = 15 * time.Second

type streamEvent struct {
	index    int64
	data     []byte
	typ      string
	actor    string
	resource string
	hasRes   bool
}

type committedEvents struct {
	seq    int64
	events []kernel.Event
}

type eventSub struct {
	ch   chan streamEvent
	over chan struct{} // closed when the stream fell too far behind
	once sync.Once
}

type wsEvents struct {
	state   int // 0 not counted yet, 1 loading, 2 counted
	ready   chan struct{}
	err     error
	pending []committedEvents // published while loading
	next    int64             // the ledger index of the next event
	ring    []streamEvent     // the newest events, oldest first
	subs    map[*eventSub]struct{}
}

type eventHub struct {
	mu  sync.Mutex
	wss map[int64]*wsEvents
}

func parseEvent(index int64, data []byte) streamEvent {
	var f struct {
		Type     string  `json:"type"`
		ActorDid string  `json:"actorDid"`
		Resource *string `json:"resource"`
	}
	json.Unmarshal(data, &f)
	e := streamEvent{index: index, data: data, typ: f.Type, actor: f.ActorDid}
	if f.Resource != nil {
		e.resource, e.hasRes = *f.Resource, true
	}
	return e
}

// add numbers and keeps one command's events and sends them to the
// streams; h.mu is held.
func (w *wsEvents) add(events []kernel.Event) {
	for _, ev := range events {
		e := parseEvent(w.next, ev.JSON)
		w.next++
		w.keep(e)
		for sub := range w.subs {
			select {
			case sub.ch <- e:
			default:
				sub.once.Do(func() { close(sub.over) })
				delete(w.subs, sub)
			}
		}
	}
}

func (w *wsEvents) keep(e streamEvent) {
	if len(w.ring) >= eventRing {
		n := copy(w.ring, w.ring[len(w.ring)-eventRing/2:])
		w.ring = w.ring[:n]
	}
	w.ring = append(w.ring, e)
}

// publish hands the events of committed commands to the workspace's
// streams. It never blocks on a stream.
func (h *eventHub) publish(ws, seq int64, events []kernel.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.wss[ws]
	if w == nil {
		return
	}
	switch w.state {
	case 1:
		w.pending = append(w.pending, committedEvents{seq: seq, events: events})
	case 2:
		w.add(events)
	}
}

// load counts a workspace's events (once) and returns its state.
func (s *Server) loadEvents(ctx context.Context, ws int64) (*wsEvents, error) {
	h := &s.hub
	h.mu.Lock()
	w := h.wss[ws]
	if w == nil {
		w = &wsEvents{subs: map[*eventSub]struct{}{}}
		h.wss[ws] = w
	}
	if w.state == 2 {
		h.mu.Unlock()
		return w, nil
	}
	if w.state == 1 {
		ready := w.ready
		h.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return s.loadEvents(ctx, ws)
	}
	w.state, w.ready, w.err = 1, make(chan struct{}), nil
	h.mu.Unlock()

	// Every command committed from now on is in pending; those committed
	// before are in the log, read below.
	var pos store.LedgerPos
	var err error
	if s.ledger != nil {
		pos, _, err = s.store.LedgerPos(ctx, ws)
	}
	next, seq := pos.Size, pos.Seq
	var ring []streamEvent
	for err == nil {
		var rows []store.LoggedEvents
		rows, err = s.store.LogEvents(ctx, ws, seq, 1000)
		for _, r := range rows {
			seq = r.Seq
			if !r.Known || len(r.Events) == 0 {
				continue
			}
			err = kernel.ScanArray(r.Events, func(ev []byte) error {
				ring = append(ring, parseEvent(next, append([]byte(nil), ev...)))
				if len(ring) > eventRing {
					ring = ring[len(ring)-eventRing:]
				}
				next++
				return nil
			})
		}
		if len(rows) < 1000 {
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	close(w.ready)
	if err != nil {
		w.state, w.pending = 0, nil
		return nil, err
	}
	w.next, w.ring, w.state = next, ring, 2
	for _, p := range w.pending {
		if p.seq > seq {
			w.add(p.events)
		}
	}
	w.pending = nil
	return w, nil
}

// eventFilter is what a stream shows.
type eventFilter struct {
	actor, prefix string
}

func (f eventFilter) match(e streamEvent) bool {
	if f.actor != "" && e.actor != f.actor {
		return false
	}
	if f.prefix != "" && (!e.hasRes || !strings.HasPrefix(e.resource, f.prefix)) {
		return false
	}
	return true
}

// events answers GET RouteEvents, behind keyed (which read the body to its
// end, lifting the body deadline).
func (s *Server) eventsRoute(w http.ResponseWriter, r *http.Request, k store.Key, q api.Query, _ []byte) {
	key, _ := api.BearerKey(r.Header.Get("Authorization")) // checked again on every ping
	er, no := api.ParseEvents(apiKey(k), q, r.Header.Get("Last-Event-ID"))
	if no != nil {
		writeReply(w, fromAPI(*no))
		return
	}
	f, after := eventFilter{actor: er.ActorDid, prefix: er.Prefix}, er.After
	if _, err := s.workspace(k.WorkspaceID); err != nil {
		writeReply(w, unavailable(err))
		return
	}
	we, err := s.loadEvents(r.Context(), k.WorkspaceID)
	if err != nil {
		writeReply(w, unavailable(err))
		return
	}
	sub := &eventSub{ch: make(chan streamEvent, eventSubBuffer), over: make(chan struct{})}
	s.hub.mu.Lock()
	next := we.next
	var backlog []streamEvent
	from := next // the first index the backlog has
	if after >= 0 {
		if after >= next {
			s.hub.mu.Unlock()
			writeReply(w, refusal(400, kernel.ReasonInvalid, "Last-Event-ID "+strconv.FormatInt(after, 10)+
				" is not an event of this workspace (its newest is "+strconv.FormatInt(next-1, 10)+")"))
			return
		}
		for _, e := range we.ring {
			if e.index > after {
				backlog = append(backlog, e)
			}
		}
		if len(backlog) > 0 {
			from = backlog[0].index
		}
	}
	we.subs[sub] = struct{}{}
	s.hub.mu.Unlock()
	defer func() {
		s.hub.mu.Lock()
		delete(we.subs, sub)
		s.hub.mu.Unlock()
	}()
	if after >= 0 && after+1 < from {
		// Older than the ring: the ledger has them, unless retention
		// dropped them (410) or its writer is behind (503: retry).
		old, rep, ok := s.oldEvents(r.Context(), k.WorkspaceID, after+1, from)
		if !ok {
			writeReply(w, rep)
			return
		}
		backlog = append(old, backlog...)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = noSniff
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(200)
	rc := http.NewResponseController(w)
	var buf []byte
	// ready says the stream is live: every event from index next on will
	// follow (and, on a resume, the backlog first).
	buf = append(buf, "retry: 1000\nevent: ready\ndata: {\"ok\":true,\"next\":"...)
	buf = strconv.AppendInt(buf, next, 10)
	buf = append(buf, "}\n\n"...)
	for _, e := range backlog {
		if f.match(e) {
			buf = appendSSE(buf, e)
		}
	}
	if _, err := w.Write(buf); err != nil {
		return
	}
	rc.Flush()
	ping := time.NewTicker(eventPing)
	defer ping.Stop()
	for {
		select {
		case e := <-sub.ch:
			buf = buf[:0]
			if f.match(e) {
				buf = appendSSE(buf, e)
			}
		drain:
			for {
				select {
				case e := <-sub.ch:
					if f.match(e) {
						buf = appendSSE(buf, e)
					}
				default:
					break drain
				}
			}
			if len(buf) == 0 {
				continue
			}
			if _, err := w.Write(buf); err != nil {
				return
			}
			rc.Flush()
		case <-ping.C:
			if _, rep, ok := s.authenticateLive(r.Context(), key); !ok {
				w.Write([]byte("event: end\ndata: " + string(rep.answer) + "\n\n"))
				return
			}
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			rc.Flush()
		case <-sub.over:
			w.Write([]byte("event: end\ndata: {\"ok\":false,\"reason\":\"limit_exceeded\",\"error\":\"the stream fell too far behind; resume with Last-Event-ID\"}\n\n"))
			return
		case <-s.draining:
			w.Write([]byte("event: end\ndata: {\"ok\":false,\"reason\":\"unavailable\",\"error\":\"the server is shutting down\"}\n\n"))
			return
		case <-r.Context().Done():
			return
		}
	}
}

func appendSSE(b []byte, e streamEvent) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.index, 10)
	b = append(b, "\nevent: "...)
	b = append(b, e.typ...)
	b = append(b, "\ndata: "...)
	b = append(b, e.data...)
	return append(b, "\n\n"...)
}

// oldEvents reads events [from, to) from the ledger.
func (s *Server) oldEvents(ctx context.Context, ws, from, to int64) ([]streamEvent, reply, bool) {
	if s.ledger == nil {
		return nil, refusal(410, api.ReasonGone, "events before "+strconv.FormatInt(to, 10)+" are no longer kept (this server runs without a ledger)"), false
	}
	var out []streamEvent
	for from < to {
		n := int(min(to-from, 1000))
		es, err := s.store.LedgerEntries(ctx, ws, from, n)
		var gone *store.GoneError
		switch {
		case errors.As(err, &gone):
			return nil, refusal(410, api.ReasonGone, gone.Error()), false
		case err != nil:
			return nil, unavailable(err), false
		case len(es) == 0:
			return nil, unavailable(errors.New("the ledger has not caught up with event " + strconv.FormatInt(from, 10) + " yet")), false
		}
		for _, e := range es {
			out = append(out, parseEvent(e.Index, e.Data))
		}
		from += int64(len(es))
	}
	return out, reply{}, true
}
