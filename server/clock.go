package server

import (
	"sync"
	"time"
)

// planeClock is the time the server stamps commands with: the wall clock
// read once, when the server starts, then moved on by a clock that never
// steps. A later step of the system clock (NTP, a resumed VM, an operator
// setting the date) neither expires nor extends a lease: only time that
// really passed does. It starts no lower than the newest stamp on disk, so
// a wall clock that is behind at a restart cannot run the plane's time
// backwards either (the kernel would hold its own time then, but alarms
// and new leases would be computed from the lower one).
type planeClock struct {
	anchorMs int64 // the plane's time at the anchor
	wallAt   time.Time
	mono     func() time.Duration // nil: wallAt's monotonic reading (time.Now carries one)
	monoAt   time.Duration

	mu   sync.Mutex
	last int64 // the highest time handed out; now never answers below it
}

// newPlaneClock anchors the plane's time to wall() now, and to at least
// floorMs (the newest stamp on disk).
func newPlaneClock(wall func() time.Time, mono func() time.Duration, floorMs int64) *planeClock {
	c := &planeClock{wallAt: wall(), mono: mono}
	if mono != nil {
		c.monoAt = mono()
	}
	c.anchorMs = max(c.wallAt.UnixMilli(), floorMs)
	c.last = c.anchorMs
	return c
}

// elapsed is the time since the anchor by the clock that does not step.
func (c *planeClock) elapsed(wall func() time.Time) time.Duration {
	if c.mono != nil {
		return c.mono() - c.monoAt
	}
	// With both readings from time.Now, Sub uses their monotonic parts.
	return wall().Sub(c.wallAt)
}

// nowMs is the plane's time in Unix milliseconds; it never goes back.
func (c *planeClock) nowMs(wall func() time.Time) int64 {
	t := c.anchorMs + c.elapsed(wall).Milliseconds()
	c.mu.Lock()
	defer c.mu.Unlock()
	if t < c.last {
		t = c.last
	}
	c.last = t
	return t
}
