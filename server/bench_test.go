package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// reportCommits adds commands per commit and time per commit to the
// benchmark's output.
func reportCommits(b *testing.B, s *Server) {
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "leaseplane_commit_batch_commands":
			h := mf.GetMetric()[0].GetHistogram()
			b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "cmds/commit")
		case "leaseplane_commit_duration_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			b.ReportMetric(1e3*h.GetSampleSum()/float64(h.GetSampleCount()), "ms/commit")
		}
	}
}

// BenchmarkHandlerPair is one acquire and one release through the HTTP
// handler (request parsing excluded: the requests are built beforehand):
// key check, the native kernel, group commit to SQLite with fsync, and the
// handler's own cost and allocations. 64 goroutines run at once, each on
// its own resource, so commits are shared. (cmd/leaseplane's
// BenchmarkServeCallPair measures Call alone, per engine.)
func BenchmarkHandlerPair(b *testing.B) {
	s, key := benchServer(b, Config{})
	b.ReportAllocs()
	b.SetParallelism(32)
	runPairs(b, s.Handler(), key)
	reportCommits(b, s)
}

// BenchmarkRestart is the time a workspace with a million logged commands
// takes to come back: New, then the workspace's snapshot restored and the
// log after it replayed (what the first request after a restart waits
// for). The commands are acquire+release pairs of 1,000 agents over
// 10,000 resources, 5,000 leases live at the end. "snapshots" keeps the
// server's policy (a snapshot with every SnapshotEvery-th command, the log
// trimmed behind it); "log-only" has no snapshot at all, so all of the
// million commands are replayed: the worst case.
func BenchmarkRestart(b *testing.B) {
	const commands = 1_000_000
	for _, tc := range []struct {
		name      string
		snapEvery int
	}{{"snapshots", 1000}, {"log-only", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			// The clock stays at the last command's time, so nothing lapses
			// and no alarm's tick joins the log while the bench runs.
			base := time.Now().UnixMilli()
			end := time.UnixMilli(base + commands/100)
			cfg := Config{DataDir: dir, Engine: kernel.Native, SnapshotEvery: 1 << 30,
				Clock: func() time.Time { return end }, AfterFunc: func(time.Duration, func()) func() bool { return func() bool { return true } }}
			s := mustNew(b, cfg)
			if _, _, err := s.Bootstrap("bench"); err != nil {
				b.Fatal(err)
			}
			m := kernel.New(kernel.Rules{})
			batch := make([]store.Record, 0, 1000)
			for i := range commands {
				pair := i / 2
				op := kernel.OpAcquire
				if i%2 == 1 && pair < commands/2-5000 {
					op = kernel.OpRelease
				}
				body := []byte(fmt.Sprintf(`{"resource":"lock:bench/%d","actorDid":"did:example:agent%d"}`, pair%10000, pair%1000))
				now := base + int64(i/100)
				r := m.ApplyJSON(op, now, body)
				if r.Status != 200 {
					b.Fatalf("command %d: %s", i, r.Answer)
				}
				rec := store.Record{Workspace: 1, Seq: int64(i + 1), NowMs: now, Op: string(op), Body: body, Status: r.Status}
				if tc.snapEvery > 0 && (i+1)%tc.snapEvery == 0 {
					rec.Snapshot = m.Snapshot()
				}
				batch = append(batch, rec)
				if len(batch) == cap(batch) {
					if err := s.store.Commit(batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			crash := func(s *Server) {
				s.commit.stop()
				s.events.stop()
				s.store.Close()
				s.unlock()
			}
			crash(s)
			b.ResetTimer()
			for b.Loop() {
				s := mustNew(b, cfg)
				ws, err := s.workspace(1)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if ws.seq != commands {
					b.Fatalf("restored to command %d, want %d", ws.seq, commands)
				}
				crash(s)
				b.StartTimer()
			}
		})
	}
}
