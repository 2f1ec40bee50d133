package kernel

import (
	"fmt"
	"slices"
)

// CheckInvariants checks the machine's internal consistency: the
// invariants every command must keep. Tests call it after each command.
func (m *Machine) CheckInvariants() error {
	seenTimers := 0
	nleases, nwaiters, nasks := 0, 0, 0
	agentAsks := map[*agent]int{}
	fences := map[int64]bool{}
	if m.index.len() != len(m.resources) {
		return fmt.Errorf("index holds %d names, map %d", m.index.len(), len(m.resources))
	}
	prev := ""
	var err error
	m.index.from("", func(res *resource) bool {
		if res.name <= prev && prev != "" {
			err = fmt.Errorf("index out of order: %q after %q", res.name, prev)
			return false
		}
		prev = res.name
		if m.resources[res.name] != res {
			err = fmt.Errorf("index holds %q, which the map does not", res.name)
			return false
		}
		return true
	})
	if err != nil {
		return err
	}
	for name, res := range m.resources {
		if res.name != name {
			return fmt.Errorf("resource %q filed under %q", res.name, name)
		}
		if res.shared != m.rules.shared(name) {
			return fmt.Errorf("%s: class does not follow the rules", name)
		}
		if len(res.leases) == 0 && len(res.waiters) == 0 {
			return fmt.Errorf("%s: idle resource not forgotten", name)
		}
		var last int64
		holders := map[*agent]bool{}
		for i, l := range res.leases {
			nleases++
			if l.fence <= last || l.fence > m.fence || (fences[l.fence] && m.sem >= 2 && !m.upgraded) {
				return fmt.Errorf("%s: fence %d out of order, above the counter %d or used twice", name, l.fence, m.fence)
			}
			last = l.fence
			fences[l.fence] = true
			if holders[l.owner] {
				return fmt.Errorf("%s: %s holds two leases", name, l.owner.did)
			}
			holders[l.owner] = true
			if l.at <= m.now {
				return fmt.Errorf("%s: lease of %s expired at %d but now is %d", name, l.owner.did, l.at, m.now)
			}
			if l.id != leaseID(name, l.fence) {
				return fmt.Errorf("%s: lease id %s is not derived from fence %d", name, l.id, l.fence)
			}
			for _, o := range res.leases[i+1:] {
				if res.conflicts(l.mode, o.mode) {
					return fmt.Errorf("%s: conflicting holders %s (%s) and %s (%s)", name, l.owner.did, l.mode, o.owner.did, o.mode)
				}
			}
			if a := m.agents[l.owner.did]; a != l.owner || a.suspended {
				return fmt.Errorf("%s: holder %s is unknown or suspended", name, l.owner.did)
			}
			found := false
			for _, o := range l.owner.leases {
				found = found || o == l
			}
			if !found {
				return fmt.Errorf("%s: lease missing from its agent's leases", name)
			}
			if l.idx < 0 || l.idx >= len(m.timers) || m.timers[l.idx] != &l.timer {
				return fmt.Errorf("%s: lease timer not in the heap", name)
			}
			seenTimers++
		}
		waiters := map[*agent]bool{}
		for _, w := range res.waiters {
			nwaiters++
			if waiters[w.owner] {
				return fmt.Errorf("%s: %s waits twice", name, w.owner.did)
			}
			waiters[w.owner] = true
			lapse := w.lastAsk + WaiterTTLMs
			if w.ask != nil {
				lapse = w.ask.until + WaiterTTLMs
				k := w.ask
				if k.ended || m.asks[k.id] != k || k.waiter != w || k.until <= m.now || w.claimEnd != k.until ||
					k.idx < 0 || k.idx >= len(m.timers) || m.timers[k.idx] != &k.timer || !slices.Contains(res.asks, k) {
					return fmt.Errorf("%s: held ask %s of %s inconsistent", name, k.id, w.owner.did)
				}
				seenTimers++
				nasks++
				agentAsks[w.owner]++
			}
			if w.at != lapse || w.at <= m.now {
				return fmt.Errorf("%s: waiter %s should have lapsed (at %d, now %d)", name, w.owner.did, w.at, m.now)
			}
			a := m.agents[w.owner.did]
			if a != w.owner || a.suspended {
				return fmt.Errorf("%s: waiter %s unknown or suspended", name, w.owner.did)
			}
			found := false
			for _, q := range a.waits {
				found = found || q == w
			}
			if !found {
				return fmt.Errorf("%s: waiter %s missing from its agent's waits", name, w.owner.did)
			}
			if w.idx < 0 || w.idx >= len(m.timers) || m.timers[w.idx] != &w.timer {
				return fmt.Errorf("%s: waiter timer not in the heap", name)
			}
			seenTimers++
			inHeap := w.claim.idx >= 0
			if inHeap != (w.claimUntil() > m.now && w.ask == nil) {
				return fmt.Errorf("%s: claim timer of %s in heap %v, claim ends %d, now %d", name, w.owner.did, inHeap, w.claimUntil(), m.now)
			}
			if inHeap {
				if w.claim.idx >= len(m.timers) || m.timers[w.claim.idx] != &w.claim || w.claim.at != w.claimUntil() {
					return fmt.Errorf("%s: claim timer of %s misplaced", name, w.owner.did)
				}
				seenTimers++
			}
		}
	}
	if nasks != len(m.asks) {
		return fmt.Errorf("%d held asks on waiters, %d in the machine", nasks, len(m.asks))
	}
	for _, a := range m.agents {
		if a.nasks != agentAsks[a] {
			return fmt.Errorf("%s: counts %d asks, holds %d", a.did, a.nasks, agentAsks[a])
		}
	}
	for name, res := range m.resources {
		for i, k := range res.asks {
			if k.waiter.res != res || (i > 0 && res.asks[i-1].waiter.seq >= k.waiter.seq) {
				return fmt.Errorf("%s: asks out of queue order", name)
			}
		}
		if res.dirty {
			return fmt.Errorf("%s: left dirty", name)
		}
	}
	if nleases != m.nleases || nwaiters != m.nwaiters {
		return fmt.Errorf("counts: %d leases, %d waiters; counters say %d, %d", nleases, nwaiters, m.nleases, m.nwaiters)
	}
	if seenTimers != len(m.timers) {
		return fmt.Errorf("heap holds %d timers, state has %d", len(m.timers), seenTimers)
	}
	for i := 1; i < len(m.timers); i++ {
		if m.timers[i].less(m.timers[(i-1)/2]) {
			return fmt.Errorf("heap order broken at %d", i)
		}
	}
	for did, a := range m.agents {
		if a.did != did {
			return fmt.Errorf("agent %q filed under %q", a.did, did)
		}
		if a.idle() {
			return fmt.Errorf("%s: idle agent with trust 0 not forgotten", did)
		}
		for i, w := range a.waits {
			if i > 0 && a.waits[i-1].res.name >= w.res.name {
				return fmt.Errorf("%s: waits out of name order", a.did)
			}
			if w.res.waiterOf(a) != w || m.resources[w.res.name] != w.res {
				return fmt.Errorf("%s: waits on %s but is not in its queue", a.did, w.res.name)
			}
		}
		for _, l := range a.leases {
			if m.resources[l.res.name] != l.res || l.res.leaseOf(a) != l {
				return fmt.Errorf("%s: holds a lease on %s that its resource does not list", a.did, l.res.name)
			}
		}
	}
	return nil
}
