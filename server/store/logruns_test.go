package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestPackRunRoundTrip: a packed run reads back as written, each field,
// NULL events and rules kept apart from empty ones; a run cut short or
// with bytes left over is refused.
func TestPackRunRoundTrip(t *testing.T) {
	recs := []Record{
		{Workspace: 7, Seq: 41, NowMs: 1800000000001, Op: "acquire", Body: []byte(`{"resource":"a"}`), Status: 200,
			Events: []byte(`[{"type":"coordination.lease"}]`), Semantics: 3, Rules: []byte(`{"readShared":[]}`)},
		{Workspace: 7, Seq: 42, NowMs: 1800000000000, Op: "release", Body: nil, Status: 409, Events: []byte("[]"), Semantics: 3},
		{Workspace: 7, Seq: 43, NowMs: -5, Op: "tick", Body: []byte("{}"), Status: 200, Events: nil, Semantics: 0, Rules: []byte{}},
	}
	b := packRun(nil, recs)
	var got []logged
	if err := unpackRun(7, 41, 3, b, func(x logged) bool { got = append(got, x); return true }); err != nil {
		t.Fatal(err)
	}
	want := []logged{
		{Record: Record{Workspace: 7, Seq: 41, NowMs: 1800000000001, Op: "acquire", Body: []byte(`{"resource":"a"}`), Status: 200,
			Events: []byte(`[{"type":"coordination.lease"}]`), Semantics: 3, Rules: []byte(`{"readShared":[]}`)}, known: true},
		{Record: Record{Workspace: 7, Seq: 42, NowMs: 1800000000000, Op: "release", Body: []byte{}, Status: 409, Events: []byte{}, Semantics: 3}, known: true},
		{Record: Record{Workspace: 7, Seq: 43, NowMs: -5, Op: "tick", Body: []byte("{}"), Status: 200, Events: []byte{}, Semantics: 1, Rules: []byte{}}, known: true},
	}
	for i := range want {
		if i >= len(got) || !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("command %d reads back %+v, want %+v", i, got[min(i, len(got)-1)], want[i])
		}
	}
	if got[1].Rules != nil || got[2].Rules == nil {
		t.Errorf("rules: NULL read as %q, empty as %q", got[1].Rules, got[2].Rules)
	}
	n := 0
	if err := unpackRun(7, 41, 3, b, func(logged) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Errorf("stopped after %d commands (%v), want 2", n, err)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append(append([]byte(nil), b...), 0), append([]byte{9}, b[1:]...)} {
		if err := unpackRun(7, 41, 3, bad, func(logged) bool { return true }); err == nil {
			t.Errorf("a malformed run of %d bytes was read", len(bad))
		}
	}
}

