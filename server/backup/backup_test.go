package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/server/store"
)

// busyPlane starts a server on a new data folder that snapshots and trims
// its log often, with clients granting and releasing until the test ends.
func busyPlane(t testing.TB, snapEvery int, logKeep int64) (dir string, s *server.Server, key string, grants func() int) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	s, err := server.New(server.Config{DataDir: dir, Engine: kernel.Native, Clock: time.Now, SnapshotEvery: snapEvery, LogKeep: logKeep})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err = s.Bootstrap("default")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	servertest.RunClients(&wg, 4, stop, func(i, j int) bool {
		body := []byte(fmt.Sprintf(`{"resource":"lock:%d-%d","actorDid":"did:example:c%d"}`, i, j%3, i))
		if st, _, _ := s.Call(context.Background(), key, kernel.OpAcquire, body); st == 200 {
			mu.Lock()
			n++
			mu.Unlock()
		}
		s.Call(context.Background(), key, kernel.OpRelease, body)
		return true
	})
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		s.Shutdown(context.Background())
	})
	return dir, s, key, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestTakeUnderLoadIsConsistent takes backups of a plane that commits,
// snapshots and trims its log all the while, and checks each copy's files
// against each other: the snapshot is not newer than the log and the log
// continues it without a gap, the ledger is not ahead of the log and every
// log row it still needs is there, and no event belongs to a command the
// log lacks.
func TestTakeUnderLoadIsConsistent(t *testing.T) {
	dir, _, _, grants := busyPlane(t, 10, 5)
	ctx := context.Background()
	for grants() < 100 {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 5 {
		out := filepath.Join(t.TempDir(), fmt.Sprintf("backup-%d", i))
		if _, err := Take(ctx, dir, out, time.Now); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(out); err != nil {
			t.Fatalf("backup %d: %v", i, err)
		}
		st := servertest.OpenStore(t, out)
		snap, snapSeq, recs, err := st.Load(ctx, 1)
		if err != nil {
			t.Fatalf("backup %d: the log does not continue the snapshot: %v", i, err)
		}
		last := snapSeq
		if len(recs) > 0 {
			last = recs[len(recs)-1].Seq
		}
		if snap == nil || last < 10 {
			t.Fatalf("backup %d: snapshot %v, log to %d: the load did not run", i, snap != nil, last)
		}
		pos, _, err := st.LedgerPos(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if pos.Seq > last {
			t.Errorf("backup %d: the ledger is at command %d, ahead of the log's last %d", i, pos.Seq, last)
		}
		if pos.Seq < last {
			rows, err := st.LogEvents(ctx, 1, pos.Seq, 1)
			if err != nil || len(rows) != 1 || rows[0].Seq != pos.Seq+1 {
				t.Errorf("backup %d: the ledger is at command %d and needs %d next; the log has %+v (%v)", i, pos.Seq, pos.Seq+1, rows, err)
			}
		}
		evs, err := st.Events(ctx, 1, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Seq > last {
				t.Errorf("backup %d: an event of command %d, after the log's last %d", i, e.Seq, last)
				break
			}
		}
		st.Close()
		t.Logf("backup %d: snapshot at %d, log to %d (%d rows after the snapshot), ledger at %d, %d events",
			i, snapSeq, last, len(recs), pos.Seq, len(evs))
	}
}

// TestRestoreRefusals: a damaged or incomplete backup, a folder that is
// not empty, a clock that reads before the backup: each refused with an
// error naming it, and nothing left behind.
// backedUpPlane is the folder of a busy plane that has granted 20 leases,
// the folder of a backup taken then, and the backup's manifest.
func backedUpPlane(t *testing.T) (dir, bk string, m Manifest) {
	t.Helper()
	dir, _, _, grants := busyPlane(t, 10, 5)
	for grants() < 20 {
		time.Sleep(10 * time.Millisecond)
	}
	bk = filepath.Join(t.TempDir(), "backup")
	m, err := Take(context.Background(), dir, bk, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return dir, bk, m
}

func TestRestoreRefusals(t *testing.T) {
	dir, bk, m := backedUpPlane(t)
	ctx := context.Background()
	if _, err := Take(ctx, dir, bk, time.Now); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second backup into the same folder: %v", err)
	}
	if _, err := Take(ctx, t.TempDir(), filepath.Join(t.TempDir(), "b"), time.Now); err == nil || !strings.Contains(err.Error(), "not a leaseplane data folder") {
		t.Errorf("a backup of an empty folder: %v", err)
	}
	now := func() time.Time { return time.UnixMilli(m.TakenAtMs + 1000) }
	empty := func() string { return filepath.Join(t.TempDir(), "restored") }

	notEmpty := t.TempDir()
	os.WriteFile(filepath.Join(notEmpty, "notes.txt"), []byte("mine"), 0o600)
	for _, c := range []struct {
		name string
		dir  string
		opts Options
		want string
	}{
		{"not empty", notEmpty, Options{Now: now}, "is not empty (notes.txt)"},
		{"not empty, forced, not a data folder", notEmpty, Options{Now: now, Force: true}, "not a data folder's (notes.txt)"},
		{"clock before the backup", empty(), Options{Now: func() time.Time { return time.UnixMilli(m.TakenAtMs - 60_000) }}, "before the backup was taken"},
		{"negative floor", empty(), Options{Now: now, FenceFloor: -1}, "negative"},
		{"a checkpoint of no workspace", empty(), Options{Now: now, Checkpoints: [][]byte{[]byte("example.com/other\n1\nAAAA\n\n")}}, "no restored workspace"},
	} {
		_, err := Restore(ctx, bk, c.dir, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		if c.dir != notEmpty {
			if ents, _ := os.ReadDir(c.dir); len(ents) != 0 {
				t.Errorf("%s: the refused restore left %d files", c.name, len(ents))
			}
		}
	}

	// A damaged file, a missing one, one the manifest does not name.
	damage := []struct {
		name   string
		change func(dir string)
		want   string
	}{
		{"a flipped byte", func(d string) {
			p := filepath.Join(d, store.FileName)
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xff
			os.WriteFile(p, b, 0o600)
		}, "leaseplane.db is damaged"},
		{"a missing file", func(d string) { os.Remove(filepath.Join(d, store.LedgerFileName)) }, "ledger.db, in the backup's manifest, is missing"},
		{"a stray file", func(d string) { os.WriteFile(filepath.Join(d, "extra.db"), nil, 0o600) }, "extra.db is in the backup folder but not in its manifest"},
		{"no manifest", func(d string) { os.Remove(filepath.Join(d, ManifestName)) }, "not a complete backup"},
	}
	for _, c := range damage {
		cp := filepath.Join(t.TempDir(), "copy")
		servertest.CopyDir(t, bk, cp, nil)
		c.change(cp)
		if _, err := Restore(ctx, cp, empty(), Options{Now: now}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}

	// What is refused without --force is done with it, over a data folder.
	target := empty()
	if _, err := Restore(ctx, bk, target, Options{Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, bk, target, Options{Now: now}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a restore over a data folder without --force: %v", err)
	}
	rep, err := Restore(ctx, bk, target, Options{Now: now, Force: true, FenceFloor: 5_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Raise != (store.FenceRaise{Raise: 1000*RatePerMs + Margin, Floor: 5_000_000}) {
		t.Errorf("raise %+v, want %d and floor 5000000 for a backup 1 s old", rep.Raise, 1000*RatePerMs+Margin)
	}
	st := servertest.OpenStore(t, target)
	defer st.Close()
	if r, ok, err := st.PendingFenceRaise(ctx, 1); err != nil || !ok || r != rep.Raise {
		t.Errorf("the restored folder's pending raise: %+v %v %v, want %+v", r, ok, err, rep.Raise)
	}
	if held, err := st.LogTrimHeld(); err != nil || held {
		t.Errorf("the restored folder still holds log trimming (the backup's hold was copied): %v %v", held, err)
	}
}

// TestRestoredPlaneRaisesFences: a server started on a restored folder
// raises the fence counter once, to the floor when that is higher, and
// keeps it raised across a restart without raising it again.
func TestRestoredPlaneRaisesFences(t *testing.T) {
	_, bk, m := backedUpPlane(t)
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "restored")
	const floor = 7_000_000
	if _, err := Restore(ctx, bk, target, Options{Now: func() time.Time { return time.UnixMilli(m.TakenAtMs) }, FenceFloor: floor}); err != nil {
		t.Fatal(err)
	}
	for restart := range 2 {
		s, err := server.New(server.Config{DataDir: target, Engine: kernel.Native, Clock: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		key, _, _ := s.Store().CreateKey(store.Workspace{ID: 1, Name: "default"}, store.RoleWorkspace, "", 0)
		st, b, _ := s.Call(ctx, key, kernel.OpAcquire, []byte(fmt.Sprintf(`{"resource":"lock:new%d","actorDid":"did:example:n"}`, restart)))
		from, to, ok, err := s.Store().RaisedFence(ctx, 1)
		s.Shutdown(ctx)
		if st != 200 || err != nil || !ok {
			t.Fatalf("start %d: grant %d %s; raise recorded %v %v", restart, st, b, ok, err)
		}
		if to != floor || from >= floor {
			t.Fatalf("start %d: the counter went from %d to %d, want to the floor %d", restart, from, to, floor)
		}
		want := fmt.Sprintf(`"fence":%d,`, floor+1+restart)
		if !strings.Contains(string(b), want) {
			t.Fatalf("start %d: granted %s, want %s (raised once, not again at the restart)", restart, b, want)
		}
	}
}

// BenchmarkTakeUnderLoad takes backups of a plane under load (4
// clients granting and releasing, the server's own snapshot and trim
// policy) once it has logged 20,000 pairs; it reports the backup's size.
func BenchmarkTakeUnderLoad(b *testing.B) {
	dir, _, _, grants := busyPlane(b, 0, 0)
	for grants() < 20000 {
		time.Sleep(50 * time.Millisecond)
	}
	ctx := context.Background()
	var size int64
	i := 0
	for b.Loop() {
		m, err := Take(ctx, dir, filepath.Join(b.TempDir(), fmt.Sprint(i)), time.Now)
		if err != nil {
			b.Fatal(err)
		}
		i++
		size = 0
		for _, f := range m.Files {
			size += f.Size
		}
	}
	b.ReportMetric(float64(size)/1e6, "MB")
}
