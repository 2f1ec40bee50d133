package ledger

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/internal/cputime"
	"github.com/leaseplane/leaseplane/server/store"
)

// benchLedger is a workspace whose log holds n commands, one grant each,
// and a ledger that has caught up with it.
func benchLedger(b *testing.B, n int) (*Ledger, *wsLedger, *store.Store, time.Duration) {
	b.Helper()
	dir, st := openStore(b)
	var recs []store.Record
	for i := 1; i <= n; i++ {
		id := kernel.LeaseID("lock:r"+strconv.Itoa(i), int64(i))
		ev := `[{"type":"coordination.lease","atMs":` + strconv.Itoa(1000+i) + `,"resource":"lock:r` + strconv.Itoa(i) +
			`","class":"exclusive","actorDid":"did:example:a","leaseId":"` + id + `","fence":` + strconv.Itoa(i) +
			`,"mode":"write","expiresAtMs":` + strconv.Itoa(31000+i) + `,"trustDelta":0}]`
		recs = append(recs, store.Record{Workspace: 1, Seq: int64(i), NowMs: int64(1000 + i), Op: "acquire", Body: []byte("{}"), Status: 200, Events: []byte(ev)})
		if len(recs) == 1000 || i == n {
			if err := st.Commit(recs); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	l, err := New(Config{Store: st, DataDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	l.Start()
	b.Cleanup(l.Stop)
	if err := l.Workspace(1, "bench"); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := l.Wait(ctx, 1); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	w := l.get(1)
	if w.size() != int64(n) {
		b.Fatalf("ledger has %d entries, want %d", w.size(), n)
	}
	return l, w, st, took
}

// BenchmarkCatchUp is a ledger reading 20,000 logged commands back from
// the log (a crash or an outage behind it): entries per second.
func BenchmarkCatchUp(b *testing.B) {
	for range b.N {
		_, _, _, took := benchLedger(b, 20000)
		b.ReportMetric(20000/took.Seconds(), "entries/s")
	}
}

// BenchmarkSign is one checkpoint of a 20,000-entry tree: its root from the
// stored hashes in SQLite, the Ed25519 signature, and the checkpoint kept.
func BenchmarkSign(b *testing.B) {
	l, w, _, _ := benchLedger(b, 20000)
	cpu0 := cputime.Process(b)
	b.ResetTimer()
	for range b.N {
		w.mu.Lock()
		w.cpSize = w.pos.Size - 1 // sign again
		w.mu.Unlock()
		if err := l.sign(w); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cputime.Process(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}

// BenchmarkReceipt is the receipt route for a grant already under a
// checkpoint, in a 20,000-entry ledger: the entry found by lease id, its
// inclusion proof read from SQLite, the text written.
func BenchmarkReceipt(b *testing.B) {
	l, w, _, _ := benchLedger(b, 20000)
	if err := l.sign(w); err != nil {
		b.Fatal(err)
	}
	cpu0 := cputime.Process(b)
	b.ResetTimer()
	for i := range b.N {
		n := 1 + i%20000
		r := l.Receipt(context.Background(), 1, kernel.LeaseID("lock:r"+strconv.Itoa(n), int64(n)))
		if r.Status != 200 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cputime.Process(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}

// BenchmarkWrite is the ledger's writer alone, as it runs behind the
// commits: b.N commands, a grant or a release each (the events of an
// acquire+release pair, as BenchmarkLedgerHandlerPair in package server
// makes them), handed over with Notify in runs of 1,000, then written in
// the writer's batches (hashes, bodies and grants rows, one transaction
// with fsync each). Time per entry; the CPU per entry is reported too.
func BenchmarkWrite(b *testing.B) {
	dir, st := openStore(b)
	l := startLedger(b, Config{Store: st, DataDir: dir}, "bench")
	ctx := context.Background()
	if err := l.Wait(ctx, 1); err != nil {
		b.Fatal(err)
	}
	events := make([][]kernel.Event, b.N)
	for i := range events {
		pair := i / 2
		res := "lock:bench/" + strconv.Itoa(pair%64)
		typ := "coordination.lease"
		if i%2 == 1 {
			typ = "coordination.release"
		}
		ev := `{"type":"` + typ + `","atMs":` + strconv.Itoa(1800000000000+i) + `,"resource":"` + res +
			`","class":"exclusive","actorDid":"did:example:bench` + strconv.Itoa(pair%64) + `","leaseId":"` +
			kernel.LeaseID(res, int64(pair+1)) + `","fence":` + strconv.Itoa(pair+1) +
			`,"mode":"write","expiresAtMs":` + strconv.Itoa(1800000030000+i) + `,"trustDelta":0}`
		events[i] = []kernel.Event{{Type: typ, AtMs: int64(1800000000000 + i), JSON: []byte(ev)}}
	}
	cpu0 := cputime.Process(b)
	b.ResetTimer()
	for i := range b.N {
		l.Notify(1, int64(i+1), events[i])
		if i%1000 == 999 {
			if err := l.Wait(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Wait(ctx, 1); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((cputime.Process(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/entry")
	if got := l.get(1).size(); got != int64(b.N) {
		b.Fatalf("ledger has %d entries, want %d", got, b.N)
	}
}

// BenchmarkWriteBatches is the writer's append alone at a fixed batch size:
// batches of B commands (half grants, half releases, as spread's pairs make
// them, on 64 agents' resources), each one write: one transaction of
// ledger.db. The writer's gathering sets B under load (about the commands
// committed in one gatherDelay); CPU per entry, by B.
func BenchmarkWriteBatches(b *testing.B) {
	for _, size := range []int{50, 250, 1000} {
		b.Run("commands="+strconv.Itoa(size), func(b *testing.B) {
			dir, st := openStore(b)
			l, err := New(Config{Store: st, DataDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Workspace(1, "bench"); err != nil {
				b.Fatal(err)
			}
			l.write(nil) // the empty log caught up
			w := l.get(1)
			batches := make([][]item, b.N)
			seq := int64(0)
			for i := range batches {
				for range size {
					seq++
					pair := seq / 2
					res := "lock:bench/spread/" + strconv.FormatInt(pair%64, 10) + "/" + strconv.FormatInt(pair%8, 10)
					typ := "coordination.lease"
					if seq%2 == 1 {
						typ = "coordination.release"
					}
					ev := `{"type":"` + typ + `","atMs":` + strconv.FormatInt(1800000000000+seq, 10) + `,"resource":"` + res +
						`","class":"exclusive","actorDid":"did:bench:client:` + strconv.FormatInt(pair%64, 10) + `","leaseId":"` +
						kernel.LeaseID(res, pair+1) + `","fence":` + strconv.FormatInt(pair+1, 10) +
						`,"mode":"write","expiresAtMs":` + strconv.FormatInt(1800000030000+seq, 10) + `,"trustDelta":0}`
					batches[i] = append(batches[i], item{ws: w, seq: seq, events: []kernel.Event{{Type: typ, JSON: []byte(ev)}}})
				}
			}
			cpu0 := cputime.Process(b)
			b.ResetTimer()
			for _, batch := range batches {
				l.write(batch)
			}
			b.StopTimer()
			b.ReportMetric(float64((cputime.Process(b)-cpu0).Nanoseconds())/1e3/float64(b.N*size), "cpu-µs/entry")
			if got := w.size(); got != int64(b.N*size) {
				b.Fatalf("ledger has %d entries, want %d", got, b.N*size)
			}
		})
	}
}
