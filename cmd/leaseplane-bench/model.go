package main

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
)

// The queue model (--model): the queue workload's clients against the
// real kernel in virtual time, with fixed latencies and nothing else
// running: no HTTP, no CPU to share, no disk. Each request reaches the
// kernel oneway after it is sent; a logged command's answer leaves commit
// after its step (a held ask's grant, commit after the step that granted
// it); the answer reaches its client oneway later; a holder sends its
// release hold after its grant arrives. Polling clients sleep exactly the
// refusal's stampede.waitMs. What it gives is the ceiling of each way of
// waiting under the kernel's rules (the back-off by place of
// docs/SEMANTICS.md, claims, held asks) at those latencies.

// modelOpts are the model's latencies and size.
type modelOpts struct {
	clients              int
	oneway, commit, hold time.Duration
	measured             time.Duration // after a warmUp of virtual time
	jitter               bool          // each latency uniform over half to 1.5 times its value
	seed                 uint64
	polled               bool
}

// modelResult is one model run: pairs granted in the measured span, the
// first-ask-to-grant latencies of those first asked in it, and the
// acquires that reached the kernel in it.
type modelResult struct {
	pairs, asks int64
	grantLat    []time.Duration
}

func (r modelResult) pairsPerSec(measured time.Duration) float64 {
	return float64(r.pairs) / measured.Seconds()
}

type modelEvent struct {
	at  time.Duration
	seq int64
	fn  func()
}

type modelQueue []modelEvent

func (q modelQueue) Len() int { return len(q) }
func (q modelQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q modelQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *modelQueue) Push(x any)   { *q = append(*q, x.(modelEvent)) }
func (q *modelQueue) Pop() any {
	o := *q
	x := o[len(o)-1]
	*q = o[:len(o)-1]
	return x
}

// modelEpoch is the model's time zero, as the kernel's nowMs.
const modelEpochMs = 1_000_000_000

// runModel runs the queue workload in virtual time.
func runModel(o modelOpts) (modelResult, error) {
	eng, err := kernel.Native.New(nil)
	if err != nil {
		return modelResult{}, err
	}
	defer eng.Close()
	rng := rand.New(rand.NewPCG(o.seed, 1))
	var q modelQueue
	var seq int64
	var now time.Duration
	var failed error
	exact := func(d time.Duration, fn func()) {
		seq++
		heap.Push(&q, modelEvent{now + d, seq, fn})
	}
	after := func(d time.Duration, fn func()) {
		if o.jitter && d > 0 {
			d = d/2 + time.Duration(rng.Int64N(int64(d)+1))
		}
		exact(d, fn)
	}
	step := func(c kernel.Command) kernel.Ready {
		c.NowMs = modelEpochMs + now.Milliseconds()
		rd, err := eng.Step(c)
		if err != nil && failed == nil {
			failed = err
		}
		return rd
	}
	var r modelResult
	from, to := warmUp, warmUp+o.measured
	parked := map[string]func(kernel.AskAnswer){}
	deliver := func(rd kernel.Ready) {
		for _, a := range rd.Answers {
			if f := parked[a.AskID]; f != nil {
				delete(parked, a.AskID)
				f(a)
			}
		}
	}
	var acquire func(i, n int, t0 time.Duration)
	granted := func(i, n int, t0 time.Duration) {
		if now >= from && now < to {
			r.pairs++
			if t0 >= from {
				r.grantLat = append(r.grantLat, now-t0)
			}
		}
		after(o.hold, func() {
			res, did := resource("queue", i, n), "did:bench:client:"+strconv.Itoa(i)
			after(o.oneway, func() {
				deliver(step(kernel.Command{Op: kernel.OpRelease, Resource: res, ActorDid: did}))
				after(o.commit+o.oneway, func() { acquire(i, n+1, now) })
			})
		})
	}
	acquire = func(i, n int, t0 time.Duration) {
		res, did := resource("queue", i, n), "did:bench:client:"+strconv.Itoa(i)
		after(o.oneway, func() {
			c := kernel.Command{Op: kernel.OpAcquire, Resource: res, ActorDid: did}
			if !o.polled {
				c.WaitUpToMs, c.HasWaitUpTo = 30000, true
			}
			if now >= from {
				r.asks++
			}
			rd := step(c)
			deliver(rd)
			if rd.AskID != "" {
				parked[rd.AskID] = func(a kernel.AskAnswer) {
					if a.Status != 200 && failed == nil {
						failed = fmt.Errorf("held ask answered %s", a.Answer)
					}
					after(o.commit+o.oneway, func() { granted(i, n, t0) })
				}
				return
			}
			back := o.oneway
			if rd.Log {
				back += o.commit
			}
			if rd.Status == 200 {
				after(back, func() { granted(i, n, t0) })
				return
			}
			var a struct {
				Reason   string `json:"reason"`
				Stampede struct {
					WaitMs int64 `json:"waitMs"`
				} `json:"stampede"`
			}
			if err := json.Unmarshal(rd.Answer, &a); (err != nil || a.Reason != kernel.ReasonLeaseHeld) && failed == nil {
				failed = fmt.Errorf("acquire answered %s", rd.Answer)
			}
			after(back, func() {
				exact(time.Duration(a.Stampede.WaitMs)*time.Millisecond, func() { acquire(i, n, t0) })
			})
		})
	}
	for i := range o.clients {
		exact(time.Duration(i)*time.Microsecond, func() { acquire(i, 0, now) })
	}
	for q.Len() > 0 && failed == nil {
		e := heap.Pop(&q).(modelEvent)
		if e.at > to {
			break
		}
		now = e.at
		// The host's alarm: a tick once anything is due.
		if at, ok, _ := eng.NextAlarm(); ok && at <= modelEpochMs+now.Milliseconds() {
			deliver(step(kernel.Command{Op: kernel.OpTick}))
		}
		e.fn()
	}
	slices.Sort(r.grantLat)
	return r, failed
}

