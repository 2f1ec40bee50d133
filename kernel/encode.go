package kernel

import (
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel/internal/jsontext"
)

// This file is the one place where the kernel's decisions become bytes:
// answers, events and snapshots, each written in a fixed field order with
// jsontext's canonical writer. The deciding code in machine.go hands it
// small typed values (a lease, a held refusal, a deadlock's cycle) and
// never writes JSON itself. Names are escaped once, when a resource or an
// agent is first seen (nameJSON, didJSON); lease ids are hex and need no
// escaping.

// InvalidAnswer is the body of an invalid_request refusal with msg.
func InvalidAnswer(msg string) []byte { return RefusalAnswer(ReasonInvalid, msg) }

// RefusalAnswer is the body of a refusal with reason and msg for a person,
// {"ok":false,"reason":…,"error":…}: the form of every refusal, the
// kernel's and those a host answers itself (unauthorized, unavailable).
func RefusalAnswer(reason, msg string) []byte {
	b := append([]byte(nil), `{"ok":false,"reason":`...)
	b = stringMember(b, "", reason)
	b = stringMember(b, `,"error":`, msg)
	return append(b, '}')
}

// ActorMismatchAnswer is a host's refusal of an agent key (whose agent is
// keyDID) that names another agent, asked.
func ActorMismatchAnswer(keyDID, asked string) []byte {
	b := append([]byte(nil), `{"ok":false,"reason":"actor_mismatch","keyActorDid":`...)
	b = stringMember(b, "", keyDID)
	b = stringMember(b, `,"actorDid":`, asked)
	b = stringMember(b, `,"error":`, "this key belongs to agent "+keyDID+" and may not act as "+asked)
	return append(b, '}')
}

func invalidResult(msg string) Result {
	return Result{Status: 400, Answer: InvalidAnswer(msg)}
}

func (m *Machine) leaseAnswer(l *lease) Result {
	b := append(m.ans[:0], `{"ok":true,"lease":`...)
	b = appendLease(b, l)
	return Result{Status: 200, Answer: append(b, '}')}
}

func limitResult(name string, max int64, what string) Result {
	b := append([]byte(nil), `{"ok":false,"reason":"limit_exceeded","limit":"`...)
	b = append(b, name...)
	b = intMember(b, `","max":`, max)
	b = stringMember(b, `,"error":`, "the workspace holds its limit of "+strconv.FormatInt(max, 10)+" "+what+"; nothing was changed")
	return Result{Status: 429, RetryAfterSec: 1, Answer: append(b, '}')}
}

func suspendedResult(did string) Result {
	b := append([]byte(nil), `{"ok":false,"reason":"suspended","actorDid":`...)
	b = jsontext.AppendString(b, did)
	b = stringMember(b, `,"error":`, did+" is suspended by an operator")
	return Result{Status: 403, Answer: append(b, '}')}
}

// event appends one event to the command's list. l is nil for operator
// events, which carry no resource or lease.
func (m *Machine) event(typ string, at int64, a *agent, l *lease, trust2 int64) {
	start := len(m.events)
	b := append(m.events, `{"type":"`...)
	b = append(b, typ...)
	b = intMember(b, `","atMs":`, at)
	if l != nil {
		b = append(b, `,"resource":`...)
		b = append(b, l.res.nameJSON...)
		b = append(b, `,"class":"`...)
		b = append(b, l.res.class()...)
		b = append(b, '"')
	}
	b = append(b, `,"actorDid":`...)
	b = append(b, a.didJSON...)
	if l != nil {
		b = append(b, `,"leaseId":"`...)
		b = append(b, l.id...)
		b = intMember(b, `","fence":`, l.fence)
		b = append(b, `,"mode":"`...)
		b = append(b, l.mode...)
		b = intMember(b, `","expiresAtMs":`, l.at)
		b = append(b, `,"trustDelta":`...)
		b = jsontext.AppendHalves(b, trust2)
	}
	m.events = append(b, '}')
	mk := eventMark{typ: typ, at: at, start: start, end: len(m.events), actor: a.did}
	if l != nil {
		mk.resource, mk.leaseID, mk.fence = l.res.name, l.id, l.fence
	}
	m.marks = append(m.marks, mk)
}

// AppendEvents appends events as the JSON array that transcripts show and
// the command log keeps ("[]" when there are none).
func AppendEvents(b []byte, events []Event) []byte {
	b = append(b, '[')
	for i, e := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.JSON...)
	}
	return append(b, ']')
}

// appendLease appends a lease as answers show it. Lease ids are hex and
// need no escaping; names are escaped once, when first seen.
func appendLease(b []byte, l *lease) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, l.id...)
	b = append(b, `","resource":`...)
	b = append(b, l.res.nameJSON...)
	b = openAgentMode(b, `,"holder":`, l.owner, l.mode)
	return closeLease(b, l)
}

