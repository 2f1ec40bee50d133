package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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

type snapJSON struct {
	V     int `json:"v"`
	Rules struct {
		ReadShared []string `json:"readShared"`
	} `json:"rules"`
	NowMs     int64  `json:"nowMs"`
	Seq       uint64 `json:"seq"`
	Resources []struct {
		Name   string `json:"name"`
		Fence  int64  `json:"fence"`
		Leases []struct {
			Holder      string `json:"holder"`
			Mode        string `json:"mode"`
			Fence       int64  `json:"fence"`
			GrantedAtMs int64  `json:"grantedAtMs"`
			ExpiresAtMs int64  `json:"expiresAtMs"`
		} `json:"leases"`
		Waiters []struct {
			ActorDid  string `json:"actorDid"`
			Mode      string `json:"mode"`
			SinceMs   int64  `json:"sinceMs"`
			LastAskMs int64  `json:"lastAskMs"`
			Seq       uint64 `json:"seq"`
		} `json:"waiters"`
	} `json:"resources"`
	Agents []struct {
		Did         string `json:"did"`
		TrustHalves int64  `json:"trustHalves"`
		Suspended   bool   `json:"suspended"`
	} `json:"agents"`
	Deadlocks []struct {
		ActorDid  string `json:"actorDid"`
		Resource  string `json:"resource"`
		Holder    string `json:"holder"`
		WaitingOn string `json:"waitingOn"`
		AtMs      int64  `json:"atMs"`
	} `json:"deadlocks"`
}

// Restore rebuilds a machine from a Snapshot. It checks the snapshot's
// shape and the invariants it relies on, and refuses what breaks them.
func Restore(b []byte) (*Machine, error) {
	var s snapJSON
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("restore: snapshot is not valid JSON: %w", err)
	}
	if s.V != snapshotVersion {
		return nil, fmt.Errorf("restore: snapshot version %d, want %d", s.V, snapshotVersion)
	}
	m := New(Rules{ReadShared: s.Rules.ReadShared})
	m.now, m.seq = s.NowMs, s.Seq
	for _, a := range s.Agents {
		if err := validActor(a.Did); err != nil {
			return nil, fmt.Errorf("restore: agent: %w", err)
		}
		ag := newAgent(a.Did)
		ag.trust2, ag.suspended = a.TrustHalves, a.Suspended
		m.agents[a.Did] = ag
	}
	var waits []*waiter
	for _, rs := range s.Resources {
		if err := validResource(rs.Name); err != nil {
			return nil, fmt.Errorf("restore: %w", err)
		}
		if m.resources[rs.Name] != nil {
			return nil, fmt.Errorf("restore: resource %q twice", rs.Name)
		}
		res := m.resourceFor(rs.Name)
		res.fence = rs.Fence
		for _, ls := range rs.Leases {
			owner := m.agents[ls.Holder]
			if owner == nil {
				return nil, fmt.Errorf("restore: lease holder %q is not an agent", ls.Holder)
			}
			if ls.Fence < 1 || ls.Fence > rs.Fence {
				return nil, fmt.Errorf("restore: lease fence %d out of range on %q", ls.Fence, rs.Name)
			}
			if !validMode(ls.Mode) {
				return nil, fmt.Errorf("restore: lease mode %q", ls.Mode)
			}
			if res.leaseOf(ls.Holder) != nil {
				return nil, fmt.Errorf("restore: %q holds two leases on %q", ls.Holder, rs.Name)
			}
			l := &lease{owner: owner, id: leaseID(rs.Name, ls.Fence), holder: ls.Holder, mode: ls.Mode, fence: ls.Fence, grantedAt: ls.GrantedAtMs}
			l.timer = timer{at: ls.ExpiresAtMs, res: res, lease: l}
			res.leases = append(res.leases, l)
			m.timers.push(&l.timer)
		}
		for _, ws := range rs.Waiters {
			a := m.agents[ws.ActorDid]
			if a == nil {
				return nil, fmt.Errorf("restore: waiter %q is not an agent", ws.ActorDid)
			}
			if !validMode(ws.Mode) {
				return nil, fmt.Errorf("restore: waiter mode %q", ws.Mode)
			}
			if res.waiterOf(ws.ActorDid) != nil {
				return nil, fmt.Errorf("restore: %q waits twice on %q", ws.ActorDid, rs.Name)
			}
			w := &waiter{owner: a, actor: ws.ActorDid, mode: ws.Mode, since: ws.SinceMs, seq: ws.Seq, lastAsk: ws.LastAskMs}
			w.timer = timer{at: ws.LastAskMs + WaiterTTLMs, res: res, waiter: w}
			res.waiters = append(res.waiters, w)
			waits = append(waits, w)
			m.timers.push(&w.timer)
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i].seq < waits[j].seq })
	for _, w := range waits {
		a := m.agents[w.actor]
		a.waits = append(a.waits, w)
	}
	for _, d := range s.Deadlocks {
		m.deadlocks = append(m.deadlocks, deadlockPair{d.ActorDid, d.Resource, d.Holder, d.WaitingOn, d.AtMs})
	}
	if got := m.Snapshot(); string(got) != string(b) {
		return nil, errors.New("restore: snapshot is not in canonical form (fields out of order, or state the kernel cannot reach)")
	}
	return m, nil
}

func validMode(s string) bool { return s == "read" || s == "write" || s == "delete" }
