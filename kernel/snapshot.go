package kernel

import (
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel/internal/jsontext"
)

// snapshotVersion is written into every snapshot (3: held asks, each
// waiter's claim end). Restore reads it, version 2 and version 1
// (leaseplane 0.1's, semantics 1), which it converts.
const snapshotVersion = 3

// snapState is a decoded snapshot, before its checks.
type snapState struct {
	v         int64
	rules     Rules
	now, seq  int64
	fence     int64
	askSeq    int64
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
	claimEnd                            int64
	hasClaimEnd                         bool // claimUntilMs was given (version 3)
	askID                               string
	askUntil                            int64
	hasAsk                              bool
}

type snapAgent struct {
	did       string
	trust2    int64
	suspended bool
}

// fieldDecoders maps a member name to what reads its raw value.
type fieldDecoders map[string]func(raw []byte) error

func decodeObject(raw []byte, fs fieldDecoders) error {
	return jsontext.ReadObject(raw, jsontext.Options{}, func(name []byte, v jsontext.Value) error {
		f := fs[string(name)]
		if f == nil {
			return errors.New("unknown field " + jsontext.QuoteField(string(name)))
		}
		if err := f(v.Raw); err != nil {
			return errors.New(string(name) + ": " + err.Error())
		}
		return nil
	})
}

func intInto(p *int64) func([]byte) error {
	return func(raw []byte) error {
		n, ok := jsontext.Int(raw)
		if !ok {
			return errors.New("want an integer")
		}
		*p = n
		return nil
	}
}

func stringInto(p *string) func([]byte) error {
	return func(raw []byte) (err error) {
		*p, err = jsontext.Unquote(raw)
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

// objectsOf decodes an array of objects, each into a new element of *dst
// by the field decoders fields makes for it.
func objectsOf[T any](dst *[]T, fields func(*T) fieldDecoders) func([]byte) error {
	return arrayOf(func(raw []byte) error {
		var v T
		err := decodeObject(raw, fields(&v))
		*dst = append(*dst, v)
		return err
	})
}

func arrayOf(each func(raw []byte) error) func([]byte) error {
	return func(raw []byte) error {
		return jsontext.ReadArray(raw, func(v jsontext.Value) error { return each(v.Raw) })
	}
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
		"nowMs":      intInto(&s.now),
		"seq":        intInto(&s.seq),
		"fence":      intInto(&s.fence),
		"askCounter": intInto(&s.askSeq),
		"trust": func(raw []byte) error {
			return jsontext.ReadObject(raw, jsontext.Options{}, func(name []byte, v jsontext.Value) error {
				did := string(name)
				h, ok := jsontext.Halves(v.Raw)
				if !ok {
					return errors.New("trust of " + strconv.Quote(did) + ": want a multiple of 0.5")
				}
				s.trust = append(s.trust, snapAgent{did: did, trust2: h})
				return nil
			})
		},
		"suspended": arrayOf(func(raw []byte) error {
			d, err := jsontext.Unquote(raw)
			s.suspended = append(s.suspended, d)
			return err
		}),
		"resources": arrayOf(func(raw []byte) error {
			var r snapResource
			err := decodeObject(raw, fieldDecoders{
				"name":  stringInto(&r.name),
				"fence": intInto(&r.fence),
				"leases": objectsOf(&r.leases, func(l *snapLease) fieldDecoders {
					return fieldDecoders{
						"holder": stringInto(&l.holder), "mode": stringInto(&l.mode), "fence": intInto(&l.fence),
						"grantedAtMs": intInto(&l.granted), "expiresAtMs": intInto(&l.expiresAt),
					}
				}),
				"waiters": objectsOf(&r.waiters, func(w *snapWaiter) fieldDecoders {
					return fieldDecoders{
						"actorDid": stringInto(&w.actor), "mode": stringInto(&w.mode), "sinceMs": intInto(&w.since),
						"lastAskMs": intInto(&w.lastAsk), "seq": intInto(&w.seq),
						"heldAtMs": func(raw []byte) error { w.hasClaim = true; return intInto(&w.heldAt)(raw) },
						"waitMs":   intInto(&w.waitMs),
						"claimUntilMs": func(raw []byte) error {
							w.hasClaimEnd = true
							return intInto(&w.claimEnd)(raw)
						},
						"ask": func(raw []byte) error {
							w.hasAsk = true
							return decodeObject(raw, fieldDecoders{"id": stringInto(&w.askID), "untilMs": intInto(&w.askUntil)})
						},
					}
				}),
			})
			s.resources = append(s.resources, r)
			return err
		}),
		"agents": objectsOf(&s.agents, func(a *snapAgent) fieldDecoders {
			return fieldDecoders{"did": stringInto(&a.did), "trustHalves": intInto(&a.trust2), "suspended": boolInto(&a.suspended)}
		}),
		"deadlocks": objectsOf(&s.deadlocks, func(d *deadlockPair) fieldDecoders {
			return fieldDecoders{
				"actorDid": stringInto(&d.actor), "resource": stringInto(&d.resource), "holder": stringInto(&d.holder),
				"waitingOn": stringInto(&d.waitingOn), "atMs": intInto(&d.at),
			}
		}),
	})
	return s, err
}

