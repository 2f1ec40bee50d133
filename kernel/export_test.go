package kernel

import "fmt"

// CheckInvariants checks the machine's internal consistency: the
// invariants every command must keep. Tests call it after each command.
func (m *Machine) CheckInvariants() error {
	seenTimers := 0
	for name, res := range m.resources {
		if res.name != name {
			return fmt.Errorf("resource %q filed under %q", res.name, name)
		}
		if res.shared != m.rules.shared(name) {
			return fmt.Errorf("%s: class does not follow the rules", name)
		}
		var last int64
		holders := map[string]bool{}
		for i, l := range res.leases {
			if l.fence <= last || l.fence > res.fence {
				return fmt.Errorf("%s: fences out of order or above the counter: %d after %d (counter %d)", name, l.fence, last, res.fence)
			}
			last = l.fence
			if holders[l.holder] {
				return fmt.Errorf("%s: %s holds two leases", name, l.holder)
			}
			holders[l.holder] = true
			if l.at <= m.now {
				return fmt.Errorf("%s: lease of %s expired at %d but now is %d", name, l.holder, l.at, m.now)
			}
			if l.id != leaseID(name, l.fence) {
				return fmt.Errorf("%s: lease id %s is not derived from fence %d", name, l.id, l.fence)
			}
			for _, o := range res.leases[i+1:] {
				if res.conflicts(l.mode, o.mode) {
					return fmt.Errorf("%s: conflicting holders %s (%s) and %s (%s)", name, l.holder, l.mode, o.holder, o.mode)
				}
			}
			if a := m.agents[l.holder]; a == nil || a.suspended {
				return fmt.Errorf("%s: holder %s is unknown or suspended", name, l.holder)
			}
			if l.idx < 0 || l.idx >= len(m.timers) || m.timers[l.idx] != &l.timer {
				return fmt.Errorf("%s: lease timer not in the heap", name)
			}
			seenTimers++
		}
		waiters := map[string]bool{}
		for _, w := range res.waiters {
			if waiters[w.actor] {
				return fmt.Errorf("%s: %s waits twice", name, w.actor)
			}
			waiters[w.actor] = true
			if w.at != w.lastAsk+WaiterTTLMs || w.at <= m.now {
				return fmt.Errorf("%s: waiter %s should have lapsed (at %d, now %d)", name, w.actor, w.at, m.now)
			}
			a := m.agents[w.actor]
			if a == nil || a.suspended {
				return fmt.Errorf("%s: waiter %s unknown or suspended", name, w.actor)
			}
			found := false
			for _, q := range a.waits {
				found = found || q == w
			}
			if !found {
				return fmt.Errorf("%s: waiter %s missing from its agent's waits", name, w.actor)
			}
			if w.idx < 0 || w.idx >= len(m.timers) || m.timers[w.idx] != &w.timer {
				return fmt.Errorf("%s: waiter timer not in the heap", name)
			}
			seenTimers++
		}
	}
	if seenTimers != len(m.timers) {
		return fmt.Errorf("heap holds %d timers, state has %d", len(m.timers), seenTimers)
	}
	for i := 1; i < len(m.timers); i++ {
		if m.timers[i].less(m.timers[(i-1)/2]) {
			return fmt.Errorf("heap order broken at %d", i)
		}
	}
	for _, a := range m.agents {
		var lastSeq uint64
		for _, w := range a.waits {
			if w.seq <= lastSeq {
				return fmt.Errorf("%s: waits out of order", a.did)
			}
			lastSeq = w.seq
			if w.res.waiterOf(a.did) != w {
				return fmt.Errorf("%s: waits on %s but is not in its queue", a.did, w.res.name)
			}
		}
	}
	return nil
}
