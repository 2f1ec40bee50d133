package kernel

// timer is a lease expiry, a waiter lapse or the end of a waiter's claim,
// kept in the machine's heap. Exactly one of lease and waiter is set. idx
// is the timer's place in the heap, -1 when it is not there.
type timer struct {
	at     int64
	idx    int
	kind   timerKind
	res    *resource
	lease  *lease
	waiter *waiter
}

type timerKind uint8

const (
	timerLease timerKind = iota
	timerLapse
	timerClaim
	timerAsk // a held ask's untilMs; its waiter is set
)

// less orders timers by time, then kind (expiries, lapses, claim ends,
// held asks' untilMs),
// then resource name, then agent: a total order, so lapses happen in the
// same order on every host however the heap was built.
func (t *timer) less(u *timer) bool {
	if t.at != u.at {
		return t.at < u.at
	}
	if t.kind != u.kind {
		return t.kind < u.kind
	}
	if t.res.name != u.res.name {
		return t.res.name < u.res.name
	}
	return t.actor() < u.actor()
}

func (t *timer) actor() string {
	if t.lease != nil {
		return t.lease.owner.did
	}
	return t.waiter.owner.did
}

// timerHeap is a binary min-heap of timers that knows each timer's index,
// so renewals and releases fix or remove in O(log n).
type timerHeap []*timer

func (h *timerHeap) push(t *timer) {
	t.idx = len(*h)
	*h = append(*h, t)
	h.up(t.idx)
}

func (h *timerHeap) pop() *timer {
	t := (*h)[0]
	h.remove(t)
	return t
}

func (h *timerHeap) remove(t *timer) {
	i := t.idx
	if i < 0 {
		return
	}
	s := *h
	n := len(s) - 1
	if i != n {
		s[i] = s[n]
		s[i].idx = i
	}
	s[n] = nil
	*h = s[:n]
	t.idx = -1
	if i != n {
		h.fix(s[i])
	}
}

func (h *timerHeap) fix(t *timer) {
	if !h.down(t.idx) {
		h.up(t.idx)
	}
}

func (h timerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		h[i].idx, h[p].idx = i, p
		i = p
	}
}

func (h timerHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			j = r
		}
		if !h[j].less(h[i]) {
			break
		}
		h[i], h[j] = h[j], h[i]
		h[i].idx, h[j].idx = i, j
		i = j
	}
	return i > start
}
