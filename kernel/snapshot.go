package kernel

import (
	"errors"
	"sort"
	"strconv"
)

// snapshotVersion is written into every snapshot. Restore reads it and
// version 1 (leaseplane 0.1's, semantics 1), which it converts.
const snapshotVersion = 2

// Snapshot is the machine's whole state as canonical JSON: the same state
// gives the same bytes on every host, and Restore(Snapshot()) continues
// exactly as the original would. It holds what is live (resources with a
// lease or a waiter), the trust table, the suspended agents and the fence
// counter, so it grows with what is live, not with what was ever seen.
func (m *Machine) Snapshot() []byte {
	b := append(make([]byte, 0, 1024), `{"v":`...)
	b = appendInt(b, snapshotVersion)
	b = append(b, `,"rules":`...)
	b = m.rules.AppendJSON(b)
	b = append(b, `,"nowMs":`...)
	b = appendInt(b, m.now)
	b = append(b, `,"seq":`...)
	b = strconvAppendUint(b, m.seq)
	b = append(b, `,"fence":`...)
	b = appendInt(b, m.fence)
	b = append(b, `,"trust":`...)
	b = m.appendTrust(b)
	b = append(b, `,"suspended":[`...)
	n := 0
	for _, d := range m.sortedDids() {
		if m.agents[d].suspended {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = appendString(b, d)
		}
	}
	b = append(b, `],"resources":[`...)
	n = 0
	m.index.from("", func(res *resource) bool {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"name":`...)
		b = append(b, res.nameJSON...)
		b = append(b, `,"leases":[`...)
		for j, l := range res.leases {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"holder":`...)
			b = append(b, l.owner.didJSON...)
			b = append(b, `,"mode":"`...)
			b = append(b, l.mode...)
			b = append(b, `","fence":`...)
			b = appendInt(b, l.fence)
			b = append(b, `,"grantedAtMs":`...)
			b = appendInt(b, l.grantedAt)
			b = append(b, `,"expiresAtMs":`...)
			b = appendInt(b, l.at)
			b = append(b, '}')
		}
		b = append(b, `],"waiters":[`...)
		for j, w := range res.waiters {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"actorDid":`...)
			b = append(b, w.owner.didJSON...)
			b = append(b, `,"mode":"`...)
			b = append(b, w.mode...)
			b = append(b, `","sinceMs":`...)
			b = appendInt(b, w.since)
			b = append(b, `,"lastAskMs":`...)
			b = appendInt(b, w.lastAsk)
			b = append(b, `,"heldAtMs":`...)
			b = appendInt(b, w.heldAt)
			b = append(b, `,"waitMs":`...)
			b = appendInt(b, w.waitMs)
			b = append(b, `,"seq":`...)
			b = strconvAppendUint(b, w.seq)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
		return true
	})
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

func strconvAppendUint(b []byte, n uint64) []byte { return appendInt(b, int64(n)) }

// snapState is a decoded snapshot, before its checks.
type snapState struct {
	v         int64
	rules     Rules
	now, seq  int64
	fence     int64
	resources []snapResource
	agents    []snapAgent // version 1; version 2 keeps trust and suspended
	trust     []snapAgent
	suspended []string
	deadlocks []deadlockPair
}

type snapResource struct {
	name    string
	fence   int64
	leases  []snapLease
	waiters []snapWaiter
}

type snapLease struct {
	holder, mode              string
	fence, granted, expiresAt int64
}

type snapWaiter struct {
	actor, mode                         string
	since, lastAsk, seq, heldAt, waitMs int64
	hasClaim                            bool // heldAtMs and waitMs were given (version 2)
}

type snapAgent struct {
	did       string
	trust2    int64
	suspended bool
}

// fieldDecoders maps a member name to what reads its raw value.
type fieldDecoders map[string]func(raw []byte) error

func decodeObject(raw []byte, fs fieldDecoders) error {
	return ScanObject(raw, func(name string, v []byte) error {
		f := fs[name]
		if f == nil {
			return errors.New("unknown field " + quoteField(name))
		}
		if err := f(v); err != nil {
			return errors.New(name + ": " + err.Error())
		}
		return nil
	})
}

func intInto(p *int64) func([]byte) error {
	return func(raw []byte) error {
		n, ok := intValue(raw)
		if !ok {
			return errors.New("want an integer")
		}
		*p = n
		return nil
	}
}

func stringInto(p *string) func([]byte) error {
	return func(raw []byte) (err error) {
		*p, err = Unquote(raw)
		return err
	}
}

func boolInto(p *bool) func([]byte) error {
	return func(raw []byte) error {
		switch string(raw) {
		case "true":
			*p = true
		case "false":
			*p = false
		default:
			return errors.New("want true or false")
		}
		return nil
	}
}

func arrayOf(each func(raw []byte) error) func([]byte) error {
	return func(raw []byte) error { return ScanArray(raw, each) }
}

// decodeSnapshot reads a snapshot with the kernel's own reader: no
// reflection, so restoring is as cheap inside WebAssembly as it can be.
func decodeSnapshot(b []byte) (snapState, error) {
	var s snapState
	err := decodeObject(b, fieldDecoders{
		"v": intInto(&s.v),
		"rules": func(raw []byte) (err error) {
			s.rules, err = ParseRules(raw)
			return err
		},
		"nowMs": intInto(&s.now),
		"seq":   intInto(&s.seq),
		"fence": intInto(&s.fence),
		"trust": func(raw []byte) error {
			return ScanObject(raw, func(did string, v []byte) error {
				h, ok := halvesValue(v)
				if !ok {
					return errors.New("trust of " + strconv.Quote(did) + ": want a multiple of 0.5")
				}
				s.trust = append(s.trust, snapAgent{did: did, trust2: h})
				return nil
			})
		},
		"suspended": arrayOf(func(raw []byte) error {
			d, err := Unquote(raw)
			s.suspended = append(s.suspended, d)
			return err
		}),
		"resources": arrayOf(func(raw []byte) error {
			var r snapResource
			err := decodeObject(raw, fieldDecoders{
				"name":  stringInto(&r.name),
				"fence": intInto(&r.fence),
				"leases": arrayOf(func(raw []byte) error {
					var l snapLease
					err := decodeObject(raw, fieldDecoders{
						"holder": stringInto(&l.holder), "mode": stringInto(&l.mode), "fence": intInto(&l.fence),
						"grantedAtMs": intInto(&l.granted), "expiresAtMs": intInto(&l.expiresAt),
					})
					r.leases = append(r.leases, l)
					return err
				}),
				"waiters": arrayOf(func(raw []byte) error {
					var w snapWaiter
					err := decodeObject(raw, fieldDecoders{
						"actorDid": stringInto(&w.actor), "mode": stringInto(&w.mode), "sinceMs": intInto(&w.since),
						"lastAskMs": intInto(&w.lastAsk), "seq": intInto(&w.seq),
						"heldAtMs": func(raw []byte) error { w.hasClaim = true; return intInto(&w.heldAt)(raw) },
						"waitMs":   intInto(&w.waitMs),
					})
					r.waiters = append(r.waiters, w)
					return err
				}),
			})
			s.resources = append(s.resources, r)
			return err
		}),
		"agents": arrayOf(func(raw []byte) error {
			var a snapAgent
			err := decodeObject(raw, fieldDecoders{
				"did": stringInto(&a.did), "trustHalves": intInto(&a.trust2), "suspended": boolInto(&a.suspended),
			})
			s.agents = append(s.agents, a)
			return err
		}),
		"deadlocks": arrayOf(func(raw []byte) error {
			var d deadlockPair
			err := decodeObject(raw, fieldDecoders{
				"actorDid": stringInto(&d.actor), "resource": stringInto(&d.resource), "holder": stringInto(&d.holder),
				"waitingOn": stringInto(&d.waitingOn), "atMs": intInto(&d.at),
			})
			s.deadlocks = append(s.deadlocks, d)
			return err
		}),
	})
	return s, err
}

// halvesValue reads a trust score as written by appendHalves: an integer,
// or one ending in .5.
func halvesValue(raw []byte) (int64, bool) {
	s := string(raw)
	half := int64(0)
	if len(s) > 2 && s[len(s)-2:] == ".5" {
		s, half = s[:len(s)-2], 1
	}
	n, ok := intValue([]byte(s))
	if !ok {
		return 0, false
	}
	h := 2*max(n, -n) + half
	if s[0] == '-' {
		h = -h
	}
	return h, true
}

// Restore rebuilds a machine from a Snapshot. It checks the snapshot's
// shape and the invariants it relies on, and refuses what breaks them. A
// version 1 snapshot (leaseplane 0.1) is converted: the workspace's fence
// counter starts at the largest fence of any resource, so fences still
// only rise; idle resources and trust-0 idle agents are dropped; a waiter's
// claim window is taken from its last request and its place in the queue.
// The machine then decides by semantics 1, each resource's fence counter
// kept, until its host calls SetSemantics.
func Restore(b []byte) (*Machine, error) {
	s, err := decodeSnapshot(b)
	if err != nil {
		return nil, errors.New("restore: snapshot does not decode: " + err.Error())
	}
	switch s.v {
	case snapshotVersion:
	case 1:
		return restoreV1(s)
	default:
		return nil, errors.New("restore: snapshot version " + strconv.FormatInt(s.v, 10) + ", want 1 or " + strconv.Itoa(snapshotVersion))
	}
	m, err := build(s)
	if err != nil {
		return nil, err
	}
	if got := m.Snapshot(); string(got) != string(b) {
		return nil, errors.New("restore: snapshot is not in canonical form (fields out of order, or state the kernel cannot reach)")
	}
	return m, nil
}

// restoreV1 converts a version 1 snapshot.
func restoreV1(s snapState) (*Machine, error) {
	for _, a := range s.agents {
		s.trust = append(s.trust, snapAgent{did: a.did, trust2: a.trust2})
		if a.suspended {
			s.suspended = append(s.suspended, a.did)
		}
	}
	fences1 := map[string]int64{}
	live := s.resources[:0]
	for _, r := range s.resources {
		s.fence = max(s.fence, r.fence)
		fences1[r.name] = r.fence
		if len(r.leases) > 0 || len(r.waiters) > 0 {
			for i := range r.waiters {
				w := &r.waiters[i]
				w.heldAt, w.waitMs = w.lastAsk, BackoffMs(i+1)
			}
			live = append(live, r)
		}
	}
	s.resources = live
	m, err := build(s)
	if err != nil {
		return nil, err
	}
	for _, a := range m.agents {
		m.mayBeIdle(nil, a)
	}
	m.forgetIdle()
	// It goes on deciding as 0.1 did until its host says otherwise
	// (SetSemantics), so commands 0.1 logged after the snapshot replay alike.
	m.sem, m.fences1 = 1, fences1
	return m, nil
}

// build makes the machine a decoded snapshot describes.
func build(s snapState) (*Machine, error) {
	q := strconv.Quote
	m := New(s.rules)
	m.now, m.seq, m.fence = s.now, uint64(s.seq), s.fence
	if m.now < 0 || m.now > MaxNowMs || m.fence < 0 || s.seq < 0 {
		return nil, errors.New("restore: nowMs, seq or fence out of range")
	}
	for _, a := range s.trust {
		if err := validActor(a.did); err != nil {
			return nil, errors.New("restore: agent: " + err.Error())
		}
		if m.agents[a.did] != nil {
			return nil, errors.New("restore: agent " + q(a.did) + " twice")
		}
		ag := newAgent(a.did)
		ag.trust2 = a.trust2
		m.agents[a.did] = ag
	}
	for _, d := range s.suspended {
		a := m.agents[d]
		if a == nil {
			return nil, errors.New("restore: suspended agent " + q(d) + " has no trust record")
		}
		a.suspended = true
	}
	var waits []*waiter
	for _, rs := range s.resources {
		if err := validResource(rs.name); err != nil {
			return nil, errors.New("restore: " + err.Error())
		}
		if m.resources[rs.name] != nil {
			return nil, errors.New("restore: resource " + q(rs.name) + " twice")
		}
		res := m.addResource(rs.name)
		var last int64
		for _, ls := range rs.leases {
			owner := m.agents[ls.holder]
			switch {
			case owner == nil || owner.suspended:
				return nil, errors.New("restore: lease holder " + q(ls.holder) + " is not an agent, or is suspended")
			case ls.fence < 1 || ls.fence > m.fence || ls.fence <= last:
				// (Fences may repeat across resources: 0.1 counted them per
				// resource, and its leases may still be live.)
				return nil, errors.New("restore: lease fence out of range or order on " + q(rs.name))
			case !validMode(ls.mode):
				return nil, errors.New("restore: lease mode " + q(ls.mode))
			case res.leaseOf(owner) != nil:
				return nil, errors.New("restore: " + q(ls.holder) + " holds two leases on " + q(rs.name))
			case ls.expiresAt <= m.now:
				return nil, errors.New("restore: a lease on " + q(rs.name) + " has expired")
			}
			last = ls.fence
			l := &lease{owner: owner, id: leaseID(rs.name, ls.fence), mode: ls.mode, fence: ls.fence, grantedAt: ls.granted}
			l.timer = timer{at: ls.expiresAt, res: res, lease: l}
			res.leases = append(res.leases, l)
			owner.leases = append(owner.leases, l)
			m.nleases++
			m.timers.push(&l.timer)
		}
		for _, ws := range rs.waiters {
			a := m.agents[ws.actor]
			switch {
			case a == nil || a.suspended:
				return nil, errors.New("restore: waiter " + q(ws.actor) + " is not an agent, or is suspended")
			case !validMode(ws.mode):
				return nil, errors.New("restore: waiter mode " + q(ws.mode))
			case res.waiterOf(a) != nil:
				return nil, errors.New("restore: " + q(ws.actor) + " waits twice on " + q(rs.name))
			case ws.lastAsk+WaiterTTLMs <= m.now:
				return nil, errors.New("restore: a waiter on " + q(rs.name) + " has lapsed")
			case ws.seq < 1 || uint64(ws.seq) > m.seq || ws.waitMs < 0 || ws.waitMs > MaxWaitMs:
				return nil, errors.New("restore: waiter seq or waitMs out of range on " + q(rs.name))
			}
			w := &waiter{owner: a, mode: ws.mode, since: ws.since, seq: uint64(ws.seq), lastAsk: ws.lastAsk,
				heldAt: ws.heldAt, waitMs: ws.waitMs}
			w.timer = timer{at: ws.lastAsk + WaiterTTLMs, res: res, waiter: w, kind: timerLapse}
			w.claim = timer{at: w.claimUntil(), res: res, waiter: w, kind: timerClaim, idx: -1}
			res.waiters = append(res.waiters, w)
			m.nwaiters++
			waits = append(waits, w)
			m.timers.push(&w.timer)
			if w.claim.at > m.now {
				m.timers.push(&w.claim)
			}
		}
		if len(res.leases) == 0 && len(res.waiters) == 0 && s.v == snapshotVersion {
			return nil, errors.New("restore: resource " + q(rs.name) + " has no lease and no waiter")
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i].res.name < waits[j].res.name })
	for _, w := range waits {
		w.owner.waits = append(w.owner.waits, w)
	}
	if s.v == snapshotVersion {
		for _, a := range m.agents {
			if a.idle() {
				return nil, errors.New("restore: agent " + q(a.did) + " has trust 0 and nothing live: it would be forgotten")
			}
		}
	}
	m.deadlocks = s.deadlocks
	return m, nil
}

func validMode(s string) bool { return s == "read" || s == "write" || s == "delete" }
