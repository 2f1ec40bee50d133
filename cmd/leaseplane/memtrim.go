package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// serveGCPercent is the garbage collector's target (GOGC) of leaseplane
// serve when the environment sets none: a server allocates per request
// but keeps little live, so at the default of 100 it collected about 40
// times in a 15,000-pair spread; at 200, 18 times, for about 6 MB more at
// the peak (docs/BENCHMARKS.md, "The log in runs").
const serveGCPercent = 200

// serveGC is the GOGC serve sets given the environment's value: ok is
// false when the environment sets one (the runtime has applied it).
func serveGC(env string) (percent int, ok bool) {
	if env != "" {
		return 0, false
	}
	return serveGCPercent, true
}

// Memory trimming: after a burst of work the Go heap keeps the burst's
// garbage until the next collection, which an idle server runs only every
// two minutes, so its RSS stays up long after nothing is live. serve
// samples the bytes allocated every trimEvery; once a burst (at least
// trimBurst bytes since the last trim) is followed by a quiet period (less
// than trimQuiet bytes in one sample), it collects and gives the freed
// memory back to the system, once per burst.
const (
	trimEvery = 5 * time.Second
	trimBurst = 64 << 20
	trimQuiet = 1 << 20
)

// trimmer decides when to trim from the cumulative bytes allocated. The
// zero value is ready to use.
type trimmer struct {
	started   bool
	last      uint64 // cumulative allocation at the last sample
	sinceTrim uint64 // bytes allocated since the last trim
}

// observe takes the cumulative bytes allocated at a sample and reports
// whether to trim now.
func (t *trimmer) observe(allocated uint64) bool {
	if !t.started || allocated < t.last {
		t.started, t.last, t.sinceTrim = true, allocated, 0
		return false
	}
	delta := allocated - t.last
	t.last = allocated
	t.sinceTrim += delta
	if t.sinceTrim >= trimBurst && delta < trimQuiet {
		t.sinceTrim = 0
		return true
	}
	return false
}

// trimAfterBursts runs until ctx ends, sampling the runtime's allocation
// counter every trimEvery and calling debug.FreeOSMemory after a burst.
func trimAfterBursts(ctx context.Context) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	var t trimmer
	tick := time.NewTicker(trimEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && t.observe(sample[0].Value.Uint64()) {
				debug.FreeOSMemory()
			}
		}
	}
}
