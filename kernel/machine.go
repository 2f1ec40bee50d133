package kernel

import (
	"slices"
	"sort"
	"strconv"
)

// Machine is the lease state of one workspace. The zero value is not
// usable: call New or Restore. Not safe for concurrent use.
type Machine struct {
	rules     Rules
	now       int64
	seq       uint64 // orders waiters across resources
	epoch     uint64 // marks agents visited by the current cycle search
	resources map[string]*resource
	agents    map[string]*agent
	timers    timerHeap
	deadlocks []deadlockPair
	changed   bool
	events    []byte // events of the command being applied
	ans       []byte // scratch for the answer of the command being applied
	nevents   int
}

type resource struct {
	name     string
	nameJSON []byte // name as a JSON string, escaped once
	shared   bool
	fence    int64
	leases   []*lease  // live leases in grant (fence) order
	waiters  []*waiter // queue order
}

type lease struct {
	timer
	owner     *agent
	id        string
	holder    string
	mode      string
	fence     int64
	grantedAt int64
}

type waiter struct {
	timer
	owner   *agent
	actor   string
	mode    string
	since   int64
	seq     uint64
	lastAsk int64 // timer.at = lastAsk + WaiterTTLMs
}

type agent struct {
	did       string
	didJSON   []byte // did as a JSON string, escaped once
	trust2    int64  // trust score in half points
	suspended bool
	waits     []*waiter // in the order it began waiting (seq)
	mark      uint64    // == Machine.epoch when the cycle search has seen it
}

type deadlockPair struct {
	actor, resource, holder, waitingOn string
	at                                 int64
}

// New makes an empty machine with rules. The rules slice is copied.
func New(rules Rules) *Machine {
	rules.ReadShared = append([]string(nil), rules.ReadShared...)
	return &Machine{
		rules:     rules,
		resources: map[string]*resource{},
		agents:    map[string]*agent{},
	}
}

// Rules returns the machine's rules.
func (m *Machine) Rules() Rules { return m.rules }

// Now is the largest time the machine has seen.
func (m *Machine) Now() int64 { return m.now }

// NextAlarm is when the host should send a tick: the earliest lease expiry
// or waiter lapse. ok is false when nothing is due ever.
func (m *Machine) NextAlarm() (ms int64, ok bool) {
	if len(m.timers) == 0 {
		return 0, false
	}
	return m.timers[0].at, true
}

// ApplyJSON decodes a REST body for op and applies it at nowMs. A body that
// does not decode is answered invalid_request and changes nothing.
func (m *Machine) ApplyJSON(op Op, nowMs int64, body []byte) Result {
	c, err := DecodeRequest(op, nowMs, body)
	if err != nil {
		return invalidResult(err.Error())
	}
	return m.apply(c)
}

// Step decodes and applies one scenario step.
func (m *Machine) Step(step []byte) Result {
	c, err := DecodeStep(step)
	if err != nil {
		return invalidResult(err.Error())
	}
	return m.apply(c)
}

// InvalidAnswer is the body of an invalid_request refusal with msg.
func InvalidAnswer(msg string) []byte {
	b := append([]byte(nil), `{"ok":false,"reason":"invalid_request","error":`...)
	b = appendString(b, msg)
	return append(b, '}')
}

func invalidResult(msg string) Result {
	return Result{Status: 400, Answer: InvalidAnswer(msg), Events: []byte("[]")}
}

// Apply validates and applies one command. Invalid input is answered
// invalid_request and changes nothing, not even the clock.
func (m *Machine) Apply(c Command) Result {
	if err := c.Validate(); err != nil {
		return invalidResult(err.Error())
	}
	return m.apply(c)
}

// apply applies a command that has been validated.
func (m *Machine) apply(c Command) Result {
	m.changed = false
	m.events = append(m.events[:0], '[')
	m.nevents = 0
	if c.NowMs > m.now {
		m.now = c.NowMs
		m.changed = true
	}
	m.lapse()
	var r Result
	switch c.Op {
	case OpAcquire:
		r = m.acquire(c)
	case OpRelease:
		r = m.release(c)
	case OpWait:
		r = Result{Status: 200, Answer: m.waitAnswer()}
	case OpTick:
		r = Result{Status: 200, Answer: m.tickAnswer()}
	case OpSuspend:
		r = m.suspend(c.ActorDid)
	case OpResume:
		r = m.resume(c.ActorDid)
	}
	m.events = append(m.events, ']')
	// Answer and events share one allocation; the scratch buffers stay.
	la := len(r.Answer)
	out := make([]byte, la+len(m.events))
	copy(out, r.Answer)
	copy(out[la:], m.events)
	m.ans = r.Answer[:0]
	r.Answer, r.Events = out[:la:la], out[la:]
	r.Changed = m.changed
	return r
}