// closeLease appends a lease's fence and times and closes its object.
func closeLease(b []byte, l *lease) []byte {
	b = intMember(b, `","fence":`, l.fence)
	b = intMember(b, `,"grantedAtMs":`, l.grantedAt)
	b = intMember(b, `,"expiresAtMs":`, l.at)
	return append(b, '}')
}

// waitAnswer answers a page of the queues: the live resources whose names
// start with c.Prefix and come after c.After, at most c.Limit of them
// (MaxWaitLimit when 0), in name order, with next when more remain; and
// the deadlock pairs on the resources of the page's range. It reads the
// name index from the page's start, so its cost follows the page.
func (m *Machine) waitAnswer(c Command) []byte {
	limit := c.Limit
	if limit <= 0 {
		limit = MaxWaitLimit
	}
	start := c.Prefix
	if c.After >= start {
		start = c.After + "\x00" // the first name above After
	}
	b := append(m.ans[:0], `{"ok":true,"nowMs":`...)
	b = jsontext.AppendInt(b, m.now)
	b = append(b, `,"queues":[`...)
	n := 0
	var last string
	more := false
	m.index.from(start, func(res *resource) bool {
		if !strings.HasPrefix(res.name, c.Prefix) {
			return false
		}
		if n == limit {
			more = true
			return false
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		last = res.name
		b = m.appendQueue(b, res)
		return true
	})
	b = append(b, ']')
	if more {
		b = stringMember(b, `,"next":`, last)
	}
	b = append(b, `,"deadlocks":[`...)
	// On the page's range: the prefix, after After, and up to its last
	// name when more remain.
	for i, d := range m.deadlocks.page(c.Prefix, start, last, more) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDeadlock(b, d.deadlockPair)
	}
	return append(b, "]}"...)
}

func (m *Machine) appendQueue(b []byte, res *resource) []byte {
	b = append(b, `{"resource":`...)
	b = append(b, res.nameJSON...)
	b = append(b, `,"class":"`...)
	b = append(b, res.class()...)
	b = append(b, `","holders":`...)
	b = appendList(b, res.leases, func(b []byte, _ int, l *lease) []byte { return appendLease(b, l) })
	b = append(b, `,"waiters":`...)
	b = appendList(b, res.waiters, func(b []byte, j int, w *waiter) []byte { return appendWaiter(b, w, j < MaxAdmitted) })
	return append(b, '}')
}