// polledCeiling is the most pairs/s that clients polling as the semantics'
// back-off tells them can make, whatever the latencies, when every
// resource keeps at least 4 waiters: a client's first ask on a resource
// is refused at a place of 5 or more (stampede.waitMs 800 ms), so each
// pair of a client takes at least 800 ms.
func polledCeiling(clients int) float64 { return float64(clients) / 0.8 }

// printModel runs the model for both ways of waiting and prints them.
func printModel(w interface{ Write([]byte) (int, error) }, o modelOpts) error {
	fmt.Fprintf(w, "queue model: the kernel in virtual time, %d clients on 4 resources, each request %s each way, a logged answer %s after its step, a release %s after its grant arrives%s; %s measured after %s\n",
		o.clients, fmtDur(o.oneway), fmtDur(o.commit), fmtDur(o.hold), map[bool]string{true: " (each latency uniform over ½–1½ times, seed " + strconv.FormatUint(o.seed, 10) + ")"}[o.jitter], o.measured, warmUp)
	for _, polled := range []bool{false, true} {
		o.polled = polled
		r, err := runModel(o)
		if err != nil {
			return err
		}
		name := "held"
		if polled {
			name = "polled"
		}
		line := fmt.Sprintf("  %-6s %7.1f pairs/s, p50 %s, p99 %s to a grant, %.2f acquires per pair", name, r.pairsPerSec(o.measured),
			fmtDur(pct(r.grantLat, 0.5)), fmtDur(pct(r.grantLat, 0.99)), float64(r.asks)/float64(max(r.pairs, 1)))
		if polled {
			line += fmt.Sprintf(" (ceiling of any latencies: %d clients / 800 ms = %.0f pairs/s)", o.clients, polledCeiling(o.clients))
		} else {
			per := o.hold + 2*o.oneway + o.commit
			line += fmt.Sprintf(" (a handoff is at least hold + 2 × oneway + commit = %s: 4 resources / %s = %.0f pairs/s)", fmtDur(per), fmtDur(per), 4/per.Seconds())
		}
		fmt.Fprintln(w, line)
	}
	return nil
}
