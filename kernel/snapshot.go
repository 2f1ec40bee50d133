package kernel

import (
	"errors"
	"sort"
	"strconv"
)

// snapshotVersion is written into every snapshot; Restore refuses others.
const snapshotVersion = 1

// Snapshot is the machine's whole state as canonical JSON: the same state
// gives the same bytes on every host, and Restore(Snapshot()) continues
// exactly as the original would. Resources that never had a lease are
// left out; those that had keep their fence, so fences only rise.
func (m *Machine) Snapshot() []byte {
	b := append(make([]byte, 0, 1024), `{"v":`...)
	b = appendInt(b, snapshotVersion)
	b = append(b, `,"rules":`...)
	b = m.rules.AppendJSON(b)
	b = append(b, `,"nowMs":`...)
	b = appendInt(b, m.now)
	b = append(b, `,"seq":`...)
	b = strconvAppendUint(b, m.seq)
	b = append(b, `,"resources":[`...)
	names := make([]string, 0, len(m.resources))
	for name, res := range m.resources {
		if res.fence > 0 || len(res.waiters) > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		res := m.resources[name]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, name)
		b = append(b, `,"fence":`...)
		b = appendInt(b, res.fence)
		b = append(b, `,"leases":[`...)
		for j, l := range res.leases {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"holder":`...)
			b = appendString(b, l.holder)
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
			b = appendString(b, w.actor)
			b = append(b, `,"mode":"`...)
			b = append(b, w.mode...)
			b = append(b, `","sinceMs":`...)
			b = appendInt(b, w.since)
			b = append(b, `,"lastAskMs":`...)
			b = appendInt(b, w.lastAsk)
			b = append(b, `,"seq":`...)
			b = strconvAppendUint(b, w.seq)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	b = append(b, `],"agents":[`...)
	dids := make([]string, 0, len(m.agents))
	for d := range m.agents {
		dids = append(dids, d)
	}
	sort.Strings(dids)
	for i, d := range dids {
		a := m.agents[d]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"did":`...)
		b = appendString(b, d)
		b = append(b, `,"trustHalves":`...)
		b = appendInt(b, a.trust2)
		if a.suspended {
			b = append(b, `,"suspended":true}`...)
		} else {
			b = append(b, `,"suspended":false}`...)
		}
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

func strconvAppendUint(b []byte, n uint64) []byte { return appendInt(b, int64(n)) }

// snapState is a decoded snapshot, before its checks.
type snapState struct {
	v         int64
	rules     []string
	now, seq  int64
	resources []snapResource
	agents    []snapAgent
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
	actor, mode         string
	since, lastAsk, seq int64
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
		"rules": func(raw []byte) error {
			r, err := ParseRules(raw)
			s.rules = r.ReadShared
			return err
		},
		"nowMs": intInto(&s.now),
		"seq":   intInto(&s.seq),
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

// Restore rebuilds a machine from a Snapshot. It checks the snapshot's
// shape and the invariants it relies on, and refuses what breaks them.
func Restore(b []byte) (*Machine, error) {
	s, err := decodeSnapshot(b)
	if err != nil {
		return nil, errors.New("restore: snapshot does not decode: " + err.Error())
	}
	if s.v != snapshotVersion {
		return nil, errors.New("restore: snapshot version " + strconv.FormatInt(s.v, 10) + ", want " + strconv.Itoa(snapshotVersion))
	}
	q := strconv.Quote
	m := New(Rules{ReadShared: s.rules})
	m.now, m.seq = s.now, uint64(s.seq)
	for _, a := range s.agents {
		if err := validActor(a.did); err != nil {
			return nil, errors.New("restore: agent: " + err.Error())
		}
		ag := newAgent(a.did)
		ag.trust2, ag.suspended = a.trust2, a.suspended
		m.agents[a.did] = ag
	}
	var waits []*waiter
	for _, rs := range s.resources {
		if err := validResource(rs.name); err != nil {
			return nil, errors.New("restore: " + err.Error())
		}
		if m.resources[rs.name] != nil {
			return nil, errors.New("restore: resource " + q(rs.name) + " twice")
		}
		res := m.resourceFor(rs.name)
		res.fence = rs.fence
		for _, ls := range rs.leases {
			owner := m.agents[ls.holder]
			switch {
			case owner == nil:
				return nil, errors.New("restore: lease holder " + q(ls.holder) + " is not an agent")
			case ls.fence < 1 || ls.fence > rs.fence:
				return nil, errors.New("restore: lease fence out of range on " + q(rs.name))
			case !validMode(ls.mode):
				return nil, errors.New("restore: lease mode " + q(ls.mode))
			case res.leaseOf(ls.holder) != nil:
				return nil, errors.New("restore: " + q(ls.holder) + " holds two leases on " + q(rs.name))
			}
			l := &lease{owner: owner, id: leaseID(rs.name, ls.fence), holder: ls.holder, mode: ls.mode, fence: ls.fence, grantedAt: ls.granted}
			l.timer = timer{at: ls.expiresAt, res: res, lease: l}
			res.leases = append(res.leases, l)
			m.timers.push(&l.timer)
		}
		for _, ws := range rs.waiters {
			a := m.agents[ws.actor]
			switch {
			case a == nil:
				return nil, errors.New("restore: waiter " + q(ws.actor) + " is not an agent")
			case !validMode(ws.mode):
				return nil, errors.New("restore: waiter mode " + q(ws.mode))
			case res.waiterOf(ws.actor) != nil:
				return nil, errors.New("restore: " + q(ws.actor) + " waits twice on " + q(rs.name))
			}
			w := &waiter{owner: a, actor: ws.actor, mode: ws.mode, since: ws.since, seq: uint64(ws.seq), lastAsk: ws.lastAsk}
			w.timer = timer{at: ws.lastAsk + WaiterTTLMs, res: res, waiter: w}
			res.waiters = append(res.waiters, w)
			waits = append(waits, w)
			m.timers.push(&w.timer)
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i].seq < waits[j].seq })
	for _, w := range waits {
		w.owner.waits = append(w.owner.waits, w)
	}
	m.deadlocks = s.deadlocks
	if got := m.Snapshot(); string(got) != string(b) {
		return nil, errors.New("restore: snapshot is not in canonical form (fields out of order, or state the kernel cannot reach)")
	}
	return m, nil
}

func validMode(s string) bool { return s == "read" || s == "write" || s == "delete" }
