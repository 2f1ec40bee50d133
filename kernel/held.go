package kernel

import (
	"slices"
	"sort"
	"strconv"
)

// Held asks (semantics 3): an acquire with waitUpToMs whose verdict is
// lease_held is kept instead of answered, and answered in the command
// during which it ends (docs/SEMANTICS.md, "Held asks"). This file keeps
// them: making, deciding again, ending and cancelling.

// ask is a held ask. Its waiter w is the asker's place in the queue of
// w.res; its timer is its untilMs.
type ask struct {
	timer
	id    string
	n     uint64 // the counter it took: the order asks were made
	until int64
	ended bool
}

// askMark is a held ask that ended during the command being applied: its
// answer's status and bytes in Machine.askBytes.
type askMark struct {
	id            string
	status, retry int
	start, end    int
}

// holdAsk makes w's request a held ask until until: w keeps a claim (while
// admitted) for as long as it is held and does not lapse before until +
// WaiterTTLMs.
func (m *Machine) holdAsk(w *waiter, until int64) {
	m.askSeq++
	k := &ask{id: "ask_" + strconv.FormatUint(m.askSeq, 10), n: m.askSeq, until: until}
	k.timer = timer{at: until, res: w.res, waiter: w, kind: timerAsk, idx: -1}
	w.ask = k
	m.asks[k.id] = k
	w.owner.nasks++
	res := w.res
	i := sort.Search(len(res.asks), func(i int) bool { return res.asks[i].waiter.seq > w.seq })
	res.asks = slices.Insert(res.asks, i, k)
	m.timers.push(&k.timer)
	w.heldAt, w.waitMs = m.now, m.backoffOf(w)
	w.lastAsk = m.now
	w.at = until + WaiterTTLMs
	if w.idx < 0 {
		m.timers.push(&w.timer)
	} else {
		m.timers.fix(&w.timer)
	}
	m.setClaim(w, until)
	m.askMade = k.id
	m.changed = true
}

// backoffOf is the back-off of w's place (semantics 3) or of the number
// of waiters (semantics 2).
func (m *Machine) backoffOf(w *waiter) int64 {
	if m.sem >= 3 {
		return BackoffMs(slices.Index(w.res.waiters, w) + 1)
	}
	return BackoffMs(len(w.res.waiters))
}

// overAskLimit checks the asks limits for a new held ask of a.
func (m *Machine) overAskLimit(a *agent) (Result, bool) {
	lim := m.rules.Limits
	if int64(len(m.asks)+1) > lim.Asks {
		return limitResult("asks", lim.Asks, "held asks"), true
	}
	if a != nil && int64(a.nasks+1) > lim.AsksPerAgent {
		return limitResult("asksPerAgent", lim.AsksPerAgent, "held asks of one agent"), true
	}
	return Result{}, false
}

// detachAsk takes k out of the machine's asks; its waiter stays.
func (m *Machine) detachAsk(k *ask) {
	if k.ended {
		return
	}
	k.ended = true
	m.changed = true
	w := k.waiter
	delete(m.asks, k.id)
	if i := slices.Index(w.res.asks, k); i >= 0 {
		w.res.asks = slices.Delete(w.res.asks, i, i+1)
	}
	w.owner.nasks--
	m.timers.remove(&k.timer)
	w.ask = nil
}

// endAsk ends k with the answer r. With stay its asker stays a waiter and
// this moment counts as a lease_held answer to it.
func (m *Machine) endAsk(k *ask, r Result, stay bool) {
	m.detachAsk(k)
	start := len(m.askBytes)
	m.askBytes = append(m.askBytes, r.Answer...)
	m.askMarks = append(m.askMarks, askMark{id: k.id, status: r.Status, retry: r.RetryAfterSec, start: start, end: len(m.askBytes)})
	m.ans = r.Answer[:0]
	if stay {
		m.heldMoment(k.waiter)
	}
}

