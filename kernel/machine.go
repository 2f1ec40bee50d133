package kernel

import (
	"cmp"
	"errors"
	"slices"
	"sort"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel/internal/jsontext"
)

// Machine is the lease state of one workspace. The zero value is not
// usable: call New or Restore. Not safe for concurrent use.
//
// It keeps only what a future answer needs: a resource lives while it has
// a lease or a waiter (a claim belongs to a waiter), and an agent while its
// trust is not 0, it holds or waits on something, or it is suspended.
type Machine struct {
	rules     Rules
	now       int64
	seq       uint64 // orders waiters across resources
	fence     int64  // the workspace's fence counter: the last fence granted
	epoch     uint64 // marks agents visited by the current cycle search
	resources map[string]*resource
	index     nameIndex // the same resources, in name order
	agents    map[string]*agent
	nleases   int
	nwaiters  int
	timers    timerHeap
	deadlocks pairs
	changed   bool        // durable state changed during the command being applied
	clock     bool        // the command moved the clock
	pruned    bool        // the command dropped deadlock pairs (a function of the clock)
	logged    bool        // the last command changed durable state (Ready.Log)
	sinceSnap int         // logged commands since the last Snapshot
	events    []byte      // the events of the command being applied, one after another
	marks     []eventMark // where each of them is in events
	ans       []byte      // scratch for the answer of the command being applied
	// Resources and agents that may have become idle during the command;
	// apply forgets the idle ones at its end.
	idleRes    []*resource
	idleAgents []*agent
	// sem is the semantics the machine decides by (Semantics, or 1 while a
	// host replays commands that leaseplane 0.1 logged); fences1 holds, under
	// semantics 1, each resource's own fence counter as 0.1 kept them.
	sem     int
	fences1 map[string]int64
	// upgraded is set once the machine decided by semantics 1: live leases
	// of that time may share fences across resources.
	upgraded bool
	// Held asks (semantics 3, held.go): by id, their count, the counter
	// their ids come from; the resources whose asks are to be decided
	// again at the end of the change (dirty), and the answers of the asks
	// that ended during the command being applied.
	asks     map[string]*ask
	askSeq   uint64
	inPass   bool
	dirty    []*resource
	askBytes []byte
	askMarks []askMark
	askMade  string
}

type resource struct {
	name     string
	nameJSON []byte // name as a JSON string, escaped once
	shared   bool
	leases   []*lease  // live leases in grant (fence) order
	waiters  []*waiter // queue order
	asks     []*ask    // held asks, in queue order
	dirty    bool      // in Machine.dirty
}

type lease struct {
	timer
	owner     *agent
	id        string
	mode      string
	fence     int64
	grantedAt int64
}

type waiter struct {
	timer         // the lapse: at = lastAsk + WaiterTTLMs
	claim   timer // the claim's end, in the heap while it is ahead
	owner   *agent
	mode    string
	since   int64
	seq     uint64
	lastAsk int64
	heldAt  int64 // time of the last lease_held answer on this resource
	waitMs  int64 // its stampede.waitMs
	// claimEnd is when its claim ends (if it is admitted): heldAt + waitMs
	// + the claim grace, the ask's untilMs while one is held, the moment
	// of a cancel.
	claimEnd int64
	ask      *ask // its held ask on this resource, if any
}

// claimUntil is when the waiter's claim ends (if it is admitted).
func (w *waiter) claimUntil() int64 { return w.claimEnd }

type agent struct {
	did       string
	didJSON   []byte // did as a JSON string, escaped once
	trust2    int64  // trust score in half points
	suspended bool
	leases    []*lease  // live leases, in grant order
	waits     []*waiter // by resource name
	mark      uint64    // == Machine.epoch when the cycle search has seen it
	nasks     int       // its held asks
}

func (a *agent) idle() bool {
	return a.trust2 == 0 && !a.suspended && len(a.leases) == 0 && len(a.waits) == 0
}

// eventMark is an event of the command being applied: its type, its time
// and its bytes in Machine.events.
type eventMark struct {
	typ                      string
	at                       int64
	start, end               int
	actor, resource, leaseID string
	fence                    int64
}

type deadlockPair struct {
	actor, resource, holder, waitingOn string
	at                                 int64
}

