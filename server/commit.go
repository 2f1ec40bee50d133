package server

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/leaseplane/leaseplane/server/store"
)

// ticket is the promise of one command's commit: done closes when the
// transaction that holds it has committed or failed (err).
type ticket struct {
	done chan struct{}
	err  error
}

type pending struct {
	ws     *workspace
	gen    uint64
	rec    store.Record
	events []byte
	t      *ticket
}

type sunk struct {
	ws     int64
	seq    int64
	events []byte
}

// committer is the one writer: it takes every workspace's changed commands
// in the order they were applied and commits whatever has queued up in one
// transaction, with the queued events in a savepoint.
type committer struct {
	s      *Server
	in     chan pending
	events chan sunk
	done   chan struct{}
}

const (
	maxBatch       = 1024
	maxEventsBatch = 4096
	// EventQueue is how many commands' events wait for the committer before
	// further events are dropped (and counted).
	EventQueue = 16384
)

var errStale = errors.New("an earlier command of this workspace failed to commit, so this one was not kept; retry")

func newCommitter(s *Server) *committer {
	return &committer{
		s:      s,
		in:     make(chan pending, 4096),
		events: make(chan sunk, EventQueue),
		done:   make(chan struct{}),
	}
}

// enqueue hands a changed command to the committer; the caller holds the
// workspace's lock, so the order is the order of application.
func (c *committer) enqueue(ws *workspace, gen uint64, rec store.Record, events []byte) *ticket {
	t := &ticket{done: make(chan struct{})}
	c.in <- pending{ws: ws, gen: gen, rec: rec, events: events, t: t}
	return t
}

// sink queues a command's events for the events table without ever
// blocking: when the queue is full they are dropped and counted.
func (c *committer) sink(ws, seq int64, events []byte) {
	select {
	case c.events <- sunk{ws, seq, events}:
	default:
		c.s.metrics.eventsDropped.Add(float64(countEvents(events)))
	}
}

// stop commits what is queued and ends the committer; no enqueue may
// follow.
func (c *committer) stop() {
	close(c.in)
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	batch := make([]pending, 0, maxBatch)
	var evs []sunk
	for {
		batch = batch[:0]
		evs = evs[:0]
		select {
		case p, ok := <-c.in:
			if !ok {
				c.flushEvents(evs)
				return
			}
			batch = append(batch, p)
		case e := <-c.events:
			evs = append(evs, e)
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case p, ok := <-c.in:
				if !ok {
					c.commit(batch, evs)
					c.flushEvents(nil)
					return
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
	drain:
		for len(evs) < maxEventsBatch {
			select {
			case e := <-c.events:
				evs = append(evs, e)
			default:
				break drain
			}
		}
		c.commit(batch, evs)
	}
}

// flushEvents writes every queued event (at shutdown).
func (c *committer) flushEvents(evs []sunk) {
	for {
	drain:
		for len(evs) < maxEventsBatch {
			select {
			case e := <-c.events:
				evs = append(evs, e)
			default:
				break drain
			}
		}
		if len(evs) == 0 {
			return
		}
		c.commit(nil, evs)
		evs = evs[:0]
	}
}

func (c *committer) commit(batch []pending, evs []sunk) {
	m := c.s.metrics
	// Drop commands applied on a machine that a failed commit has since
	// made stale: they were decided on state that is not on disk.
	keep := batch[:0]
	for _, p := range batch {
		if p.ws.gen.Load() != p.gen {
			p.t.err = errStale
			close(p.t.done)
			m.commitDropped.Inc()
			continue
		}
		keep = append(keep, p)
	}
	batch = keep
	recs := make([]store.Record, len(batch))
	for i := range batch {
		recs[i] = batch[i].rec
	}
	var rows []store.Event
	for _, e := range evs {
		rows = splitEvents(rows, e.ws, e.seq, e.events)
	}
	start := time.Now()
	evErr, err := c.s.store.Commit(recs, rows)
	if len(batch) > 0 {
		m.commitSeconds.Observe(time.Since(start).Seconds())
		m.commitBatch.Observe(float64(len(batch)))
	}
	if err != nil {
		m.commitFailures.Inc()
		c.s.log.Error("commit failed: answering 503 and reloading the workspaces from disk",
			"commands", len(batch), "err", err)
		for _, p := range batch {
			p.ws.gen.CompareAndSwap(p.gen, p.gen+1)
			p.t.err = err
			close(p.t.done)
		}
		if len(rows) > 0 {
			m.eventsDropped.Add(float64(len(rows)))
		}
		return
	}
	for _, p := range batch {
		close(p.t.done)
	}
	if evErr != nil {
		c.s.log.Warn("events not written (commands were)", "events", len(rows), "err", evErr)
		m.eventsDropped.Add(float64(len(rows)))
	} else {
		m.eventsWritten.Add(float64(len(rows)))
	}
	for _, p := range batch {
		if !bytes.Equal(p.events, emptyEvents) {
			c.sink(p.rec.Workspace, p.rec.Seq, p.events)
		}
	}
}

// splitEvents appends one row per event of a kernel Events array. The
// kernel writes canonical JSON: objects without nesting, each starting
// {"type":"T","atMs":N.
func splitEvents(rows []store.Event, ws, seq int64, arr []byte) []store.Event {
	idx := 0
	i := 0
	for i < len(arr) {
		if arr[i] != '{' {
			i++
			continue
		}
		start := i
		inStr := false
		for ; i < len(arr); i++ {
			ch := arr[i]
			if inStr {
				if ch == '\\' {
					i++
				} else if ch == '"' {
					inStr = false
				}
				continue
			}
			if ch == '"' {
				inStr = true
			} else if ch == '}' {
				i++
				break
			}
		}
		obj := arr[start:i]
		typ, at := eventHead(obj)
		rows = append(rows, store.Event{Workspace: ws, Seq: seq, Index: idx, Type: typ, AtMs: at, Body: obj})
		idx++
	}
	return rows
}

// eventHead reads the type and atMs that start a kernel event.
func eventHead(obj []byte) (typ string, at int64) {
	const p1, p2 = `{"type":"`, `","atMs":`
	if !bytes.HasPrefix(obj, []byte(p1)) {
		return "", 0
	}
	rest := obj[len(p1):]
	j := bytes.Index(rest, []byte(p2))
	if j < 0 {
		return "", 0
	}
	typ = string(rest[:j])
	num := rest[j+len(p2):]
	k := 0
	for k < len(num) && (num[k] == '-' || num[k] >= '0' && num[k] <= '9') {
		k++
	}
	at, _ = strconv.ParseInt(string(num[:k]), 10, 64)
	return typ, at
}

func countEvents(arr []byte) int {
	return len(splitEvents(nil, 0, 0, arr))
}