// lapse takes back every lease and waiter due at m.now and forgets deadlock
// pairs older than DeadlockKeepMs.
func (m *Machine) lapse() {
	for len(m.timers) > 0 && m.timers[0].at <= m.now {
		t := m.timers.pop()
		m.changed = true
		if t.lease != nil {
			l := t.lease
			res := t.res
			res.leases = removeLease(res.leases, l)
			l.owner.trust2 += expireTrust2
			m.event("coordination.expire", l.at, l.owner, l, expireTrust2)
		} else {
			w := t.waiter
			m.dropWaiter(t.res, w)
		}
	}
	keep := m.deadlocks[:0]
	for _, d := range m.deadlocks {
		if d.at+DeadlockKeepMs > m.now {
			keep = append(keep, d)
		}
	}
	if len(keep) != len(m.deadlocks) {
		m.changed = true
	}
	for i := len(keep); i < len(m.deadlocks); i++ {
		m.deadlocks[i] = deadlockPair{}
	}
	m.deadlocks = keep
}

func (m *Machine) agentFor(did string) *agent {
	a := m.agents[did]
	if a == nil {
		a = newAgent(did)
		m.agents[did] = a
		m.changed = true
	}
	return a
}

func newAgent(did string) *agent { return &agent{did: did, didJSON: appendString(nil, did)} }

func (m *Machine) resourceFor(name string) *resource {
	res := m.resources[name]
	if res == nil {
		res = &resource{name: name, nameJSON: appendString(nil, name), shared: m.rules.shared(name)}
		m.resources[name] = res
	}
	return res
}

func (res *resource) leaseOf(actor string) *lease {
	for _, l := range res.leases {
		if l.holder == actor {
			return l
		}
	}
	return nil
}

func (res *resource) waiterOf(actor string) *waiter {
	for _, w := range res.waiters {
		if w.actor == actor {
			return w
		}
	}
	return nil
}

// conflicts reports whether a lease held in mode held excludes another
// agent asking in mode asked.
func (res *resource) conflicts(asked, held string) bool {
	if !res.shared {
		return true
	}
	return asked != "read" || held != "read"
}

// leaseID derives a lease's id from its resource and fence (FNV-1a, 64
// bit, then mixed).
func leaseID(resource string, fence int64) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(resource); i++ {
		h ^= uint64(resource[i])
		h *= 1099511628211
	}
	h ^= 0
	h *= 1099511628211
	for f := uint64(fence); ; f >>= 8 {
		h ^= f & 0xff
		h *= 1099511628211
		if f < 256 {
			break
		}
	}
	// fmix64 (from MurmurHash3) spreads the last bytes over the whole id,
	// so consecutive fences do not give look-alike ids.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	var b [22]byte
	copy(b[:], "lease_")
	for i := 0; i < 16; i++ {
		b[6+i] = hexDigits[(h>>(60-4*i))&0xf]
	}
	return string(b[:])
}