// SnapshotFence is the workspace's fence counter that snapshot holds: the
// last fence granted. It refuses what Restore refuses.
func SnapshotFence(snapshot []byte) (int64, error) {
	m, err := Restore(snapshot)
	if err != nil {
		return 0, err
	}
	return m.fence, nil
}

// WithFence is snapshot with the workspace's fence counter raised to
// fence, everything else as it was: a host that must never hand out a
// fence again (a restored backup) restores the machine from it. A fence
// below the counter is refused: fences only rise.
func WithFence(snapshot []byte, fence int64) ([]byte, error) {
	m, err := Restore(snapshot)
	if err != nil {
		return nil, err
	}
	if fence < m.fence {
		return nil, errors.New("with fence: " + strconv.FormatInt(fence, 10) + " is below the counter " + strconv.FormatInt(m.fence, 10) + "; fences only rise")
	}
	m.fence = fence
	return m.Snapshot(), nil
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
	case 2:
		// Claims then lasted waitMs + 1000 ms after the last lease_held
		// answer; there were no held asks.
		for i := range s.resources {
			for j := range s.resources[i].waiters {
				w := &s.resources[i].waiters[j]
				if w.hasClaimEnd || w.hasAsk {
					return nil, errors.New("restore: a version 2 snapshot has no claimUntilMs or ask")
				}
				w.claimEnd, w.hasClaimEnd = w.heldAt+w.waitMs+ClaimGraceMs2, true
			}
		}
		return build(s)
	case 1:
		return restoreV1(s)
	default:
		return nil, errors.New("restore: snapshot version " + strconv.FormatInt(s.v, 10) + ", want 1 to " + strconv.Itoa(snapshotVersion))
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
				w.claimEnd = w.heldAt + w.waitMs + ClaimGraceMs2
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
	m.now, m.seq, m.fence, m.askSeq = s.now, uint64(s.seq), s.fence, uint64(s.askSeq)
	if m.now < 0 || m.now > MaxNowMs || m.fence < 0 || s.seq < 0 || s.askSeq < 0 {
		return nil, errors.New("restore: nowMs, seq, fence or askCounter out of range")
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
				heldAt: ws.heldAt, waitMs: ws.waitMs, claimEnd: ws.claimEnd}
			w.timer = timer{at: ws.lastAsk + WaiterTTLMs, res: res, waiter: w, kind: timerLapse}
			w.claim = timer{at: w.claimUntil(), res: res, waiter: w, kind: timerClaim, idx: -1}
			res.waiters = append(res.waiters, w)
			m.nwaiters++
			waits = append(waits, w)
			if ws.hasAsk {
				n, err := strconv.ParseUint(strings.TrimPrefix(ws.askID, "ask_"), 10, 64)
				switch {
				case !validAskID(ws.askID) || err != nil || n < 1 || n > m.askSeq || m.asks[ws.askID] != nil:
					return nil, errors.New("restore: ask id " + q(ws.askID) + " out of range or twice")
				case ws.askUntil <= m.now || ws.askUntil > m.now+MaxWaitUpToMs || ws.claimEnd != ws.askUntil || ws.lastAsk > ws.askUntil:
					return nil, errors.New("restore: ask " + q(ws.askID) + " is due, or its claim is not its untilMs")
				}
				k := &ask{id: ws.askID, n: n, until: ws.askUntil}
				k.timer = timer{at: ws.askUntil, res: res, waiter: w, kind: timerAsk, idx: -1}
				w.ask = k
				m.asks[k.id] = k
				a.nasks++
				res.asks = append(res.asks, k)
				m.timers.push(&k.timer)
				w.timer.at = ws.askUntil + WaiterTTLMs
			}
			m.timers.push(&w.timer)
			if w.claim.at > m.now && w.ask == nil {
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
	var lastAt int64
	for _, d := range s.deadlocks {
		if d.at < lastAt || d.at > m.now || d.at+DeadlockKeepMs <= m.now && s.v == snapshotVersion {
			return nil, errors.New("restore: deadlock pairs out of time order, or older than they are kept")
		}
		lastAt = d.at
		m.deadlocks.add(d)
	}
	return m, nil
}

func validMode(s string) bool { return s == "read" || s == "write" || s == "delete" }
