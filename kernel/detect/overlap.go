package detect

import (
	"cmp"
	"slices"
	"strconv"
)

// life is one lease's life as the record shows it.
type life struct {
	resource   string
	leaseID    string
	actor      string
	class      string // the class on its grant (or first renewal seen)
	fence      int64
	grantEntry int64 // -1 when the grant is not in the record
	segs       []segment
	end        int64 // valid once closed
	closed     bool
	lastExp    int64
}

// segment is a stretch of a life with one mode: from its start to the
// next segment's (or the life's end).
type segment struct {
	from  int64
	mode  string
	entry int64
}

type timed struct {
	ev    Event
	index int64
	pos   int
}

// leaseOverlap is the lease-overlap detector.
func leaseOverlap(entries []Entry, opt Options) ([]Finding, error) {
	evs := make([]timed, 0, len(entries))
	for i, en := range entries {
		ev, err := ParseEvent(en.Data)
		if err != nil {
			return nil, &EntryError{Index: en.Index, Err: err}
		}
		if ev.isLease() {
			evs = append(evs, timed{ev: ev, index: en.Index, pos: i})
		}
	}
	slices.SortStableFunc(evs, func(a, b timed) int { return cmp.Compare(a.ev.AtMs, b.ev.AtMs) })

	classOf := func(l *life) string {
		if l.class != "" {
			return l.class
		}
		if opt.ClassOf != nil {
			if c := opt.ClassOf(l.resource); c == ClassReadShared {
				return c
			}
		}
		return ClassExclusive
	}

	var findings []Finding
	lives := map[string][]*life{} // by resource, in order of their start
	var order []string            // resources in order of first life
	type top struct {
		fence int64
		l     *life
	}
	fences := map[string]top{} // the highest fence granted on each resource
	var wide top               // the highest granted by a grant that carries a class
	open := func(res, id, actor string) *life {
		ls := lives[res]
		for i := len(ls) - 1; i >= 0; i-- {
			if l := ls[i]; !l.closed && l.leaseID == id && l.actor == actor {
				return l
			}
		}
		return nil
	}
	add := func(l *life) {
		if _, ok := lives[l.resource]; !ok {
			order = append(order, l.resource)
		}
		lives[l.resource] = append(lives[l.resource], l)
	}
	for _, t := range evs {
		e := t.ev
		switch e.Type {
		case TypeLease:
			l := &life{resource: e.Resource, leaseID: e.LeaseID, actor: e.ActorDid, class: e.Class,
				fence: e.Fence, grantEntry: t.index, lastExp: e.ExpiresAtMs,
				segs: []segment{{from: e.AtMs, mode: e.Mode, entry: t.index}}}
			if prev, ok := fences[e.Resource]; ok && e.Fence <= prev.fence {
				f := Finding{Detector: LeaseOverlap, Kind: KindFence, Resource: e.Resource, Class: classOf(l), AtMs: e.AtMs,
					A: side(prev.l, prev.l.segs[0]), B: side(l, l.segs[0])}
				f.Text = e.Resource + ": fence " + itoa(e.Fence) + " of " + describe(f.B) +
					" does not rise above fence " + itoa(prev.fence) + " of " + describe(f.A)
				findings = append(findings, f)
			} else if e.Class != "" && wide.l != nil && e.Fence <= wide.fence {
				// Events with a class come from a kernel with one fence
				// counter per workspace: a fence never comes back, on any
				// resource.
				f := Finding{Detector: LeaseOverlap, Kind: KindFence, Resource: e.Resource, Class: classOf(l), AtMs: e.AtMs,
					A: side(wide.l, wide.l.segs[0]), B: side(l, l.segs[0])}
				f.Text = e.Resource + ": fence " + itoa(e.Fence) + " of " + describe(f.B) +
					" does not rise above fence " + itoa(wide.fence) + " of " + describe(f.A) + " on " + wide.l.resource +
					" (one fence counter per workspace)"
				findings = append(findings, f)
			}
			if prev, ok := fences[e.Resource]; !ok || e.Fence > prev.fence {
				fences[e.Resource] = top{fence: e.Fence, l: l}
			}
			if e.Class != "" && (wide.l == nil || e.Fence > wide.fence) {
				wide = top{fence: e.Fence, l: l}
			}
			add(l)
		case TypeRenew:
			l := open(e.Resource, e.LeaseID, e.ActorDid)
			if l == nil {
				l = &life{resource: e.Resource, leaseID: e.LeaseID, actor: e.ActorDid, class: e.Class,
					fence: e.Fence, grantEntry: -1}
				add(l)
			}
			l.segs = append(l.segs, segment{from: e.AtMs, mode: e.Mode, entry: t.index})
			l.lastExp = e.ExpiresAtMs
		default: // release, expire, revoke
			if l := open(e.Resource, e.LeaseID, e.ActorDid); l != nil {
				l.closed, l.end = true, e.AtMs
			}
		}
	}
	for _, res := range order {
		var active []*life
		for _, b := range lives[res] {
			if !b.closed {
				b.closed, b.end = true, max(b.lastExp, b.segs[len(b.segs)-1].from)
			}
		}
		for _, b := range lives[res] {
			start := b.segs[0].from
			keep := active[:0]
			for _, a := range active {
				if a.end > start {
					keep = append(keep, a)
				}
			}
			active = keep
			for _, a := range active {
				if a.actor == b.actor {
					continue
				}
				if f, ok := overlap(a, b, classOf(b)); ok {
					findings = append(findings, f)
				}
			}
			active = append(active, b)
		}
	}
	slices.SortStableFunc(findings, func(x, y Finding) int {
		return cmp.Or(cmp.Compare(x.AtMs, y.AtMs), cmp.Compare(x.B.Entry, y.B.Entry),
			cmp.Compare(x.A.Entry, y.A.Entry), cmp.Compare(x.Kind, y.Kind))
	})
	return findings, nil
}

// overlap finds the first moment the lives of a and b (b begun no earlier)
// conflict under class.
func overlap(a, b *life, class string) (Finding, bool) {
	i, j := 0, 0
	for i < len(a.segs) && j < len(b.segs) {
		sa, sb := a.segs[i], b.segs[j]
		ea, eb := segEnd(a, i), segEnd(b, j)
		from, to := max(sa.from, sb.from), min(ea, eb)
		if from < to && conflicts(class, sa.mode, sb.mode) {
			f := Finding{Detector: LeaseOverlap, Kind: KindOverlap, Resource: a.resource, Class: class, AtMs: from,
				A: side(a, sa), B: side(b, sb)}
			f.Text = a.resource + ": " + describe(f.A) + " and " + describe(f.B) + " overlap from " +
				itoa(from) + " ms (" + class + ")"
			return f, true
		}
		if ea <= eb {
			i++
		} else {
			j++
		}
	}
	return Finding{}, false
}

func segEnd(l *life, i int) int64 {
	if i+1 < len(l.segs) {
		return l.segs[i+1].from
	}
	return l.end
}

// conflicts reports whether two modes conflict on a resource of class.
func conflicts(class, x, y string) bool {
	if class != ClassReadShared {
		return true
	}
	return x != "read" || y != "read"
}

func side(l *life, s segment) Side {
	return Side{LeaseID: l.leaseID, Resource: l.resource, ActorDid: l.actor, Mode: s.mode, Fence: l.fence, Entry: s.entry, GrantEntry: l.grantEntry}
}

func describe(s Side) string {
	return s.LeaseID + " (" + s.ActorDid + ", " + s.Mode + ", fence " + itoa(s.Fence) + ", entry " + itoa(s.Entry) + ")"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