// markDirty notes that the asks held on res are to be decided again
// (a lease there ended or changed mode, or a claim there ended). Nothing
// made in a pass starts another.
func (m *Machine) markDirty(res *resource) {
	if m.inPass || res.dirty || m.sem < 3 {
		return
	}
	res.dirty = true
	m.dirty = append(m.dirty, res)
}

// runPasses decides again the asks of each dirty resource once, in name
// order.
func (m *Machine) runPasses() {
	for len(m.dirty) > 0 {
		ds := m.dirty
		m.dirty = nil
		slices.SortFunc(ds, func(x, y *resource) int { return cmpString(x.name, y.name) })
		for _, res := range ds {
			res.dirty = false
		}
		for _, res := range ds {
			if m.resources[res.name] == res {
				m.pass(res)
			}
		}
	}
}

// pass decides again the asks held on res, in queue order, each once, as
// a new acquire by its asker with its mode (yielding to the claims of the
// admitted waiters ahead of it). A grant in the pass is checked against
// rule 5 with the asks the pass already decided.
func (m *Machine) pass(res *resource) {
	if len(res.asks) == 0 {
		return
	}
	asks := slices.Clone(res.asks)
	m.inPass = true
	var decided []*ask
	for _, k := range asks {
		if k.ended {
			continue
		}
		w := k.waiter
		r, v := m.decide(w.owner, w.owner.did, res, res.name, w.mode, asking{askRules: true, inPass: true})
		switch v {
		case vHeld:
			decided = append(decided, k)
		case vGrant, vRenew:
			m.endAsk(k, r, false)
			if v == vGrant {
				m.checkAsks(res, decided)
			}
		default:
			m.endAsk(k, r, true)
		}
	}
	m.inPass = false
}

// checkAsks ends deadlock each of asks (held on res, in queue order) that
// now closes a cycle.
func (m *Machine) checkAsks(res *resource, asks []*ask) {
	if len(asks) == 0 {
		return
	}
	for _, k := range slices.Clone(asks) {
		if k.ended {
			continue
		}
		w := k.waiter
		if cycle := m.findCycle(res, w.owner, w.mode, true); cycle != nil {
			m.endAsk(k, m.deadlock(w.owner.did, res.name, cycle), true)
		}
	}
}

// finalAsk decides k once more at its untilMs; that verdict, whatever it
// is, is its answer.
func (m *Machine) finalAsk(k *ask) {
	w := k.waiter
	res := w.res
	admitted := m.admitted(res, w)
	m.detachAsk(k)
	m.setClaim(w, m.now) // the claim the ask gave ends with it
	r, v := m.decide(w.owner, w.owner.did, res, res.name, w.mode, asking{askRules: true})
	m.endAsk(k, r, v == vDeadlock || v == vLimit)
	if (v == vGrant || v == vRenew) && admitted {
		m.markDirty(res) // the claim of an admitted waiter ended: it was granted
	}
}

// cancel ends one held ask (or every one) with no answer. Each asker stays
// a waiter without a claim and lapses WaiterTTLMs from now.
func (m *Machine) cancel(c Command) Result {
	var ks []*ask
	if c.HasAskID {
		if k := m.asks[c.AskID]; k != nil {
			ks = append(ks, k)
		}
	} else {
		for _, k := range m.asks {
			ks = append(ks, k)
		}
		slices.SortFunc(ks, func(x, y *ask) int {
			if x.n < y.n {
				return -1
			}
			return 1
		})
	}
	ids := make([]string, 0, len(ks))
	for _, k := range ks {
		w := k.waiter
		admitted := m.admitted(w.res, w)
		m.detachAsk(k)
		m.touchWaiter(w)
		m.setClaim(w, m.now)
		if admitted {
			m.markDirty(w.res)
		}
		ids = append(ids, k.id)
	}
	return m.cancelledAnswer(ids)
}