// New makes an empty machine with rules. The rules slice is copied; zero
// limits take the defaults.
func New(rules Rules) *Machine {
	rules.ReadShared = append([]string(nil), rules.ReadShared...)
	rules.Limits = rules.Limits.withDefaults()
	return &Machine{
		rules:     rules,
		resources: map[string]*resource{},
		agents:    map[string]*agent{},
		asks:      map[string]*ask{},
		sem:       Semantics,
	}
}

// Semantics is the version of the semantics the machine decides by.
func (m *Machine) Semantics() int { return m.sem }

// SetSemantics makes the machine decide by semantics v from the next
// command on. A host replaying a log sets 1 for the commands leaseplane
// 0.1 logged, so they decide again as they did then, and Semantics for the
// rest. Under semantics 1 a request without mode asks write, admitted
// waiters have no claims, a deadlock refusal leaves a wait's lapse alone,
// fences are counted per resource and no limit applies. Semantics 1 is
// only for a machine restored from a version 1 snapshot or one that has
// granted nothing yet.
func (m *Machine) SetSemantics(v int) error {
	switch {
	case v == m.sem:
		return nil
	case v >= 2 && v <= Semantics && (v >= 3 || len(m.asks) == 0):
		m.upgraded = m.upgraded || m.sem == 1
		m.sem, m.fences1 = v, nil
		return nil
	case v == 1 && len(m.asks) == 0 && (m.fences1 != nil || m.fence == 0):
		m.sem = 1
		if m.fences1 == nil {
			m.fences1 = map[string]int64{}
		}
		return nil
	}
	return errors.New("kernel: cannot decide by semantics " + strconv.Itoa(v) + " from semantics " + strconv.Itoa(m.sem) +
		" (known: 1 to " + strconv.Itoa(Semantics) + "; semantics 1 only after a version 1 snapshot or on an empty machine; below 3 only without held asks)")
}

// Rules returns the machine's rules.
func (m *Machine) Rules() Rules { return m.rules }

// Now is the largest time the machine has seen.
func (m *Machine) Now() int64 { return m.now }

// Stats counts what the machine holds.
func (m *Machine) Stats() Stats {
	return Stats{Leases: m.nleases, Waiters: m.nwaiters, Resources: len(m.resources), Agents: len(m.agents)}
}

// NextAlarm is when the host should send a tick: the earliest lease
// expiry, waiter lapse, claim end or held ask's untilMs. ok is false when
// nothing is due ever.
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
	return nullAnswer(m.apply(c))
}

// nullAnswer gives a held step's Result the answer null, as transcripts
// show it.
func nullAnswer(r Result) Result {
	if r.Answer == nil {
		r.Answer = []byte("null")
	}
	return r
}

// StepJSON decodes and applies one scenario step.
func (m *Machine) StepJSON(step []byte) Result {
	c, err := DecodeStep(step)
	if err != nil {
		return invalidResult(err.Error())
	}
	return nullAnswer(m.apply(c))
}

// Step applies one command that a host decoded at its edge and returns
// what the host must do (Ready). A command whose Invalid is set, or that
// does not validate, is answered invalid_request and changes nothing.
func (m *Machine) Step(c Command) Ready {
	var r Result
	m.logged = false
	switch {
	case c.Invalid != "":
		r = invalidResult(c.Invalid)
	default:
		if err := c.Validate(); err != nil {
			r = invalidResult(err.Error())
		} else {
			r = m.apply(c)
		}
	}
	return m.ready(r)
}

// ready is the Ready of the command that gave r.
func (m *Machine) ready(r Result) Ready {
	rd := Ready{Status: r.Status, RetryAfterSec: r.RetryAfterSec, Answer: r.Answer, Events: r.Events,
		Log: m.logged, Changed: r.Changed, AskID: r.AskID, Answers: r.Answers}
	rd.NextAlarm, rd.AlarmOK = m.NextAlarm()
	if m.logged {
		m.sinceSnap++
	}
	rd.SnapshotDue = m.sinceSnap >= SnapshotEvery
	return rd
}

