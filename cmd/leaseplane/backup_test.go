package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/server/servertest"
)

// TestBackupRestoreUnderLoad takes a backup of a running serve under
// load, lets it go on granting, kills it with SIGKILL, restores the backup
// into a fresh folder and starts a server there: every fence it grants is
// above every fence the killed one answered, also the ones it answered
// after the backup, which the backup cannot know. The restored ledger
// catches up with the restored log and keeps the checkpoints signed before
// the backup; a restore shown a checkpoint signed after the backup is
// refused (the ledger would fork).
func TestBackupRestoreUnderLoad(t *testing.T) {
	bin := servertest.Binary(t)
	root := t.TempDir()
	data, bk := filepath.Join(root, "data"), filepath.Join(root, "backup")
	c := startChild(t, "native", data)
	key := c.key
	call := func(url, method, path, body string) (int, []byte, error) {
		return loadCall(url, key, method, path, body)
	}
	fenceOf := func(b []byte) int64 {
		var m struct{ Lease struct{ Fence int64 } }
		json.Unmarshal(b, &m)
		return m.Lease.Fence
	}
	checkpoint := func(url string) []byte {
		st, b, err := call(url, "GET", "/api/v1/ledger/checkpoint", "")
		if err != nil || st != 200 {
			t.Fatalf("checkpoint: %d %s %v", st, b, err)
		}
		return b
	}

	var mu sync.Mutex
	var fences []int64 // every fence answered, in the order answered
	stop := make(chan struct{})
	var wg sync.WaitGroup
	servertest.RunClients(&wg, 8, stop, func(i, n int) bool {
		body := fmt.Sprintf(`{"resource":"lock:w%d-%d","actorDid":"did:example:worker%d"}`, i, n%4, i)
		st, b, err := call(c.url, "POST", "/api/v1/acp/coordination/lease", body)
		if err != nil {
			return false // killed
		}
		if st == 200 {
			mu.Lock()
			fences = append(fences, fenceOf(b))
			mu.Unlock()
			if _, _, err := call(c.url, "POST", "/api/v1/acp/coordination/release", body); err != nil {
				return false
			}
		}
		return true
	})
	grantsAtLeast := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			got := len(fences)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d grants, want %d: the load did not run", got, n)
			}
		}
	}
	grantsAtLeast(200)
	early := checkpoint(c.url)

	// The backup, by the binary, while the load goes on.
	out, err := exec.Command(bin, "backup", "--data", data, bk).CombinedOutput()
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	mu.Lock()
	afterBackup := len(fences)
	mu.Unlock()
	for _, f := range []string{"leaseplane.db", "snapshots.db", "ledger.db", "events.db", "ledger-keys/default.key", "backup.json"} {
		fi, err := os.Stat(filepath.Join(bk, f))
		if err != nil {
			t.Fatalf("the backup has no %s: %v", f, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s in the backup has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	// How far the backup's ledger reaches (a restore into a scratch folder
	// says), so that the monitor below is known to keep a checkpoint beyond.
	probe, err := exec.Command(bin, "restore", "--data", filepath.Join(root, "probe"), bk).CombinedOutput()
	var reach int64
	if i := strings.Index(string(probe), "ledger reaches "); err != nil || i < 0 {
		t.Fatalf("restore into a scratch folder: %v\n%s", err, probe)
	} else {
		fmt.Sscan(string(probe[i+len("ledger reaches "):]), &reach)
	}
	// The plane goes on granting after the backup, and a monitor keeps
	// the checkpoints it sees (leaseplane ledger watch) until one is beyond
	// what the backup's ledger reaches.
	grantsAtLeast(afterBackup + 200)
	watchFile := filepath.Join(root, "watch.jsonl")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		watch := exec.Command(bin, "ledger", "watch", "--url", c.url, "--file", watchFile, "--once")
		watch.Env = append(os.Environ(), "LEASEPLANE_KEY="+key)
		out, err := watch.CombinedOutput()
		if err != nil {
			t.Fatalf("ledger watch: %v\n%s", err, out)
		}
		var size int64
		if i := strings.Index(string(out), "checkpoint of size "); i >= 0 {
			fmt.Sscan(string(out[i+len("checkpoint of size "):]), &size)
		}
		if size > reach {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plane's checkpoint is at %d, not beyond the backup's reach %d: %s", size, reach, out)
		}
	}
	grantsAtLeast(afterBackup + 300)
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.cmd.Wait()
	close(stop)
	wg.Wait()
	var maxFence int64
	seen := map[int64]bool{}
	for _, f := range fences {
		if seen[f] {
			t.Fatalf("fence %d answered twice before the kill", f)
		}
		seen[f] = true
		maxFence = max(maxFence, f)
	}

	write := func(name string, b []byte) string {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	earlyFile := write("early.checkpoint", early)
	restore := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"restore"}, args...)...).CombinedOutput()
		return string(out), err
	}
	// Refusals: a non-empty folder, a checkpoint signed after the backup.
	if out, err := restore("--data", data, bk); err == nil || !strings.Contains(out, "is not empty") {
		t.Fatalf("restore into the killed plane's folder: %v\n%s; want a refusal naming a non-empty folder", err, out)
	}
	forked := filepath.Join(root, "forked")
	if out, err := restore("--data", forked, "--checkpoint", watchFile, bk); err == nil || !strings.Contains(out, "would fork") {
		t.Fatalf("restore shown a checkpoint signed after the backup: %v\n%s; want a refusal (the ledger would fork)", err, out)
	}
	if ents, _ := os.ReadDir(forked); len(ents) != 0 {
		t.Errorf("a refused restore left %d files in %s", len(ents), forked)
	}

	fresh := filepath.Join(root, "restored")
	out2, err := restore("--data", fresh, "--checkpoint", earlyFile, bk)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out2)
	}
	t.Logf("%s", strings.TrimSpace(out2))
	if !strings.Contains(out2, "match") {
		t.Errorf("restore did not find the checkpoint signed before the backup in the backup's ledger:\n%s", out2)
	}
	// The restored plane runs the other engine: the raise goes through the
	// wasip1 kernel's snapshot and restore as well as the native one's.
	c2 := startChild(t, "wasm", fresh)
	if c2.key != "" {
		t.Fatal("the restored plane made a new first key: the backup's workspaces were not restored")
	}
	for i := range 20 {
		body := fmt.Sprintf(`{"resource":"lock:after%d","actorDid":"did:example:after"}`, i)
		st, b, err := call(c2.url, "POST", "/api/v1/acp/coordination/lease", body)
		if err != nil || st != 200 {
			t.Fatalf("grant after the restore: %d %s %v", st, b, err)
		}
		if f := fenceOf(b); f <= maxFence {
			t.Fatalf("the restored plane granted fence %d; the killed one had answered up to %d", f, maxFence)
		}
	}
	// The backup's own counter is behind what the plane answered before it
	// died: without a raise, fences would be handed out twice.
	st := servertest.OpenStore(t, fresh)
	w := servertest.Workspace(t, st, "default")
	from, to, ok, err := st.RaisedFence(context.Background(), w.ID)
	st.Close()
	if err != nil || !ok {
		t.Fatalf("the restored plane recorded no fence raise: %v", err)
	}
	if from >= maxFence {
		t.Fatalf("the backup's fence counter %d is not behind the %d answered before the kill: the load after the backup did not run", from, maxFence)
	}
	// The restored ledger catches up with the restored log: its
	// checkpoint grows past the one signed before the backup.
	var size int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		lines := strings.Split(string(checkpoint(c2.url)), "\n")
		fmt.Sscan(lines[1], &size)
		var earlySize int64
		fmt.Sscan(strings.Split(string(early), "\n")[1], &earlySize)
		if size > earlySize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restored ledger's checkpoint has size %d, not past %d signed before the backup", size, earlySize)
		}
	}
	t.Logf("%d fences answered (%d after the backup), the highest %d; the backup's counter %d was raised to %d; restored ledger size %d",
		len(fences), len(fences)-afterBackup, maxFence, from, to, size)
}

// TestBackupRestoreUsage: bad arguments are refused with exit 2 and a
// message naming the problem, before anything is touched; a backup of a
// folder that is not a data folder and a restore of a folder that is not
// a backup fail with 1, naming what is missing.
func TestBackupRestoreUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"backup"}, 2, "want one OUT folder"},
		{[]string{"backup", "a", "b"}, 2, "want one OUT folder"},
		{[]string{"backup", "--data", dir, filepath.Join(dir, "out")}, 1, "is not a leaseplane data folder"},
		{[]string{"restore"}, 2, "want one BACKUP folder"},
		{[]string{"restore", "--fence-floor", "-1", dir}, 2, "--fence-floor must be from 0 to 9007199254740991"},
		{[]string{"restore", "--fence-floor", "9007199254740992", dir}, 2, "--fence-floor must be from 0"},
		{[]string{"restore", "--checkpoint", filepath.Join(dir, "none"), dir}, 2, "--checkpoint " + filepath.Join(dir, "none")},
		{[]string{"restore", "--data", filepath.Join(dir, "new"), dir}, 1, "is not a complete backup (no backup.json)"},
	} {
		var out, errb strings.Builder
		code := run(c.args, nil, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("a refused restore made its data folder")
	}
}
