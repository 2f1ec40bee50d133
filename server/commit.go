package server

import (
	"errors"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// ticket is the promise of one command's commit: done closes when the
// transaction that holds it has committed or failed (err). A lazy ticket
// is a command whose answer no one waits for (see lazy): whoever blocks
// on it calls wait, which asks the committer to commit now.
type ticket struct {
	done chan struct{}
	err  error
	urge chan struct{} // the committer's, for a lazy ticket; nil otherwise
}

// wait blocks until t's commit is done and reports its failure; on a lazy
// ticket it first asks the committer not to hold the commit back.
func (t *ticket) wait() error {
	if t.urge != nil {
		select {
		case <-t.done:
			return t.err
		default:
		}
		select {
		case t.urge <- struct{}{}:
		default: // already asked
		}
	}
	<-t.done
	return t.err
}

type pending struct {
	ws     *workspace
	gen    uint64
	rec    store.Record
	events []kernel.Event
	t      *ticket
	lazy   bool
}

// committer is the one writer of the command log: it takes every
// workspace's changed commands in the order they were applied and commits
// whatever has queued up in one transaction.
type committer struct {
	s    *Server
	in   chan pending
	urge chan struct{} // a lazy ticket is waited for: commit now
	done chan struct{}
	// lazyDelay bounds how long lazy commands wait for a commit to join
	// (tests set it before the first command).
	lazyDelay time.Duration
}

const maxBatch = 1024

var errStale = errors.New("an earlier command of this workspace failed to commit, so this one was not kept; retry")

func newCommitter(s *Server) *committer {
	return &committer{s: s, in: make(chan pending, 4096), urge: make(chan struct{}, 1), done: make(chan struct{}), lazyDelay: lazyDelay}
}

// enqueue hands a changed command to the committer; the caller holds the
// workspace's lock, so the order is the order of application.
//
// lazy marks a command whose commit no answer waits for: a held acquire
// that made an ask and answered nothing (its request is answered only by
// a later step, whose commit, coming after it in the log, makes it
// durable too), with no events. Its commit is not started for it alone:
// it joins the next commit that someone waits for, or goes after
// lazyDelay, or at once when its ticket is waited for (ticket.wait). So
// a release does not find a commit under way that only held asks need.
func (c *committer) enqueue(ws *workspace, gen uint64, rec store.Record, events []kernel.Event, lazy bool) *ticket {
	t := &ticket{done: make(chan struct{})}
	if lazy {
		t.urge = c.urge
	}
	c.in <- pending{ws: ws, gen: gen, rec: rec, events: events, t: t, lazy: lazy}
	return t
}

// lazyDelay bounds how long a lazy command waits for a commit to join.
const lazyDelay = 2 * time.Millisecond

// stop commits what is queued and ends the committer; no enqueue may
// follow.
func (c *committer) stop() {
	close(c.in)
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	batch := make([]pending, 0, maxBatch)
	answered := 0             // commands the last commit answered
	var lastDur time.Duration // how long the last commit took
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		p, ok := <-c.in
		if !ok {
			return
		}
		var closed bool
		batch, closed = c.collect(append(batch[:0], p), maxBatch, nil)
		if !closed && allLazy(batch) {
			batch, closed = c.holdLazy(batch, timer)
		}
		// Group commit delay: the clients the last commit answered are
		// likely to send their next command at once. Waiting a little for
		// them (at most half the last commit's time, and never more than
		// maxCommitDelay) lets one fsync serve them too, instead of
		// starting a commit with a part of them and making the rest wait
		// for the whole of the next.
		if want := len(batch) + answered; !closed && answered > 1 && len(batch) < want && lastDur > 0 {
			timer.Reset(min(lastDur/2, maxCommitDelay))
			batch, closed = c.collect(batch, min(want, maxBatch), timer.C)
			stopTimer(timer)
		}
		start := time.Now()
		answered = c.commit(batch)
		lastDur = time.Since(start)
		if closed {
			return
		}
	}
}

// allLazy reports whether no command of batch is waited for.
func allLazy(batch []pending) bool {
	for _, p := range batch {
		if !p.lazy {
			return false
		}
	}
	return true
}

// holdLazy holds back a batch of lazy commands (enqueue) until a command
// that is waited for arrives, a lazy ticket is waited for, or lazyDelay
// passes; it adds what arrives meanwhile.
func (c *committer) holdLazy(batch []pending, timer *time.Timer) (_ []pending, closed bool) {
	timer.Reset(c.lazyDelay)
	defer stopTimer(timer)
	for len(batch) < maxBatch {
		select {
		case p, ok := <-c.in:
			if !ok {
				return batch, true
			}
			batch = append(batch, p)
			if !p.lazy {
				return c.collect(batch, maxBatch, nil)
			}
		case <-c.urge:
			return c.collect(batch, maxBatch, nil)
		case <-timer.C:
			return c.collect(batch, maxBatch, nil)
		}
	}
	return batch, false
}

