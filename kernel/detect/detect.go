// Package detect owns the detectors that read a workspace's record of
// events for things the plane promised would never happen: two conflicting
// leases alive at once, a fence that does not rise. It is pure: it takes
// entries (an index and the event's canonical JSON bytes) and gives
// findings; where the entries come from (a live ledger, an exported bundle,
// a JSON-lines file of two planes' merged events) is the caller's business.
//
// The one detector today is lease-overlap. It rebuilds every lease's life
// from the events and reports:
//
//   - overlap: two leases of different agents on one resource whose lives
//     overlap while their modes conflict. A life is the half-open span from
//     the grant (coordination.lease) to its coordination.release, .expire
//     or .revoke; each coordination.renew extends it and sets its mode from
//     then on. A life whose end is not in the record ends at the last
//     expiresAtMs it was given (the plane lapses it then). Two lives are
//     judged by the class on the later one's grant: on exclusive (the
//     default, and what an event without class is taken as) any two
//     leases conflict; on read-shared only read/read coexists.
//   - fence: a grant whose fence does not rise above every fence granted
//     before it on the same resource (in time order); and, for grants in
//     the current event form (with a class: a kernel with one fence
//     counter per workspace), above every fence granted before it by such
//     a grant on any resource.
//
// Each finding cites both entries: for an overlap, the entry that began
// each lease's conflicting stretch (its grant, or the renewal that carried
// it into the other's life); for a fence, both grants. A pair of leases is
// reported once, at the first moment their lives conflict.
//
// Entries are taken in time order (atMs; entries with equal times keep
// their given order), so the events of two planes can be merged by simple
// concatenation. Entries that are not lease events (operator acts, a
// drill's result, a detector's run) are skipped. A renewal or end whose
// grant is not in the record (a ledger whose early entries were dropped)
// begins a life at the renewal; an end alone is ignored.
//
// Like the kernel it imports only the standard library and the kernel's
// own JSON reader: no clock, no I/O, no reflection.
package detect

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
)

// Entry is one record of the input: its index (a ledger entry's index, or
// a line number) and the event's JSON bytes.
type Entry struct {
	Index int64
	Data  []byte
}

// Detector is one registered detector.
type Detector struct {
	Name    string `json:"name"`
	Summary string `json:"summary"`
	run     func(entries []Entry, opt Options) ([]Finding, error)
}

// LeaseOverlap is the name of the lease-overlap detector.
const LeaseOverlap = "lease-overlap"

// Kinds of findings.
const (
	KindOverlap = "overlap"
	KindFence   = "fence"
)

var detectors = []Detector{{
	Name:    LeaseOverlap,
	Summary: "pairs of leases on one resource whose lives overlap with conflicting modes, and fences that do not rise",
	run:     leaseOverlap,
}}

// Detectors lists the registered detectors, by name.
func Detectors() []Detector { return slices.Clone(detectors) }

// Lookup finds a detector by name.
func Lookup(name string) (Detector, bool) {
	for _, d := range detectors {
		if d.Name == name {
			return d, true
		}
	}
	return Detector{}, false
}

// Run runs the detector over entries.
func (d Detector) Run(entries []Entry, opt Options) ([]Finding, error) {
	if d.run == nil {
		return nil, errors.New("detect: no detector")
	}
	return d.run(entries, opt)
}

// Options adjusts a run.
type Options struct {
	// ClassOf gives the class of a resource whose event carries none
	// ("exclusive" or "read-shared"); nil takes every such event as
	// exclusive.
	ClassOf func(resource string) string
}

// Finding is one thing that should never have happened: two leases, and
// the two entries that show it.
type Finding struct {
	Detector string `json:"detector"`
	Kind     string `json:"kind"` // overlap or fence
	Resource string `json:"resource"`
	// Class is the class the pair was judged by (the later grant's).
	Class string `json:"class"`
	// AtMs is when the lives began to conflict (overlap), or the time of
	// the later grant (fence).
	AtMs int64 `json:"atMs"`
	// A is the earlier lease, B the later.
	A Side `json:"a"`
	B Side `json:"b"`
	// Text says it in a line, for people.
	Text string `json:"text"`
}