func (m *Machine) tickAnswer() []byte {
	b := append(m.ans[:0], `{"ok":true,"nowMs":`...)
	b = jsontext.AppendInt(b, m.now)
	b = append(b, `,"nextAlarmMs":`...)
	if at, ok := m.NextAlarm(); ok {
		b = jsontext.AppendInt(b, at)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

// TrustJSON is every remembered agent's trust score as a JSON object, by
// DID.
func (m *Machine) TrustJSON() []byte {
	return m.appendTrust(make([]byte, 0, 32*len(m.agents)+2))
}

func (m *Machine) appendTrust(b []byte) []byte {
	b = append(b, '{')
	for i, d := range m.sortedDids() {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontext.AppendString(b, d)
		b = append(b, ':')
		b = jsontext.AppendHalves(b, m.agents[d].trust2)
	}
	return append(b, '}')
}

// intMember appends key (a member's name with its punctuation, such as
// `,"fence":`) and n.
func intMember(b []byte, key string, n int64) []byte {
	return jsontext.AppendInt(append(b, key...), n)
}

// stringMember appends key and s as a JSON string.
func stringMember(b []byte, key, s string) []byte {
	return jsontext.AppendString(append(b, key...), s)
}

// held is a lease_held refusal: the other agents whose live leases
// conflict, in grant order, or, when there are none, the claimants the
// asker yields to, in queue order; and the back-off it was told.
type held struct {
	res       *resource
	holders   []*agent
	claimants []*waiter
	waitMs    int64
}

func (m *Machine) heldResult(h held) Result {
	b := append(m.ans[:0], `{"ok":false,"reason":"lease_held","holder":`...)
	if len(h.holders) > 0 {
		b = append(b, h.holders[0].didJSON...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"holders":[`...)
	for i, x := range h.holders {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, x.didJSON...)
	}
	b = append(b, ']')
	if len(h.holders) == 0 {
		b = append(b, `,"claimants":[`...)
		for i, w := range h.claimants {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, w.owner.didJSON...)
		}
		b = append(b, ']')
	}
	b = append(b, `,"stampede":{"admitted":[`...)
	for i, q := range h.res.waiters {
		if i == MaxAdmitted {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, q.owner.didJSON...)
	}
	b = intMember(b, `],"waitMs":`, h.waitMs)
	b = append(b, `},"error":`...)
	if len(h.holders) > 0 {
		b = jsontext.AppendString(b, h.res.name+" is held by "+h.holders[0].did+"; retry after waitMs")
	} else {
		b = jsontext.AppendString(b, h.res.name+" is free but claimed by waiters ahead of you in its queue; retry after waitMs")
	}
	b = append(b, '}')
	return Result{Status: 409, RetryAfterSec: int((h.waitMs + 999) / 1000), Answer: b}
}

// deadlockResult refuses granting resName, which would close cycle (the
// asker, resName, then the agents and resources around the loop).
func (m *Machine) deadlockResult(resName string, cycle []string) Result {
	holder, waitingOn := cycle[2], cycle[3]
	b := append(m.ans[:0], `{"ok":false,"reason":"deadlock","holder":`...)
	b = jsontext.AppendString(b, holder)
	b = stringMember(b, `,"waitingOn":`, waitingOn)
	b = append(b, `,"cycle":`...)
	b = jsontext.AppendStrings(b, cycle)
	b = stringMember(b, `,"error":`, "granting "+resName+" would close a wait cycle: "+holder+" is ahead of you on it and waits on "+waitingOn+"; release what you hold and retry")
	b = append(b, '}')
	return Result{Status: 409, RetryAfterSec: 1, Answer: b}
}

// appendDeadlock appends a refused deadlock pair, as wait answers and
// snapshots show it.
func appendDeadlock(b []byte, d deadlockPair) []byte {
	b = stringMember(b, `{"actorDid":`, d.actor)
	b = stringMember(b, `,"resource":`, d.resource)
	b = stringMember(b, `,"holder":`, d.holder)
	b = stringMember(b, `,"waitingOn":`, d.waitingOn)
	b = intMember(b, `,"atMs":`, d.at)
	return append(b, '}')
}

func (m *Machine) staleResult(c Command) Result {
	b := append(m.ans[:0], `{"ok":false,"reason":"stale_lease","leaseId":`...)
	b = jsontext.AppendString(b, c.LeaseID)
	b = stringMember(b, `,"error":`, "leaseId is not a live lease of "+c.ActorDid+" on "+c.Resource)
	return Result{Status: 409, Answer: append(b, '}')}
}

// releasedResult answers a release of l (nil when nothing was held).
func (m *Machine) releasedResult(l *lease) Result {
	b := append(m.ans[:0], `{"ok":true,"released":`...)
	if l == nil {
		b = append(b, `false,"releasedIds":[]`...)
	} else {
		b = append(b, `true,"releasedIds":["`...)
		b = append(b, l.id...)
		b = append(b, `"]`...)
	}
	return Result{Status: 200, Answer: append(b, '}')}
}

// suspendedAnswer answers the suspension of did, which revoked revoked.
func (m *Machine) suspendedAnswer(did string, revoked []*lease) Result {
	b := append(m.ans[:0], `{"ok":true,"actorDid":`...)
	b = jsontext.AppendString(b, did)
	b = append(b, `,"suspended":true,"revokedIds":[`...)
	for i, l := range revoked {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, l.id...)
		b = append(b, '"')
	}
	return Result{Status: 200, Answer: append(b, "]}"...)}
}

func (m *Machine) resumedAnswer(did string) Result {
	b := append(m.ans[:0], `{"ok":true,"actorDid":`...)
	b = jsontext.AppendString(b, did)
	return Result{Status: 200, Answer: append(b, `,"suspended":false}`...)}
}

func (m *Machine) forgotAnswer(forgot bool) Result {
	if forgot {
		return Result{Status: 200, Answer: append(m.ans[:0], `{"ok":true,"forgot":true}`...)}
	}
	return Result{Status: 200, Answer: append(m.ans[:0], `{"ok":true,"forgot":false}`...)}
}

// busyResult refuses to forget a, which holds, waits or is suspended.
func (m *Machine) busyResult(a *agent) Result {
	why := " holds or waits on leases"
	if a.suspended {
		why = " is suspended (resume it first)"
	}
	b := append(m.ans[:0], `{"ok":false,"reason":"agent_busy","actorDid":`...)
	b = jsontext.AppendString(b, a.did)
	b = stringMember(b, `,"error":`, "cannot forget "+a.did+": it"+why)
	return Result{Status: 409, Answer: append(b, '}')}
}

// appendList appends xs as a JSON array, each element written by f (which
// gets its index).
func appendList[T any](b []byte, xs []T, f func(b []byte, i int, x T) []byte) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = f(b, i, x)
	}
	return append(b, ']')
}

// openAgentMode opens an object with an agent under key (such as
// `{"holder":`) and a mode: {"holder":"did:…","mode":"write — the next
// member's key closes the mode's quote.
func openAgentMode(b []byte, key string, a *agent, mode string) []byte {
	b = append(b, key...)
	b = append(b, a.didJSON...)
	b = append(b, `,"mode":"`...)
	return append(b, mode...)
}

// appendWaiter appends a waiter as wait answers show it; admitted ones
// show when their claim ends.
func appendWaiter(b []byte, w *waiter, admitted bool) []byte {
	b = openAgentMode(b, `{"actorDid":`, w.owner, w.mode)
	b = append(b, `","admitted":`...)
	b = strconv.AppendBool(b, admitted)
	if admitted {
		b = intMember(b, `,"claimUntilMs":`, w.claimUntil())
	}
	if w.ask != nil {
		b = intMember(b, `,"heldUntilMs":`, w.ask.until)
	}
	b = intMember(b, `,"sinceMs":`, w.since)
	b = intMember(b, `,"lapsesAtMs":`, w.at)
	return append(b, '}')
}

// appendLeaseState appends a lease as a snapshot keeps it.
func appendLeaseState(b []byte, l *lease) []byte {
	b = openAgentMode(b, `{"holder":`, l.owner, l.mode)
	return closeLease(b, l)
}

// appendWaiterState appends a waiter as a snapshot keeps it.
func appendWaiterState(b []byte, w *waiter) []byte {
	b = openAgentMode(b, `{"actorDid":`, w.owner, w.mode)
	b = intMember(b, `","sinceMs":`, w.since)
	b = intMember(b, `,"lastAskMs":`, w.lastAsk)
	b = intMember(b, `,"heldAtMs":`, w.heldAt)
	b = intMember(b, `,"waitMs":`, w.waitMs)
	b = intMember(b, `,"seq":`, int64(w.seq))
	b = intMember(b, `,"claimUntilMs":`, w.claimEnd)
	if w.ask != nil {
		b = append(b, `,"ask":{"id":"`...)
		b = append(b, w.ask.id...)
		b = intMember(b, `","untilMs":`, w.ask.until)
		b = append(b, '}')
	}
	return append(b, '}')
}

// Snapshot is the machine's whole state as canonical JSON: the same state
// gives the same bytes on every host, and Restore(Snapshot()) continues
// exactly as the original would. It holds what is live (resources with a
// lease or a waiter), the trust table, the suspended agents and the fence
// counter, so it grows with what is live, not with what was ever seen.
//
// Taking it starts the count of Ready.SnapshotDue again.
func (m *Machine) Snapshot() []byte {
	m.sinceSnap = 0
	b := append(make([]byte, 0, 1024), `{"v":`...)
	b = jsontext.AppendInt(b, snapshotVersion)
	b = append(b, `,"rules":`...)
	b = m.rules.AppendJSON(b)
	b = intMember(b, `,"nowMs":`, m.now)
	b = intMember(b, `,"seq":`, int64(m.seq))
	b = intMember(b, `,"fence":`, m.fence)
	b = intMember(b, `,"askCounter":`, int64(m.askSeq))
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
			b = jsontext.AppendString(b, d)
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
		b = append(b, `,"leases":`...)
		b = appendList(b, res.leases, func(b []byte, _ int, l *lease) []byte { return appendLeaseState(b, l) })
		b = append(b, `,"waiters":`...)
		b = appendList(b, res.waiters, func(b []byte, _ int, w *waiter) []byte { return appendWaiterState(b, w) })
		b = append(b, '}')
		return true
	})
	b = append(b, `],"deadlocks":`...)
	b = append(b, '[')
	n = 0
	m.deadlocks.each(func(d deadlockPair) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendDeadlock(b, d)
	})
	b = append(b, ']')
	return append(b, '}')
}

// cancelledResult ends k because its asker released the resource or asked
// for it again.
func (m *Machine) cancelledResult(k *ask) Result {
	b := append(m.ans[:0], `{"ok":false,"reason":"cancelled","askId":"`...)
	b = append(b, k.id...)
	b = stringMember(b, `","error":`, "the held request "+k.id+" on "+k.res.name+" was cancelled: its asker released the resource or asked for it again")
	return Result{Status: 409, Answer: append(b, '}')}
}

// cancelledAnswer answers cancel, which ended the asks ids.
func (m *Machine) cancelledAnswer(ids []string) Result {
	b := append(m.ans[:0], `{"ok":true,"cancelled":`...)
	b = jsontext.AppendStrings(b, ids)
	return Result{Status: 200, Answer: append(b, '}')}
}