// Apply validates and applies one command. Invalid input is answered
// invalid_request and changes nothing, not even the clock.
func (m *Machine) Apply(c Command) Result {
	if err := c.Validate(); err != nil {
		return invalidResult(err.Error())
	}
	return nullAnswer(m.apply(c))
}

// apply applies a command that has been validated.
func (m *Machine) apply(c Command) Result {
	m.logged = false
	if m.sem < 3 && (c.Op == OpCancel || c.HasWaitUpTo) {
		what := "waitUpToMs"
		if c.Op == OpCancel {
			what = "cancel"
		}
		return invalidResult(what + " needs semantics 3; this command runs under semantics " + strconv.Itoa(m.sem))
	}
	m.changed, m.clock, m.pruned = false, false, false
	m.events, m.marks = m.events[:0], m.marks[:0]
	m.askBytes, m.askMarks, m.askMade = m.askBytes[:0], m.askMarks[:0], ""
	target := max(m.now, c.NowMs)
	if target > m.now {
		m.clock = true
	}
	m.lapse(target)
	m.forgetIdle() // what lapsed may leave idle, before the command reads the state
	var r Result
	switch c.Op {
	case OpAcquire:
		r = m.acquire(c)
	case OpRelease:
		r = m.release(c)
	case OpWait:
		r = Result{Status: 200, Answer: m.waitAnswer(c)}
	case OpTick:
		r = Result{Status: 200, Answer: m.tickAnswer()}
	case OpSuspend:
		r = m.suspend(c.ActorDid)
	case OpResume:
		r = m.resume(c.ActorDid)
	case OpForget:
		r = m.forget(c.ActorDid)
	case OpCancel:
		r = m.cancel(c)
	}
	if len(m.dirty) > 0 {
		// The passes write their answers in the scratch buffer too.
		r.Answer = append([]byte(nil), r.Answer...)
		m.runPasses()
	}
	m.forgetIdle()
	// Answer, events and the asks' answers share one allocation; the
	// scratch buffers stay.
	la, le := len(r.Answer), len(m.events)
	out := make([]byte, la+le+len(m.askBytes))
	copy(out, r.Answer)
	copy(out[la:], m.events)
	copy(out[la+le:], m.askBytes)
	held := r.Answer == nil
	m.ans = r.Answer[:0]
	r.Answer = out[:la:la]
	if held {
		r.Answer, r.AskID = nil, m.askMade
	}
	if len(m.askMarks) > 0 {
		r.Answers = make([]AskAnswer, len(m.askMarks))
		for i, k := range m.askMarks {
			r.Answers[i] = AskAnswer{AskID: k.id, Status: k.status, RetryAfterSec: k.retry,
				Answer: out[la+le+k.start : la+le+k.end : la+le+k.end]}
		}
	}
	if len(m.marks) > 0 {
		r.Events = make([]Event, len(m.marks))
		for i, mk := range m.marks {
			r.Events[i] = Event{Type: mk.typ, AtMs: mk.at, JSON: out[la+mk.start : la+mk.end : la+mk.end],
				ActorDid: mk.actor, Resource: mk.resource, LeaseID: mk.leaseID, Fence: mk.fence}
		}
	}
	r.Changed = m.changed || m.clock || m.pruned
	// What a replay needs: a change of state, or the clock of a command
	// that is logged anyway (a wait, a tick or a cancel that only moved
	// the clock is not: the next logged command carries a later time; so
	// a host's cancel {} at start logs nothing when nothing was held).
	m.logged = m.changed || (m.clock && c.Op != OpWait && c.Op != OpTick && c.Op != OpCancel)
	return r
}

// forgetIdle forgets the resources and agents the command left idle.
func (m *Machine) forgetIdle() {
	for i, res := range m.idleRes {
		if len(res.leases) == 0 && len(res.waiters) == 0 && m.resources[res.name] == res {
			delete(m.resources, res.name)
			m.index.remove(res)
			m.changed = true
		}
		m.idleRes[i] = nil
	}
	m.idleRes = m.idleRes[:0]
	for i, a := range m.idleAgents {
		if a.idle() && m.agents[a.did] == a {
			delete(m.agents, a.did)
			m.changed = true
		}
		m.idleAgents[i] = nil
	}
	m.idleAgents = m.idleAgents[:0]
}

