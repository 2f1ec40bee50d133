package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func open(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestKeys(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	w, created, err := s.EnsureWorkspace("acme", nil, 1)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if w2, created, err := s.EnsureWorkspace("acme", []byte(`{"readShared":["x"]}`), 2); err != nil || created || w2.ID != w.ID || string(w2.Rules) != `{"readShared":[]}` {
		t.Fatalf("ensure again: %+v %v %v", w2, created, err)
	}
	if _, _, err := s.EnsureWorkspace("bad name", nil, 1); err == nil {
		t.Fatal("a workspace name with a space was accepted")
	}
	key, k, err := s.CreateKey(w, RoleAgent, "did:example:a", 5)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, KeyPrefix+k.ID+"_") || len(key) < 50 {
		t.Fatalf("key %q id %q", key, k.ID)
	}
	if _, _, err := s.CreateKey(w, RoleAgent, "", 5); err == nil {
		t.Error("an agent key without a DID was made")
	}
	if _, _, err := s.CreateKey(w, RoleWorkspace, "did:example:a", 5); err == nil {
		t.Error("a workspace key with a DID was made")
	}
	got, ok, err := s.LookupKey(context.Background(), key)
	if err != nil || !ok || got.Role != RoleAgent || got.AgentDID != "did:example:a" || got.Workspace != "acme" {
		t.Fatalf("lookup: %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.LookupKey(context.Background(), key+"x"); ok {
		t.Fatal("a wrong key was found")
	}
	// Only the hash is stored.
	var n int
	s.db.QueryRow(`SELECT count(*) FROM keys WHERE instr(hash, ?) > 0 OR id = ?`, key, key).Scan(&n)
	if n != 0 {
		t.Fatal("the key itself is in the table")
	}
	if _, err := s.RevokeKey(key, 9); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.LookupKey(context.Background(), key); !ok || got.RevokedMs != 9 {
		t.Fatalf("after revoke: %+v", got)
	}
	if _, err := s.RevokeKey("nope", 9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	keys, err := s.Keys("acme")
	if err != nil || len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("keys: %+v %v", keys, err)
	}
}

func TestCommitLoadSnapshot(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	var recs []Record
	for i := int64(1); i <= 5; i++ {
		recs = append(recs, Record{Workspace: 1, Seq: i, NowMs: 100 * i, Op: "acquire", Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Status: 200})
	}
	evs := []Event{{Workspace: 1, Seq: 1, Index: 0, Type: "coordination.lease", AtMs: 100, Body: []byte(`{"type":"coordination.lease"}`)}}
	if err := s.Commit(recs[:3]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(evs); err != nil {
		t.Fatal(err)
	}
	// The same event again (a replay) is kept once.
	if err := s.Commit(recs[3:4]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(evs); err != nil {
		t.Fatal(err)
	}
	r5 := recs[4]
	r5.Snapshot = []byte(`{"state":5}`)
	if err := s.Commit([]Record{r5}); err != nil {
		t.Fatal(err)
	}
	snap, seq, rest, err := s.Load(context.Background(), 1)
	if err != nil || string(snap) != `{"state":5}` || seq != 5 || len(rest) != 0 {
		t.Fatalf("load: %s %d %v %v", snap, seq, rest, err)
	}
	got, _ := s.Events(context.Background(), 1, 0, 10)
	if len(got) != 1 {
		t.Fatalf("events: %+v", got)
	}
	// Events are append-only.
	if _, err := s.edb.Exec(`DELETE FROM events`); err == nil {
		t.Fatal("events could be deleted")
	}
	if _, err := s.edb.Exec(`UPDATE events SET type = 'x'`); err == nil {
		t.Fatal("events could be updated")
	}
	// A duplicate seq fails the whole commit: nothing of it is written.
	bad := []Record{{Workspace: 1, Seq: 6, Op: "tick", Status: 200}, {Workspace: 1, Seq: 5, Op: "tick", Status: 200}}
	if err := s.Commit(bad); err == nil {
		t.Fatal("a duplicate seq committed")
	}
	if _, _, rest, _ := s.Load(context.Background(), 1); len(rest) != 0 {
		t.Fatalf("a failed commit left %d records", len(rest))
	}
}

func TestBeforeCommitFails(t *testing.T) {
	fail := errors.New("injected")
	s := open(t, t.TempDir(), Options{BeforeCommit: func() error { return fail }})
	if err := s.Commit([]Record{{Workspace: 1, Seq: 1, Op: "tick", Status: 200}}); !errors.Is(err, fail) {
		t.Fatalf("commit: %v", err)
	}
	s.opts.BeforeCommit = nil
	if _, _, rest, err := s.Load(context.Background(), 1); err != nil || len(rest) != 0 {
		t.Fatalf("after a failed commit: %v %v", rest, err)
	}
}

func TestLoadFindsGap(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	s.Commit([]Record{{Workspace: 1, Seq: 1, Op: "tick", Status: 200}, {Workspace: 1, Seq: 3, Op: "tick", Status: 200}})
	if _, _, _, err := s.Load(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("load of a log with a gap: %v", err)
	}
}

// BenchmarkCommit64 is one group commit of 64 commands, fsync included:
// the store's share of a busy moment.
func BenchmarkCommit64(b *testing.B) {
	s := open(b, b.TempDir(), Options{})
	seq := int64(0)
	body := []byte(`{"resource":"lock:bench/00","actorDid":"did:example:bench-client-00"}`)
	recs := make([]Record, 64)
	for i := 0; i < b.N; i++ {
		for j := range recs {
			seq++
			recs[j] = Record{Workspace: 1, Seq: seq, NowMs: seq, Op: "acquire", Body: body, Status: 200}
		}
		if err := s.Commit(recs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommit1 is one commit of a single command: the cost group
// commit spreads.
func BenchmarkCommit1(b *testing.B) {
	s := open(b, b.TempDir(), Options{})
	for i := 0; i < b.N; i++ {
		if err := s.Commit([]Record{{Workspace: 1, Seq: int64(i + 1), Op: "tick", Status: 200}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvents64 is one batch of 64 events in the events database
// (synchronous=NORMAL: no fsync per batch).
func BenchmarkEvents64(b *testing.B) {
	s := open(b, b.TempDir(), Options{})
	seq := int64(0)
	ev := []byte(`{"type":"coordination.lease","atMs":1,"resource":"lock:bench/00","actorDid":"did:example:bench-client-00","leaseId":"lease_0123456789abcdef","fence":1,"mode":"write","expiresAtMs":30001,"trustDelta":0}`)
	evs := make([]Event, 64)
	for i := 0; i < b.N; i++ {
		for j := range evs {
			seq++
			evs[j] = Event{Workspace: 1, Seq: seq, Type: "coordination.lease", AtMs: seq, Body: ev}
		}
		if err := s.AppendEvents(evs); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDrillWorkspaceLeavesNoSnapshot: a deleted drill workspace's id is
// given to the next workspace made; that workspace starts empty, not from
// the drill's snapshot (a drill stopped by a shutdown has one).
func TestDrillWorkspaceLeavesNoSnapshot(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	d, err := s.CreateDrillWorkspace("x", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(d.ID, 5, []byte(`{"drill":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDrillWorkspace(d.ID); err != nil {
		t.Fatal(err)
	}
	w, _, err := s.EnsureWorkspace("fresh", nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	snap, seq, recs, err := s.Load(context.Background(), w.ID)
	if err != nil || snap != nil || seq != 0 || len(recs) != 0 {
		t.Fatalf("workspace %d (the drill's was %d) loads snapshot %s at %d and %d commands (%v); want nothing", w.ID, d.ID, snap, seq, len(recs), err)
	}
}

// TestCommitGroupSizes: the multi-row INSERTs (events, grants) come in
// powers of two; groups of every size up to past a run's maxRun are
// logged whole and in order, one row a group (two past maxRun).
func TestCommitGroupSizes(t *testing.T) {
	for n, want := range map[int][]int{1: {1}, 37: {32, 4, 1}, 128: {128}, 300: {128, 128, 32, 8, 4}} {
		var got []int
		for left := n; left > 0; left -= got[len(got)-1] {
			got = append(got, perInsert(left))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%d rows go in INSERTs of %v, want %v", n, got, want)
		}
	}
	s := open(t, t.TempDir(), Options{})
	seq := int64(0)
	for _, n := range []int{1, 2, 3, 7, 37, 64, 100, 127, 128, 129, 300} {
		recs := make([]Record, n)
		for i := range recs {
			seq++
			recs[i] = Record{Workspace: 1, Seq: seq, NowMs: seq, Op: "acquire", Body: []byte(fmt.Sprintf(`{"n":%d}`, seq)), Status: 200}
		}
		if err := s.Commit(recs); err != nil {
			t.Fatalf("a group of %d: %v", n, err)
		}
	}
	_, _, recs, err := s.Load(context.Background(), 1)
	if err != nil || int64(len(recs)) != seq {
		t.Fatalf("load: %d records, %v; want %d", len(recs), err, seq)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) || string(r.Body) != fmt.Sprintf(`{"n":%d}`, i+1) {
			t.Fatalf("record %d: seq %d body %s", i, r.Seq, r.Body)
		}
	}
	// One row per group, cut at maxRun commands: 300 is 256 + 44.
	var runs, rows int
	if err := s.db.QueryRow(`SELECT (SELECT count(*) FROM log_runs), (SELECT count(*) FROM log)`).Scan(&runs, &rows); err != nil {
		t.Fatal(err)
	}
	if runs != 12 || rows != 0 {
		t.Errorf("%d runs and %d rows of one command, want 12 runs (one per group, the group of 300 in two) and none", runs, rows)
	}
}
