package kernel

import (
	"slices"
	"sort"
	"strings"
)

// pairs keeps the deadlock pairs refused in the last DeadlockKeepMs so
// that no command's cost grows with how many are kept: a queue in time
// order (a replaced pair stays in it, marked dead), so pruning reads only
// the expired ones; by agent and resource, so a repeated refusal replaces
// its pair at once; and by resource, with the names sorted, so a wait page
// reads only the pairs of its own name range.
type pairs struct {
	queue []*pair
	head  int
	byKey map[pairKey]*pair
	byRes map[string][]*pair
	names []string // the keys of byRes, sorted
	seq   uint64
}

type pair struct {
	deadlockPair
	seq  uint64
	dead bool
}

type pairKey struct{ actor, resource string }

func (p *pairs) len() int { return len(p.byKey) }

// add records d, replacing the pair of the same agent and resource.
func (p *pairs) add(d deadlockPair) {
	if p.byKey == nil {
		p.byKey, p.byRes = map[pairKey]*pair{}, map[string][]*pair{}
	}
	k := pairKey{d.actor, d.resource}
	if old := p.byKey[k]; old != nil {
		p.drop(old)
	}
	p.seq++
	n := &pair{deadlockPair: d, seq: p.seq}
	p.queue = append(p.queue, n)
	p.byKey[k] = n
	lst, ok := p.byRes[d.resource]
	if !ok {
		i, _ := slices.BinarySearch(p.names, d.resource)
		p.names = slices.Insert(p.names, i, d.resource)
	}
	p.byRes[d.resource] = append(lst, n)
}

// drop takes n out of the indexes; the queue skips it from then on.
func (p *pairs) drop(n *pair) {
	n.dead = true
	delete(p.byKey, pairKey{n.actor, n.resource})
	lst := p.byRes[n.resource]
	if i := slices.Index(lst, n); i >= 0 {
		lst = slices.Delete(lst, i, i+1)
	}
	if len(lst) > 0 {
		p.byRes[n.resource] = lst
		return
	}
	delete(p.byRes, n.resource)
	if i, ok := slices.BinarySearch(p.names, n.resource); ok {
		p.names = slices.Delete(p.names, i, i+1)
	}
}

// prune drops the pairs refused DeadlockKeepMs or more before now, and
// reports whether it dropped any.
func (p *pairs) prune(now int64) bool {
	dropped := false
	for p.head < len(p.queue) {
		n := p.queue[p.head]
		if !n.dead {
			if n.at+DeadlockKeepMs > now {
				break
			}
			p.drop(n)
			dropped = true
		}
		p.queue[p.head] = nil
		p.head++
	}
	if p.head > 64 && p.head*2 > len(p.queue) {
		p.queue = append([]*pair(nil), p.queue[p.head:]...)
		p.head = 0
	}
	return dropped
}

// each calls f with every pair kept, in time order.
func (p *pairs) each(f func(d deadlockPair)) {
	for _, n := range p.queue[p.head:] {
		if !n.dead {
			f(n.deadlockPair)
		}
	}
}

// page is the pairs on the resources whose names start with prefix, from
// start on, up to last when bounded, in time order.
func (p *pairs) page(prefix, start, last string, bounded bool) []*pair {
	var out []*pair
	i := sort.SearchStrings(p.names, start)
	for _, name := range p.names[i:] {
		if !strings.HasPrefix(name, prefix) || (bounded && name > last) {
			break
		}
		out = append(out, p.byRes[name]...)
	}
	slices.SortFunc(out, func(x, y *pair) int {
		if x.seq < y.seq {
			return -1
		}
		return 1
	})
	return out
}