// Side is one lease of a finding and the entry cited for it.
type Side struct {
	LeaseID  string `json:"leaseId"`
	Resource string `json:"resource"`
	ActorDid string `json:"actorDid"`
	Mode     string `json:"mode"`
	Fence    int64  `json:"fence"`
	// Entry is the index of the entry cited: the grant or the renewal that
	// began the conflicting stretch.
	Entry int64 `json:"entry"`
	// GrantEntry is the index of the lease's grant (-1 when the grant is
	// not in the record).
	GrantEntry int64 `json:"grantEntry"`
}

// Key identifies a finding across runs: the detector, the kind and the
// two cited entries. A case is filed once per key.
func (f Finding) Key() string {
	return f.Detector + "/" + f.Kind + "/" + strconv.FormatInt(f.A.Entry, 10) + "/" + strconv.FormatInt(f.B.Entry, 10)
}

// Event is a lease event as the kernel emits it; fields an event lacks
// are empty.
type Event struct {
	Type        string
	AtMs        int64
	Resource    string
	Class       string
	ActorDid    string
	LeaseID     string
	Fence       int64
	Mode        string
	ExpiresAtMs int64
}

// Lease event types.
const (
	TypeLease   = "coordination.lease"
	TypeRenew   = "coordination.renew"
	TypeRelease = "coordination.release"
	TypeExpire  = "coordination.expire"
	TypeRevoke  = "coordination.revoke"
)

// Classes.
const (
	ClassExclusive  = "exclusive"
	ClassReadShared = "read-shared"
)

// ParseEvent reads one event. It refuses what is not a JSON object with a
// string type and an integer atMs; a lease event (type coordination.*)
// must also carry resource, actorDid and leaseId, and a grant or renewal
// its mode, fence and expiresAtMs. Members it does not use are ignored.
func ParseEvent(data []byte) (Event, error) {
	var e Event
	if kernel.KindOf(data) != kernel.KindObject {
		return e, errors.New("an event must be a JSON object")
	}
	have := map[string]bool{}
	strs := map[string]*string{"type": &e.Type, "resource": &e.Resource, "class": &e.Class,
		"actorDid": &e.ActorDid, "leaseId": &e.LeaseID, "mode": &e.Mode}
	ints := map[string]*int64{"atMs": &e.AtMs, "fence": &e.Fence, "expiresAtMs": &e.ExpiresAtMs}
	err := kernel.ScanObject(data, func(name string, raw []byte) error {
		var err error
		if p := strs[name]; p != nil {
			if kernel.KindOf(raw) != kernel.KindString {
				return errors.New(name + " must be a string")
			}
			*p, err = kernel.Unquote(raw)
		} else if p := ints[name]; p != nil {
			n, ok := integer(raw)
			if !ok {
				return errors.New(name + " must be an integer")
			}
			*p = n
		} else {
			return nil
		}
		have[name] = true
		return err
	})
	if err != nil {
		return e, err
	}
	need := []string{"type", "atMs"}
	switch e.Type {
	case TypeLease, TypeRenew:
		need = append(need, "resource", "actorDid", "leaseId", "mode", "fence", "expiresAtMs")
	case TypeRelease, TypeExpire, TypeRevoke:
		need = append(need, "resource", "actorDid", "leaseId")
	}
	for _, n := range need {
		if !have[n] {
			return e, errors.New(e.kind() + " has no " + n)
		}
	}
	switch e.Class {
	case "", ClassExclusive, ClassReadShared:
	default:
		return e, errors.New("class must be exclusive or read-shared, not " + strconv.Quote(e.Class))
	}
	if e.Type == TypeLease || e.Type == TypeRenew {
		switch e.Mode {
		case "read", "write", "delete":
		default:
			return e, errors.New("mode must be read, write or delete, not " + strconv.Quote(e.Mode))
		}
	}
	return e, nil
}

func (e Event) kind() string {
	if e.Type == "" {
		return "the event"
	}
	return "a " + e.Type + " event"
}

func (e Event) isLease() bool {
	switch e.Type {
	case TypeLease, TypeRenew, TypeRelease, TypeExpire, TypeRevoke:
		return true
	}
	return false
}