func (m *Machine) acquire(c Command) Result {
	if a := m.agents[c.ActorDid]; a != nil && a.suspended {
		return suspendedResult(c.ActorDid)
	}
	a := m.agentFor(c.ActorDid)
	res := m.resourceFor(c.Resource)
	mode := c.Mode
	if mode == "" {
		mode = "write"
	}
	var own *lease
	var nconf int
	for _, l := range res.leases {
		if l.holder == c.ActorDid {
			own = l
		} else if res.conflicts(mode, l.mode) {
			nconf++
		}
	}
	if nconf == 0 {
		m.changed = true
		if own != nil {
			own.mode = mode
			own.at = m.now + LeaseTTLMs
			m.timers.fix(&own.timer)
			m.event("coordination.renew", m.now, own.owner, own, 0)
		} else {
			res.fence++
			own = &lease{
				owner:     a,
				id:        leaseID(res.name, res.fence),
				holder:    c.ActorDid,
				mode:      mode,
				fence:     res.fence,
				grantedAt: m.now,
			}
			own.timer = timer{at: m.now + LeaseTTLMs, res: res, lease: own}
			res.leases = append(res.leases, own)
			m.timers.push(&own.timer)
			m.event("coordination.lease", m.now, own.owner, own, 0)
		}
		if w := res.waiterOf(c.ActorDid); w != nil {
			m.dropWaiter(res, w)
		}
		b := append(m.ans[:0], `{"ok":true,"lease":`...)
		b = appendLease(b, own)
		return Result{Status: 200, Answer: append(b, '}')}
	}
	holders := make([]string, 0, nconf)
	for _, l := range res.leases {
		if l.holder != c.ActorDid && res.conflicts(mode, l.mode) {
			holders = append(holders, l.holder)
		}
	}
	if cycle := m.findCycle(res, mode, c.ActorDid); cycle != nil {
		return m.deadlock(c.ActorDid, res.name, cycle)
	}
	m.changed = true
	w := res.waiterOf(c.ActorDid)
	if w == nil {
		m.seq++
		w = &waiter{owner: a, actor: c.ActorDid, mode: mode, since: m.now, seq: m.seq, lastAsk: m.now}
		w.timer = timer{at: m.now + WaiterTTLMs, res: res, waiter: w}
		res.waiters = append(res.waiters, w)
		a.waits = append(a.waits, w)
		m.timers.push(&w.timer)
	} else {
		w.mode = mode
		w.lastAsk = m.now
		w.at = m.now + WaiterTTLMs
		m.timers.fix(&w.timer)
	}
	waitMs := BackoffMs(len(res.waiters))
	b := append(m.ans[:0], `{"ok":false,"reason":"lease_held","holder":`...)
	b = appendString(b, holders[0])
	b = append(b, `,"holders":`...)
	b = appendStrings(b, holders)
	b = append(b, `,"stampede":{"admitted":[`...)
	for i, q := range res.waiters {
		if i == MaxAdmitted {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, q.actor)
	}
	b = append(b, `],"waitMs":`...)
	b = appendInt(b, waitMs)
	b = append(b, `},"error":`...)
	b = appendString(b, res.name+" is held by "+holders[0]+"; retry after waitMs")
	b = append(b, '}')
	return Result{Status: 409, RetryAfterSec: int((waitMs + 999) / 1000), Answer: b}
}

// BackoffMs is stampede.waitMs for n waiters: min(800, 25 × 2^n).
func BackoffMs(n int) int64 {
	if n >= 5 {
		return MaxWaitMs
	}
	w := int64(BaseWaitMs) << uint(n)
	if w > MaxWaitMs {
		return MaxWaitMs
	}
	return w
}

func suspendedResult(did string) Result {
	b := append([]byte(nil), `{"ok":false,"reason":"suspended","actorDid":`...)
	b = appendString(b, did)
	b = append(b, `,"error":`...)
	b = appendString(b, did+" is suspended by an operator")
	return Result{Status: 403, Answer: append(b, '}')}
}

// findCycle follows wait-for edges from the holders of res that conflict
// with mode (holder → resource it waits on → that resource's conflicting
// holders → …) and returns the loop back to actor, or nil. The loop starts
// with actor and res and alternates agents and resources. Each agent and
// each (resource, mode) is expanded at most once, so the cost grows with the
// edges reachable.
func (m *Machine) findCycle(res *resource, mode, actor string) []string {
	type frame struct {
		agent  *agent
		parent int // index of the frame that led here, -1 for roots
		via    *resource
	}
	m.epoch++
	var frames []frame
	for _, l := range res.leases {
		if l.holder != actor && res.conflicts(mode, l.mode) && l.owner.mark != m.epoch {
			l.owner.mark = m.epoch
			frames = append(frames, frame{agent: l.owner, parent: -1})
		}
	}
	// Breadth-first: frames is the queue; the first loop found is among the
	// shortest, and the order is fixed by grant and wait order.
	for i := 0; i < len(frames); i++ {
		a := frames[i].agent
		for _, w := range a.waits {
			wres := w.res
			for _, l := range wres.leases {
				if l.owner == a || !wres.conflicts(w.mode, l.mode) {
					continue
				}
				if l.holder == actor {
					// Found: rebuild the path from the root.
					rev := []string{wres.name, a.did}
					for j := i; frames[j].parent >= 0; j = frames[j].parent {
						rev = append(rev, frames[j].via.name, frames[frames[j].parent].agent.did)
					}
					cycle := make([]string, 0, len(rev)+2)
					cycle = append(cycle, actor, res.name)
					for k := len(rev) - 1; k >= 0; k-- {
						cycle = append(cycle, rev[k])
					}
					return cycle
				}
				if l.owner.mark != m.epoch {
					l.owner.mark = m.epoch
					frames = append(frames, frame{agent: l.owner, parent: i, via: wres})
				}
			}
		}
	}
	return nil
}

