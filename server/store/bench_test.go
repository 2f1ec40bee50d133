package store

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/internal/cputime"
)

// BenchmarkCommitPairs is the log's part of the spread workload: acquire
// and release commands of 64 clients, with the bodies and events the
// kernel gives them, committed in groups of the sizes a busy server's
// group commit makes (1 to 64, varying). Time per command is mostly the
// fsyncs; cpu-µs/command is the work the store does for each, and
// p99-commit-ms the 99th percentile of a group's commit (what a WAL
// checkpoint run inside a commit stretches).
func BenchmarkCommitPairs(b *testing.B) { commitPairs(b, 0) }

// BenchmarkCommitPairsSnapshots is BenchmarkCommitPairs with a snapshot
// every 1,000 commands (the server's SnapshotEvery) saved beside the
// commits, as the server's snapshotter does, each trimming the log.
func BenchmarkCommitPairsSnapshots(b *testing.B) { commitPairs(b, 1000) }

func commitPairs(b *testing.B, snapEvery int64) {
	s := open(b, b.TempDir(), Options{LogKeep: 1000})
	snaps := make(chan int64, 64)
	snapped := make(chan struct{})
	go func() {
		defer close(snapped)
		for seq := range snaps {
			if err := s.SaveSnapshot(1, seq, []byte(`{"state":"a snapshot"}`)); err != nil {
				b.Error(err)
			}
		}
	}()
	sizes := []int{1, 2, 5, 9, 16, 23, 31, 32, 40, 47, 64, 3, 12, 27, 36, 61}
	recs := make([]Record, 0, 64)
	seq := int64(0)
	var took []time.Duration
	cpu0 := cputime.Process(b)
	b.ResetTimer()
	for n, k := 0, 0; n < b.N; k++ {
		recs = recs[:0]
		for range min(sizes[k%len(sizes)], b.N-n) {
			seq++
			n++
			c := strconv.Itoa(int(seq/2) % 64)
			res := `"resource":"lock:bench/spread/` + c + `/` + strconv.Itoa(int(seq/16)%8) + `","actorDid":"did:bench:client:` + c + `"`
			op, typ := "acquire", "coordination.lease"
			if seq%2 == 0 {
				op, typ = "release", "coordination.release"
			}
			body := `{` + res + `}`
			ev := `[{"type":"` + typ + `","atMs":` + strconv.FormatInt(1800000000000+seq, 10) + `,` + res +
				`,"class":"exclusive","leaseId":"lease_0123456789abcdef","fence":` + strconv.FormatInt(seq/2+1, 10) +
				`,"mode":"write","expiresAtMs":` + strconv.FormatInt(1800000030000+seq, 10) + `,"trustDelta":0}]`
			recs = append(recs, Record{Workspace: 1, Seq: seq, NowMs: 1800000000000 + seq, Op: op,
				Body: []byte(body), Status: 200, Events: []byte(ev), Semantics: 3})
		}
		t0 := time.Now()
		if err := s.Commit(recs); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t0))
		if snapEvery > 0 && seq/snapEvery != (seq-int64(len(recs)))/snapEvery {
			snaps <- seq
		}
	}
	close(snaps)
	<-snapped
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[(len(took)-1)*99/100].Microseconds())/1e3, "p99-commit-ms")
	b.ReportMetric(float64((cputime.Process(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/command")
}
