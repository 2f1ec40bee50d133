// Package servertest holds what tests of the server and of its callers
// share. It is imported only by _test files.
package servertest

import (
	"sync"
	"time"
)

// Start is the time a Clock starts at: 2027-01-15, far from any epoch edge.
var Start = time.UnixMilli(1_800_000_000_000)

// Clock is a server clock and timer source that moves only when a test
// says: pass Now as server.Config.Clock and AfterFunc as
// server.Config.AfterFunc, then Advance. Safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time     // the time that really passed, from Start
	wall   time.Duration // how far StepWall has set the wall clock off now
	timers []*timer
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

// NewClock returns a Clock at Start.
func NewClock() *Clock { return &Clock{now: Start} }

// Now is the wall clock's time: the time that passed, plus every
// StepWall.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now.Add(c.wall)
}

// Monotonic is a clock that never steps: the time Advance has moved on
// since Start. Pass it as server.Config.Monotonic with Now as Clock to let
// StepWall step the wall clock alone.
func (c *Clock) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now.Sub(Start)
}

// StepWall sets the wall clock d off (an NTP step, a resumed VM): Now
// moves, Monotonic and the timers do not.
func (c *Clock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall += d
}

// AfterFunc arms f to run when Advance passes d from now, and returns a
// function that disarms it, reporting whether it was still armed (as
// time.Timer.Stop does).
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock by d and runs, in time order and outside the
// clock's lock, every armed timer now due, including those armed by the
// timers it runs.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *timer
		keep := c.timers[:0]
		for _, t := range c.timers {
			if t.stopped {
				continue
			}
			keep = append(keep, t)
			if !t.at.After(c.now) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		c.timers = keep
		if next != nil {
			next.stopped = true
		}
		c.mu.Unlock()
		if next == nil {
			return
		}
		next.f()
	}
}