func (m *Machine) deadlock(actor, resName string, cycle []string) Result {
	holder, waitingOn := cycle[2], cycle[3]
	m.changed = true
	// A repeated refusal replaces its pair and moves it to the end, so the
	// list stays in time order.
	m.deadlocks = slices.DeleteFunc(m.deadlocks, func(d deadlockPair) bool {
		return d.actor == actor && d.resource == resName
	})
	m.deadlocks = append(m.deadlocks, deadlockPair{actor, resName, holder, waitingOn, m.now})
	b := append(m.ans[:0], `{"ok":false,"reason":"deadlock","holder":`...)
	b = appendString(b, holder)
	b = append(b, `,"waitingOn":`...)
	b = appendString(b, waitingOn)
	b = append(b, `,"cycle":`...)
	b = appendStrings(b, cycle)
	b = append(b, `,"error":`...)
	b = appendString(b, "granting "+resName+" would close a wait cycle: "+holder+" holds it and waits on "+waitingOn+"; release what you hold and retry")
	b = append(b, '}')
	return Result{Status: 409, RetryAfterSec: 1, Answer: b}
}

func (m *Machine) dropWaiter(res *resource, w *waiter) {
	m.changed = true
	if i := slices.Index(res.waiters, w); i >= 0 {
		res.waiters = slices.Delete(res.waiters, i, i+1)
	}
	if a := w.owner; a != nil {
		if i := slices.Index(a.waits, w); i >= 0 {
			a.waits = slices.Delete(a.waits, i, i+1)
		}
	}
	if w.idx >= 0 {
		m.timers.remove(&w.timer)
	}
}

func removeLease(ls []*lease, l *lease) []*lease {
	if i := slices.Index(ls, l); i >= 0 {
		return slices.Delete(ls, i, i+1)
	}
	return ls
}

func (m *Machine) release(c Command) Result {
	res := m.resources[c.Resource]
	var own *lease
	if res != nil {
		own = res.leaseOf(c.ActorDid)
	}
	if c.HasLeaseID && (own == nil || own.id != c.LeaseID) {
		b := append(m.ans[:0], `{"ok":false,"reason":"stale_lease","leaseId":`...)
		b = appendString(b, c.LeaseID)
		b = append(b, `,"error":`...)
		b = appendString(b, "leaseId is not a live lease of "+c.ActorDid+" on "+c.Resource)
		return Result{Status: 409, Answer: append(b, '}')}
	}
	b := append(m.ans[:0], `{"ok":true,"released":`...)
	if own == nil {
		b = append(b, `false,"releasedIds":[]`...)
	} else {
		m.changed = true
		res.leases = removeLease(res.leases, own)
		m.timers.remove(&own.timer)
		own.owner.trust2 += releaseTrust2
		m.event("coordination.release", m.now, own.owner, own, releaseTrust2)
		b = append(b, `true,"releasedIds":[`...)
		b = appendString(b, own.id)
		b = append(b, ']')
	}
	if res != nil {
		if w := res.waiterOf(c.ActorDid); w != nil {
			m.dropWaiter(res, w)
		}
	}
	return Result{Status: 200, Answer: append(b, '}')}
}