// integer reads an integer literal (no fraction, no exponent).
func integer(raw []byte) (int64, bool) {
	if len(raw) == 0 || len(raw) > 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// EntryError is an entry that does not parse.
type EntryError struct {
	Index int64
	Err   error
}

func (e *EntryError) Error() string {
	return "entry " + strconv.FormatInt(e.Index, 10) + ": " + e.Err.Error()
}

func (e *EntryError) Unwrap() error { return e.Err }

// ListJSON is the answer of GET /api/v1/detection/detectors on every
// host: {"ok":true,"detectors":[{"name","summary"}…]}, the detectors in
// their order. Hosts answer it as it is, so both tiers give these bytes.
func ListJSON() []byte {
	b := []byte(`{"ok":true,"detectors":[`)
	for i, d := range detectors {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = kernel.AppendQuote(b, d.Name)
		b = append(b, `,"summary":`...)
		b = kernel.AppendQuote(b, d.Summary)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// AppendJSON appends f as JSON: the members of Finding's JSON tags, in
// their order (what encoding/json writes for it), for hosts without
// reflection.
func (f Finding) AppendJSON(b []byte) []byte {
	b = append(b, `{"detector":`...)
	b = kernel.AppendQuote(b, f.Detector)
	b = append(b, `,"kind":`...)
	b = kernel.AppendQuote(b, f.Kind)
	b = append(b, `,"resource":`...)
	b = kernel.AppendQuote(b, f.Resource)
	b = append(b, `,"class":`...)
	b = kernel.AppendQuote(b, f.Class)
	b = append(b, `,"atMs":`...)
	b = strconv.AppendInt(b, f.AtMs, 10)
	b = append(b, `,"a":`...)
	b = f.A.appendJSON(b)
	b = append(b, `,"b":`...)
	b = f.B.appendJSON(b)
	b = append(b, `,"text":`...)
	b = kernel.AppendQuote(b, f.Text)
	return append(b, '}')
}

func (s Side) appendJSON(b []byte) []byte {
	b = append(b, `{"leaseId":`...)
	b = kernel.AppendQuote(b, s.LeaseID)
	b = append(b, `,"resource":`...)
	b = kernel.AppendQuote(b, s.Resource)
	b = append(b, `,"actorDid":`...)
	b = kernel.AppendQuote(b, s.ActorDid)
	b = append(b, `,"mode":`...)
	b = kernel.AppendQuote(b, s.Mode)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, s.Fence, 10)
	b = append(b, `,"entry":`...)
	b = strconv.AppendInt(b, s.Entry, 10)
	b = append(b, `,"grantEntry":`...)
	b = strconv.AppendInt(b, s.GrantEntry, 10)
	return append(b, '}')
}

// OptionsFor are the options of a run over a workspace with rules: a
// resource under one of its read-shared prefixes is read-shared.
func OptionsFor(rules kernel.Rules) Options {
	return Options{ClassOf: func(res string) string {
		for _, p := range rules.ReadShared {
			if strings.HasPrefix(res, p) {
				return ClassReadShared
			}
		}
		return ClassExclusive
	}}
}

// RunEvent is the ledger entry of a detector's run on every host:
// {"type":"detection.run","atMs","detector","treeSize","findings","cases":[ids]}.
// Hosts record it as it is, so both tiers give these bytes.
func RunEvent(atMs int64, detector string, treeSize int64, findings int, cases []string) []byte {
	b := append([]byte(nil), `{"type":"detection.run","atMs":`...)
	b = strconv.AppendInt(b, atMs, 10)
	b = kernel.AppendQuote(append(b, `,"detector":`...), detector)
	b = strconv.AppendInt(append(b, `,"treeSize":`...), treeSize, 10)
	b = strconv.AppendInt(append(b, `,"findings":`...), int64(findings), 10)
	b = append(b, `,"cases":[`...)
	for i, c := range cases {
		if i > 0 {
			b = append(b, ',')
		}
		b = kernel.AppendQuote(b, c)
	}
	return append(b, "]}"...)
}