func (m *Machine) mayBeIdle(res *resource, a *agent) {
	if res != nil {
		m.idleRes = append(m.idleRes, res)
	}
	if a != nil {
		m.idleAgents = append(m.idleAgents, a)
	}
}

// lapse takes back everything due by target, instant by instant in time
// order, each instant at its own time (m.now is that instant meanwhile):
// first the expiries, waiter lapses and claim ends due then, then the
// held asks of each resource they changed decided again, in name order,
// then the held asks whose untilMs it is. So a verdict never depends on
// whether the host's alarm fired on time. Then it forgets the deadlock
// pairs older than DeadlockKeepMs, and m.now is target.
func (m *Machine) lapse(target int64) {
	for len(m.timers) > 0 && m.timers[0].at <= target {
		at := m.timers[0].at
		m.now = max(m.now, at)
		for len(m.timers) > 0 && m.timers[0].at == at && m.timers[0].kind != timerAsk {
			t := m.timers.pop()
			switch {
			case t.lease != nil:
				m.changed = true
				l := t.lease
				m.removeLease(l)
				l.owner.trust2 += expireTrust2
				m.event("coordination.expire", l.at, l.owner, l, expireTrust2)
				m.markDirty(l.res)
			case t.kind == timerLapse:
				m.dropWaiter(t.res, t.waiter)
			default:
				// A claim's window closes: the asks there are decided again
				// when the waiter had the claim (it is admitted).
				if m.admitted(t.res, t.waiter) {
					m.markDirty(t.res)
				}
			}
		}
		m.runPasses()
		for len(m.timers) > 0 && m.timers[0].at == at && m.timers[0].kind == timerAsk {
			t := m.timers.pop()
			m.finalAsk(t.waiter.ask)
			m.runPasses()
		}
	}
	m.now = target
	if m.deadlocks.prune(m.now) {
		m.pruned = true
	}
}

func newAgent(did string) *agent { return &agent{did: did, didJSON: jsontext.AppendString(nil, did)} }

func (m *Machine) addAgent(did string) *agent {
	a := newAgent(did)
	m.agents[did] = a
	m.changed = true
	return a
}

func (m *Machine) addResource(name string) *resource {
	res := &resource{name: name, nameJSON: jsontext.AppendString(nil, name), shared: m.rules.shared(name)}
	m.resources[name] = res
	m.index.insert(res)
	return res
}

func (res *resource) leaseOf(a *agent) *lease {
	return ownedBy(res.leases, a, func(l *lease) *agent { return l.owner })
}

func (res *resource) waiterOf(a *agent) *waiter {
	return ownedBy(res.waiters, a, func(w *waiter) *agent { return w.owner })
}