func (m *Machine) suspend(did string) Result {
	a := m.agentFor(did)
	if !a.suspended {
		a.suspended = true
		m.changed = true
		// Only a change of state emits an event: suspending again is a no-op
		// (a suspended agent holds and waits on nothing), like resume.
		m.event("operator.suspend", m.now, a, nil, 0)
	}
	var names []string
	for name, res := range m.resources {
		if res.leaseOf(did) != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var ids []string
	for _, name := range names {
		res := m.resources[name]
		l := res.leaseOf(did)
		res.leases = removeLease(res.leases, l)
		m.timers.remove(&l.timer)
		ids = append(ids, l.id)
		m.event("coordination.revoke", m.now, a, l, 0)
	}
	for len(a.waits) > 0 {
		w := a.waits[0]
		m.dropWaiter(w.res, w)
	}
	b := append(m.ans[:0], `{"ok":true,"actorDid":`...)
	b = appendString(b, did)
	b = append(b, `,"suspended":true,"revokedIds":`...)
	if ids == nil {
		ids = []string{}
	}
	b = appendStrings(b, ids)
	return Result{Status: 200, Answer: append(b, '}')}
}

func (m *Machine) resume(did string) Result {
	if a := m.agents[did]; a != nil && a.suspended {
		a.suspended = false
		m.changed = true
		m.event("operator.resume", m.now, a, nil, 0)
	}
	b := append(m.ans[:0], `{"ok":true,"actorDid":`...)
	b = appendString(b, did)
	return Result{Status: 200, Answer: append(b, `,"suspended":false}`...)}
}

// event appends one event to the command's list. l is nil for operator
// events, which carry no resource or lease.
func (m *Machine) event(typ string, at int64, a *agent, l *lease, trust2 int64) {
	b := m.events
	if m.nevents > 0 {
		b = append(b, ',')
	}
	m.nevents++
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","atMs":`...)
	b = appendInt(b, at)
	if l != nil {
		b = append(b, `,"resource":`...)
		b = append(b, l.res.nameJSON...)
	}
	b = append(b, `,"actorDid":`...)
	b = append(b, a.didJSON...)
	if l != nil {
		b = append(b, `,"leaseId":"`...)
		b = append(b, l.id...)
		b = append(b, `","fence":`...)
		b = appendInt(b, l.fence)
		b = append(b, `,"mode":"`...)
		b = append(b, l.mode...)
		b = append(b, `","expiresAtMs":`...)
		b = appendInt(b, l.at)
		b = append(b, `,"trustDelta":`...)
		b = appendHalves(b, trust2)
	}
	m.events = append(b, '}')
}

// appendLease appends a lease as answers show it. Lease ids are hex and
// need no escaping; names are escaped once, when first seen.
func appendLease(b []byte, l *lease) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, l.id...)
	b = append(b, `","resource":`...)
	b = append(b, l.res.nameJSON...)
	b = append(b, `,"holder":`...)
	b = append(b, l.owner.didJSON...)
	b = append(b, `,"mode":"`...)
	b = append(b, l.mode...)
	b = append(b, `","fence":`...)
	b = appendInt(b, l.fence)
	b = append(b, `,"grantedAtMs":`...)
	b = appendInt(b, l.grantedAt)
	b = append(b, `,"expiresAtMs":`...)
	b = appendInt(b, l.at)
	return append(b, '}')
}

// activeResources lists resources with holders or waiters, by name.
func (m *Machine) activeResources() []*resource {
	var out []*resource
	for _, res := range m.resources {
		if len(res.leases) > 0 || len(res.waiters) > 0 {
			out = append(out, res)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (m *Machine) waitAnswer() []byte {
	b := append(m.ans[:0], `{"ok":true,"nowMs":`...)
	b = appendInt(b, m.now)
	b = append(b, `,"queues":[`...)
	for i, res := range m.activeResources() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"resource":`...)
		b = appendString(b, res.name)
		if res.shared {
			b = append(b, `,"class":"read-shared","holders":[`...)
		} else {
			b = append(b, `,"class":"exclusive","holders":[`...)
		}
		for j, l := range res.leases {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendLease(b, l)
		}
		b = append(b, `],"waiters":[`...)
		for j, w := range res.waiters {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"actorDid":`...)
			b = appendString(b, w.actor)
			b = append(b, `,"mode":"`...)
			b = append(b, w.mode...)
			b = append(b, `","admitted":`...)
			b = strconv.AppendBool(b, j < MaxAdmitted)
			b = append(b, `,"sinceMs":`...)
			b = appendInt(b, w.since)
			b = append(b, `,"lapsesAtMs":`...)
			b = appendInt(b, w.at)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	b = append(b, `],"deadlocks":[`...)
	for i, d := range m.deadlocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"actorDid":`...)
		b = appendString(b, d.actor)
		b = append(b, `,"resource":`...)
		b = appendString(b, d.resource)
		b = append(b, `,"holder":`...)
		b = appendString(b, d.holder)
		b = append(b, `,"waitingOn":`...)
		b = appendString(b, d.waitingOn)
		b = append(b, `,"atMs":`...)
		b = appendInt(b, d.at)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

func (m *Machine) tickAnswer() []byte {
	b := append(m.ans[:0], `{"ok":true,"nowMs":`...)
	b = appendInt(b, m.now)
	b = append(b, `,"nextAlarmMs":`...)
	if at, ok := m.NextAlarm(); ok {
		b = appendInt(b, at)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

// TrustJSON is every known agent's trust score as a JSON object, by DID.
func (m *Machine) TrustJSON() []byte {
	dids := make([]string, 0, len(m.agents))
	for d := range m.agents {
		dids = append(dids, d)
	}
	sort.Strings(dids)
	b := append(make([]byte, 0, 32*len(dids)+2), '{')
	for i, d := range dids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, d)
		b = append(b, ':')
		b = appendHalves(b, m.agents[d].trust2)
	}
	return append(b, '}')
}

// LeaseID is the id of the lease granted on resource with fence: ids are
// derived, never drawn, so every host names a lease alike.
func LeaseID(resource string, fence int64) string { return leaseID(resource, fence) }