// stopTimer stops t and drains a fire that came meanwhile.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}

// collect adds commands from c.in to batch until it holds n: with wait
// nil only those already queued, else also those that come before wait
// fires. closed reports that c.in was closed.
func (c *committer) collect(batch []pending, n int, wait <-chan time.Time) (_ []pending, closed bool) {
	for len(batch) < n {
		var p pending
		ok := true
		if wait == nil {
			select {
			case p, ok = <-c.in:
			default:
				return batch, false
			}
		} else {
			select {
			case p, ok = <-c.in:
			case <-wait:
				return batch, false
			}
		}
		if !ok {
			return batch, true
		}
		batch = append(batch, p)
	}
	return batch, false
}

// maxCommitDelay bounds the group commit delay.
const maxCommitDelay = time.Millisecond

// commit writes batch in one transaction and answers its commands; it
// returns how many of those waited for (not lazy) it answered with
// success.
func (c *committer) commit(batch []pending) int {
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
	if len(batch) == 0 {
		return 0
	}
	recs := make([]store.Record, len(batch))
	for i := range batch {
		recs[i] = batch[i].rec
	}
	start := time.Now()
	err := c.s.store.Commit(recs)
	m.commitSeconds.Observe(time.Since(start).Seconds())
	m.commitBatch.Observe(float64(len(batch)))
	if err != nil {
		m.commitFailures.Inc()
		c.s.log.Error("commit failed: answering 503 and reloading the workspaces from disk",
			"commands", len(batch), "err", err)
		for _, p := range batch {
			p.ws.gen.CompareAndSwap(p.gen, p.gen+1)
			p.t.err = err
			close(p.t.done)
		}
		return 0
	}
	if l := c.s.ledger; l != nil {
		// Before the answers leave: a receipt asked for right after a grant
		// knows the ledger is to have it.
		for _, p := range batch {
			l.Notify(p.rec.Workspace, p.rec.Seq, p.events)
		}
	}
	for _, p := range batch {
		// Before the answers leave, like the ledger: a client answered a
		// change can already see its event on a stream.
		c.s.hub.publish(p.rec.Workspace, p.rec.Seq, p.events)
	}
	urgent := 0
	for _, p := range batch {
		close(p.t.done)
		if !p.lazy {
			urgent++
		}
	}
	if c.s.ledger == nil {
		// Without a ledger, the events table keeps the events; with one,
		// the ledger holds the same events (byte for byte, signed), and a
		// second copy would only cost the commits' CPU.
		for _, p := range batch {
			if len(p.events) > 0 && !store.IsDrillWorkspace(p.ws.name) {
				c.s.events.sink(p.rec.Workspace, p.rec.Seq, p.events)
			}
		}
	}
	return urgent
}

// eventSink writes kernel events to the events table from a bounded queue
// that never blocks a command: when the queue is full the events are
// dropped and counted. It has its own goroutine and its own database file,
// so it never delays a commit.
type eventSink struct {
	s    *Server
	in   chan sunk
	done chan struct{}
}

type sunk struct {
	ws     int64
	seq    int64
	events []kernel.Event
}

// EventQueue is how many commands' events wait for the sink before further
// events are dropped (and counted).
const EventQueue = 16384

const maxEventsBatch = 4096

func newEventSink(s *Server) *eventSink {
	return &eventSink{s: s, in: make(chan sunk, EventQueue), done: make(chan struct{})}
}

// sink queues a command's events without ever blocking.
func (e *eventSink) sink(ws, seq int64, events []kernel.Event) {
	select {
	case e.in <- sunk{ws, seq, events}:
	default:
		e.s.metrics.eventsDropped.Add(float64(len(events)))
	}
}

// stop writes what is queued and ends the sink; no sink call may follow.
func (e *eventSink) stop() {
	close(e.in)
	<-e.done
}

func (e *eventSink) run() {
	defer close(e.done)
	var rows []store.Event
	for {
		x, ok := <-e.in
		if !ok {
			return
		}
		rows = appendRows(rows[:0], x)
	fill:
		for len(rows) < maxEventsBatch {
			select {
			case x, ok := <-e.in:
				if !ok {
					break fill
				}
				rows = appendRows(rows, x)
			default:
				break fill
			}
		}
		if err := e.s.store.AppendEvents(rows); err != nil {
			e.s.log.Warn("events not written (the commands were)", "events", len(rows), "err", err)
			e.s.metrics.eventsDropped.Add(float64(len(rows)))
		} else {
			e.s.metrics.eventsWritten.Add(float64(len(rows)))
		}
	}
}

// appendRows appends one events-table row per event of x.
func appendRows(rows []store.Event, x sunk) []store.Event {
	for i, e := range x.events {
		rows = append(rows, store.Event{Workspace: x.ws, Seq: x.seq, Index: i, Type: e.Type, AtMs: e.AtMs, Body: e.JSON})
	}
	return rows
}