// ownedBy is the element of xs whose owner is a (nil when a is nil or owns
// none).
func ownedBy[T any](xs []*T, a *agent, owner func(*T) *agent) *T {
	if a == nil {
		return nil
	}
	for _, x := range xs {
		if owner(x) == a {
			return x
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

// hasClaim reports whether w, a waiter of res, has a claim now: it is
// admitted (among the first MaxAdmitted of the queue) and its back-off
// window is not over. Suspended agents wait on nothing, so have none.
func (m *Machine) hasClaim(res *resource, w *waiter) bool {
	return m.now < w.claimUntil() && m.admitted(res, w)
}

// admitted reports whether w is among the first MaxAdmitted of res's queue.
func (m *Machine) admitted(res *resource, w *waiter) bool {
	for i, q := range res.waiters {
		if i == MaxAdmitted {
			break
		}
		if q == w {
			return true
		}
	}
	return false
}

// blockers calls f with each agent that blocks a, asking in mode on res
// (a may be nil: an agent not yet known): the other agents whose live
// leases there conflict with mode, in grant order, then, when a holds no
// lease there and has no claim there, the other claimants whose claim
// conflicts with mode, in queue order. With leasesOnly (an asker whose
// acquire is held there: the claims it yields to are no wait edges of it)
// only the leases. f returns false to stop.
func (m *Machine) blockers(res *resource, a *agent, mode string, leasesOnly bool, f func(b *agent, l *lease) bool) {
	holds := false
	for _, l := range res.leases {
		if l.owner == a {
			holds = true
			continue
		}
		if res.conflicts(mode, l.mode) && !f(l.owner, l) {
			return
		}
	}
	if holds || m.sem < 2 || leasesOnly {
		return
	}
	var mine *waiter
	if a != nil {
		mine = res.waiterOf(a)
	}
	if mine != nil && m.hasClaim(res, mine) {
		return
	}
	for i, w := range res.waiters {
		if i == MaxAdmitted {
			break
		}
		if w.owner != a && m.now < w.claimUntil() && res.conflicts(mode, w.mode) && !f(w.owner, nil) {
			return
		}
	}
}

const hexDigits = "0123456789abcdef"

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
	a := m.agents[c.ActorDid]
	if a != nil && a.suspended {
		return suspendedResult(c.ActorDid)
	}
	res := m.resources[c.Resource]
	if res != nil && a != nil {
		// At most one held ask per agent and resource: a new acquire there
		// first ends the old one, cancelled (its asker stays a waiter).
		if w := res.waiterOf(a); w != nil && w.ask != nil {
			m.endAsk(w.ask, m.cancelledResult(w.ask), true)
		}
	}
	how := asking{hold: c.WaitUpToMs > 0, until: m.now + c.WaitUpToMs}
	how.askRules = how.hold
	r, _ := m.decide(a, c.ActorDid, res, c.Resource, c.Mode, how)
	return r
}

// asking is how decide treats a request. askRules: the request is (or
// would be) a held ask: it yields to the conflicting claims of the
// admitted waiters ahead of it in the queue, and the claims it yields to
// are no wait edges of it. hold: a lease_held verdict becomes a held ask
// until until. inPass: an ask decided again; a lease_held verdict changes
// nothing.
type asking struct {
	askRules, hold, inPass bool
	until                  int64
}

// verdict is the kind of answer decide gave.
type verdict uint8

const (
	vGrant    verdict = iota // a new lease
	vRenew                   // a renewal
	vHeld                    // lease_held (answered, or the ask stays held)
	vAsk                     // a new held ask (no answer yet)
	vDeadlock                // deadlock
	vLimit                   // limit_exceeded
)

// decide is rules 3-6 and the limits for did (a when known) asking
// askedMode on the resource name (res when live).
func (m *Machine) decide(a *agent, did string, res *resource, name, askedMode string, how asking) (Result, verdict) {
	var own *lease
	var mine *waiter
	if res != nil {
		own = res.leaseOf(a)
		mine = res.waiterOf(a)
	}
	mode := askedMode
	if mode == "" {
		mode = "write"
		if own != nil && m.sem >= 2 {
			mode = own.mode // a renewal without mode keeps the held mode
		}
	}
	var holders []*agent // the other agents whose live leases conflict, in grant order
	if res != nil {
		for _, l := range res.leases {
			if l.owner != a && res.conflicts(mode, l.mode) {
				holders = append(holders, l.owner)
			}
		}
	}
	nconf := len(holders)
	if nconf == 0 && own != nil {
		// Rule 3: renewal.
		m.changed = true
		if own.mode != mode {
			m.markDirty(res) // a lease there changes mode
		}
		own.mode = mode
		own.at = m.now + LeaseTTLMs
		m.timers.fix(&own.timer)
		m.event("coordination.renew", m.now, a, own, 0)
		if mine != nil {
			m.dropWaiter(res, mine)
		}
		return m.leaseAnswer(own), vRenew
	}
	// The claims that stand in the asker's way.
	var claimants []*waiter
	if res != nil && nconf == 0 && m.sem >= 2 {
		if how.askRules {
			// Those of the admitted waiters ahead of it.
			for i, w := range res.waiters {
				if i == MaxAdmitted || w == mine {
					break
				}
				if w.owner != a && m.now < w.claimUntil() && res.conflicts(mode, w.mode) {
					claimants = append(claimants, w)
				}
			}
		} else if mine == nil || !m.hasClaim(res, mine) {
			// Every other admitted claim, when it has none itself.
			for i, w := range res.waiters {
				if i == MaxAdmitted {
					break
				}
				if w.owner != a && m.now < w.claimUntil() && res.conflicts(mode, w.mode) {
					claimants = append(claimants, w)
				}
			}
		}
	}
	if nconf == 0 && len(claimants) == 0 {
		// Rule 4: grant.
		if r, over := m.overLimit(1, 0, a == nil); over && m.sem >= 2 {
			return r, vLimit
		}
		if a == nil {
			a = m.addAgent(did)
		}
		if res == nil {
			res = m.addResource(name)
		}
		m.changed = true
		fence := m.nextFence(res.name)
		own = &lease{owner: a, id: leaseID(res.name, fence), mode: mode, fence: fence, grantedAt: m.now}
		own.timer = timer{at: m.now + LeaseTTLMs, res: res, lease: own}
		res.leases = append(res.leases, own)
		a.leases = append(a.leases, own)
		m.nleases++
		m.timers.push(&own.timer)
		m.event("coordination.lease", m.now, a, own, 0)
		if !m.inPass {
			// A new holder may close a cycle through the asks held there,
			// before any pass the grantee's ended claim starts.
			m.checkAsks(res, res.asks)
		}
		if mine != nil {
			m.dropWaiter(res, mine)
		}
		return m.leaseAnswer(own), vGrant
	}
	// Rule 5: deadlock.
	if a != nil {
		if cycle := m.findCycle(res, a, mode, how.askRules); cycle != nil {
			if mine != nil && m.sem >= 2 {
				m.touchWaiter(mine) // a refused retry is a request: the lapse restarts
			}
			return m.deadlock(did, res.name, cycle), vDeadlock
		}
	}
	// Rule 6: lease_held.
	h := held{res: res, holders: holders, claimants: claimants}
	if how.inPass {
		return Result{}, vHeld // the ask stays held; nothing about it changes
	}
	if mine == nil {
		if r, over := m.overLimit(0, 1, a == nil); over && m.sem >= 2 {
			return r, vLimit
		}
	}
	if how.hold {
		if r, over := m.overAskLimit(a); over {
			return r, vLimit
		}
	}
	if mine == nil {
		// The asker becomes a waiter.
		if a == nil {
			a = m.addAgent(did)
		}
		m.seq++
		mine = &waiter{owner: a, mode: mode, since: m.now, seq: m.seq}
		mine.timer = timer{res: res, waiter: mine, kind: timerLapse, idx: -1}
		mine.claim = timer{res: res, waiter: mine, kind: timerClaim, idx: -1}
		res.waiters = append(res.waiters, mine)
		m.nwaiters++
		i, _ := slices.BinarySearchFunc(a.waits, res.name, func(w *waiter, name string) int { return cmpString(w.res.name, name) })
		a.waits = slices.Insert(a.waits, i, mine)
	}
	m.changed = true
	mine.mode = mode
	if how.hold {
		m.holdAsk(mine, how.until)
		return Result{}, vAsk
	}
	h.waitMs = m.heldMoment(mine)
	return m.heldResult(h), vHeld
}

// heldMoment makes now a lease_held answer to w: its lapse restarts and
// its claim window runs from now with the back-off of its place. It
// returns that back-off.
func (m *Machine) heldMoment(w *waiter) int64 {
	n := len(w.res.waiters) // semantics 2: the number of waiters
	if m.sem >= 3 {
		n = slices.Index(w.res.waiters, w) + 1 // its place
	}
	waitMs := BackoffMs(n)
	w.heldAt, w.waitMs = m.now, waitMs
	m.touchWaiter(w)
	grace := int64(ClaimGraceMs)
	if m.sem < 3 {
		grace = ClaimGraceMs2
	}
	m.setClaim(w, m.now+waitMs+grace)
	return waitMs
}

// setClaim makes w's claim end at end, with its alarm when that is ahead.
func (m *Machine) setClaim(w *waiter, end int64) {
	w.claimEnd = end
	w.claim.at = end
	switch {
	case end <= m.now || w.ask != nil:
		m.timers.remove(&w.claim) // a held ask's claim ends with the ask
	case w.claim.idx < 0:
		m.timers.push(&w.claim)
	default:
		m.timers.fix(&w.claim)
	}
}

// nextFence is the fence of a new grant on name: the workspace's next one,
// or, under semantics 1, the resource's own next one.
func (m *Machine) nextFence(name string) int64 {
	if m.sem >= 2 {
		m.fence++
		return m.fence
	}
	f := m.fences1[name] + 1
	m.fences1[name] = f
	m.fence = max(m.fence, f)
	return f
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// touchWaiter restarts w's lapse from now.
func (m *Machine) touchWaiter(w *waiter) {
	m.changed = true
	w.lastAsk = m.now
	w.at = m.now + WaiterTTLMs
	if w.idx < 0 {
		m.timers.push(&w.timer)
	} else {
		m.timers.fix(&w.timer)
	}
}

// overLimit checks the workspace limits for a verdict that would add
// leases, waiters and (newAgent) an agent, and gives the refusal when one
// would be passed.
func (m *Machine) overLimit(leases, waiters int, newAgent bool) (Result, bool) {
	lim := m.rules.Limits
	switch {
	case leases > 0 && int64(m.nleases+leases) > lim.Leases:
		return limitResult("leases", lim.Leases, "live leases"), true
	case waiters > 0 && int64(m.nwaiters+waiters) > lim.Waiters:
		return limitResult("waiters", lim.Waiters, "waiters"), true
	case newAgent && int64(len(m.agents)+1) > lim.Agents:
		return limitResult("agents", lim.Agents, "agents remembered"), true
	}
	return Result{}, false
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

// findCycle follows wait-for edges from the agents that block actor asking
// in mode on res (agent → a resource it waits on → the agents that block
// it there → …) and returns the loop back to actor, or nil. The loop
// starts with actor and res and alternates agents and resources.
// Breadth-first, blockers in the order of blockers (leases by grant, then
// claimants by queue), an agent's waits by resource name, each agent
// expanded once: the loop found is a shortest one, the same on every host,
// and the cost grows with the edges reachable.
func (m *Machine) findCycle(res *resource, actor *agent, mode string, held bool) []string {
	type frame struct {
		agent  *agent
		parent int // index of the frame that led here, -1 for roots
		via    *resource
	}
	m.epoch++
	actor.mark = m.epoch
	var frames []frame
	m.blockers(res, actor, mode, held, func(b *agent, _ *lease) bool {
		if b.mark != m.epoch {
			b.mark = m.epoch
			frames = append(frames, frame{agent: b, parent: -1})
		}
		return true
	})
	for i := 0; i < len(frames); i++ {
		a := frames[i].agent
		waits := a.waits
		if m.sem < 2 {
			// Semantics 1 searched an agent's waits in the order it began them.
			waits = slices.Clone(waits)
			slices.SortFunc(waits, func(x, y *waiter) int { return cmp.Compare(x.seq, y.seq) })
		}
		for _, w := range waits {
			wres := w.res
			found := false
			m.blockers(wres, a, w.mode, w.ask != nil, func(b *agent, _ *lease) bool {
				if b == actor {
					found = true
					return false
				}
				if b.mark != m.epoch {
					b.mark = m.epoch
					frames = append(frames, frame{agent: b, parent: i, via: wres})
				}
				return true
			})
			if found {
				// Rebuild the path from the root.
				rev := []string{wres.name, a.did}
				for j := i; frames[j].parent >= 0; j = frames[j].parent {
					rev = append(rev, frames[j].via.name, frames[frames[j].parent].agent.did)
				}
				cycle := make([]string, 0, len(rev)+2)
				cycle = append(cycle, actor.did, res.name)
				for k := len(rev) - 1; k >= 0; k-- {
					cycle = append(cycle, rev[k])
				}
				return cycle
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
	m.deadlocks.add(deadlockPair{actor, resName, holder, waitingOn, m.now})
	return m.deadlockResult(resName, cycle)
}

// dropWaiter takes w off its queue. A held ask of w's must have been
// answered already, unless the caller answers it (a pass's grant); a claim
// that ends so starts a pass there.
func (m *Machine) dropWaiter(res *resource, w *waiter) {
	m.changed = true
	if w.ask != nil {
		m.detachAsk(w.ask)
	}
	if m.hasClaim(res, w) {
		m.markDirty(res)
	}
	if i := slices.Index(res.waiters, w); i >= 0 {
		res.waiters = slices.Delete(res.waiters, i, i+1)
		m.nwaiters--
	}
	if a := w.owner; a != nil {
		if i := slices.Index(a.waits, w); i >= 0 {
			a.waits = slices.Delete(a.waits, i, i+1)
		}
	}
	m.timers.remove(&w.timer)
	m.timers.remove(&w.claim)
	m.mayBeIdle(res, w.owner)
}

// removeLease takes l off its resource, its agent and the heap.
func (m *Machine) removeLease(l *lease) {
	res, a := l.res, l.owner
	if i := slices.Index(res.leases, l); i >= 0 {
		res.leases = slices.Delete(res.leases, i, i+1)
		m.nleases--
	}
	if i := slices.Index(a.leases, l); i >= 0 {
		a.leases = slices.Delete(a.leases, i, i+1)
	}
	m.timers.remove(&l.timer)
	m.mayBeIdle(res, a)
}

func (m *Machine) release(c Command) Result {
	a := m.agents[c.ActorDid]
	res := m.resources[c.Resource]
	var own *lease
	if res != nil {
		own = res.leaseOf(a)
	}
	if c.HasLeaseID && (own == nil || own.id != c.LeaseID) {
		return m.staleResult(c)
	}
	if own != nil {
		m.changed = true
		m.removeLease(own)
		a.trust2 += releaseTrust2
		m.event("coordination.release", m.now, a, own, releaseTrust2)
		m.markDirty(res)
	}
	if res != nil {
		if w := res.waiterOf(a); w != nil {
			if w.ask != nil {
				m.endAsk(w.ask, m.cancelledResult(w.ask), false)
			}
			m.dropWaiter(res, w)
		}
	}
	return m.releasedResult(own)
}

func (m *Machine) suspend(did string) Result {
	a := m.agents[did]
	if a == nil {
		a = m.addAgent(did)
	}
	if !a.suspended {
		a.suspended = true
		m.changed = true
		// Only a change of state emits an event: suspending again is a no-op
		// (a suspended agent holds and waits on nothing), like resume. The
		// operator's act comes before the revocations it causes.
		m.event("operator.suspend", m.now, a, nil, 0)
	}
	// Its held asks end first, in resource name order.
	for _, w := range a.waits {
		if w.ask != nil {
			m.endAsk(w.ask, suspendedResult(did), false)
		}
	}
	// Revoke in resource name order; the agent's own list, so the cost
	// follows what it holds.
	held := slices.Clone(a.leases)
	slices.SortFunc(held, func(x, y *lease) int { return cmpString(x.res.name, y.res.name) })
	for _, l := range held {
		m.removeLease(l)
		m.event("coordination.revoke", m.now, a, l, 0)
		m.markDirty(l.res)
	}
	for len(a.waits) > 0 {
		w := a.waits[0]
		m.dropWaiter(w.res, w)
	}
	return m.suspendedAnswer(did, held)
}

func (m *Machine) resume(did string) Result {
	if a := m.agents[did]; a != nil && a.suspended {
		a.suspended = false
		m.changed = true
		m.event("operator.resume", m.now, a, nil, 0)
		m.mayBeIdle(nil, a)
	}
	return m.resumedAnswer(did)
}

// forget drops the trust record of an agent that holds and waits on
// nothing and is not suspended.
func (m *Machine) forget(did string) Result {
	a := m.agents[did]
	if a == nil {
		return m.forgotAnswer(false)
	}
	if a.suspended || len(a.leases) > 0 || len(a.waits) > 0 {
		return m.busyResult(a)
	}
	m.changed = true
	m.event("operator.forget", m.now, a, nil, 0)
	delete(m.agents, did)
	return m.forgotAnswer(true)
}

func (res *resource) class() string {
	if res.shared {
		return "read-shared"
	}
	return "exclusive"
}

func (m *Machine) sortedDids() []string {
	dids := make([]string, 0, len(m.agents))
	for d := range m.agents {
		dids = append(dids, d)
	}
	sort.Strings(dids)
	return dids
}

// LeaseID is the id of the lease granted on resource with fence: ids are
// derived, never drawn, so every host names a lease alike.
func LeaseID(resource string, fence int64) string { return leaseID(resource, fence) }