// TestRunsOfAGroup: a group holding several workspaces' commands logs
// each workspace's as a run of its own, and each reads back its own in
// order; a run that overlaps a logged one fails its whole commit.
func TestRunsOfAGroup(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	var recs []Record
	for i := int64(1); i <= 6; i++ {
		for ws := int64(1); ws <= 3; ws++ {
			recs = append(recs, Record{Workspace: ws, Seq: i, NowMs: 10 * i, Op: "acquire", Body: []byte(fmt.Sprintf(`{"ws":%d,"n":%d}`, ws, i)), Status: 200})
		}
	}
	if err := s.Commit(recs); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM log_runs`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d runs (%v), want 3: one per workspace", n, err)
	}
	for ws := int64(1); ws <= 3; ws++ {
		_, _, got, err := s.Load(context.Background(), ws)
		if err != nil || len(got) != 6 {
			t.Fatalf("workspace %d: %d commands, %v", ws, len(got), err)
		}
		for i, r := range got {
			if r.Seq != int64(i+1) || string(r.Body) != fmt.Sprintf(`{"ws":%d,"n":%d}`, ws, i+1) {
				t.Fatalf("workspace %d command %d: seq %d body %s", ws, i, r.Seq, r.Body)
			}
		}
	}
	for _, overlap := range [][2]int64{{6, 7}, {3, 8}, {1, 1}, {0, 2}} {
		var bad []Record
		bad = append(bad, Record{Workspace: 3, Seq: 7, Op: "tick", Status: 200}) // fine on its own
		for seq := overlap[0]; seq <= overlap[1]; seq++ {
			bad = append(bad, Record{Workspace: 1, Seq: seq, Op: "tick", Status: 200})
		}
		if err := s.Commit(bad); err == nil || !strings.Contains(err.Error(), "logged already") {
			t.Errorf("commands %d to %d again: %v, want refused", overlap[0], overlap[1], err)
		}
	}
	if _, _, got, _ := s.Load(context.Background(), 3); len(got) != 6 {
		t.Errorf("a refused commit left workspace 3 with %d commands, want 6", len(got))
	}
	if ms, err := s.LastStampMs(); err != nil || ms != 60 {
		t.Errorf("last stamp %d (%v), want 60", ms, err)
	}
	if seq, err := s.LastSeq(context.Background(), 2); err != nil || seq != 6 {
		t.Errorf("last seq %d (%v), want 6", seq, err)
	}
}

// TestLogTrimKeepsRunsWhole: a trim deletes the runs that end by its
// point and keeps one that straddles it, so every command after the
// point stays.
func TestLogTrimKeepsRunsWhole(t *testing.T) {
	s := open(t, t.TempDir(), Options{LogKeep: 10})
	seq := int64(0)
	for _, n := range []int{8, 8, 8, 8} { // runs 1-8, 9-16, 17-24, 25-32
		var recs []Record
		for range n {
			seq++
			recs = append(recs, Record{Workspace: 1, Seq: seq, NowMs: seq, Op: "acquire", Body: []byte("{}"), Status: 200})
		}
		if err := s.Commit(recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveSnapshot(1, 30, []byte("{}")); err != nil { // trims to 20
		t.Fatal(err)
	}
	rows, err := s.LogEvents(context.Background(), 1, 0, 100)
	if err != nil || len(rows) != 16 || rows[0].Seq != 17 || rows[15].Seq != 32 {
		t.Fatalf("after a trim to 20 the log holds %d commands from %v (%v), want 17 to 32", len(rows), rows[:min(1, len(rows))], err)
	}
	// After a seq inside a run, the reads start after it.
	if rows, _ := s.LogEvents(context.Background(), 1, 18, 3); len(rows) != 3 || rows[0].Seq != 19 || rows[2].Seq != 21 {
		t.Errorf("3 commands after 18: %+v, want 19 to 21", rows)
	}
	if recs, _ := s.LogSince(context.Background(), 1, 31); len(recs) != 1 || recs[0].Seq != 32 {
		t.Errorf("log since 31: %+v, want command 32", recs)
	}
}

// TestLogOfSchema1: a folder of schema 1 (a row of log per command)
// opens as schema 2; its rows read back before the runs written after
// them, a trim deletes both, and a schema this build does not know is
// refused.
func TestLogOfSchema1(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{LogKeep: 2})
	for seq := int64(1); seq <= 4; seq++ {
		var events any // NULL: a row from before the log kept events
		if seq > 2 {
			events = []byte(`[{"n":1}]`)
		}
		if _, err := s.db.Exec(`INSERT INTO log(workspace_id, seq, now_ms, op, body, status, events, semantics, rules) VALUES(1, ?, ?, 'acquire', ?, 200, ?, 1, NULL)`,
			seq, 100*seq, []byte(fmt.Sprintf(`{"n":%d}`, seq)), events); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.Exec(`UPDATE meta SET value = '1' WHERE key = 'schema'`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir, Options{LogKeep: 2})
	var v string
	if err := s.db.QueryRow(`SELECT value FROM meta WHERE key = 'schema'`).Scan(&v); err != nil || v != "2" {
		t.Fatalf("schema %q (%v) after opening a folder of schema 1, want 2", v, err)
	}
	if err := s.Commit([]Record{{Workspace: 1, Seq: 5, NowMs: 500, Op: "release", Body: []byte(`{"n":5}`), Status: 200}, {Workspace: 1, Seq: 6, NowMs: 600, Op: "tick", Status: 200}}); err != nil {
		t.Fatal(err)
	}
	_, _, recs, err := s.Load(context.Background(), 1)
	if err != nil || len(recs) != 6 {
		t.Fatalf("load: %d commands, %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) || r.NowMs != 100*int64(i+1) {
			t.Fatalf("command %d: seq %d at %d", i, r.Seq, r.NowMs)
		}
	}
	ev, err := s.LogEvents(context.Background(), 1, 1, 10)
	if err != nil || len(ev) != 5 || ev[0].Known || !ev[1].Known || !ev[4].Known || string(ev[2].Events) != `[{"n":1}]` {
		t.Fatalf("events after 1: %+v (%v)", ev, err)
	}
	if ms, _ := s.LastStampMs(); ms != 600 {
		t.Errorf("last stamp %d, want 600", ms)
	}
	if err := s.SaveSnapshot(1, 6, []byte("{}")); err != nil { // trims to 4: the old rows
		t.Fatal(err)
	}
	if ev, _ := s.LogEvents(context.Background(), 1, 0, 10); len(ev) != 2 || ev[0].Seq != 5 {
		t.Errorf("after a trim to 4 the log holds %+v, want 5 and 6", ev)
	}
	if _, err := s.db.Exec(`UPDATE meta SET value = '3' WHERE key = 'schema'`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "schema version 3") {
		t.Errorf("a folder of schema 3 opened: %v", err)
	}
}
