package server

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/client"
	"github.com/leaseplane/leaseplane/server/store"
)

// stream is one open events stream of a test.
type stream struct {
	ready  chan int64
	events chan client.Event
	done   chan error
	cancel func()
}

func openStream(t *testing.T, url, key string, req client.EventsRequest) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{ready: make(chan int64, 1), events: make(chan client.Event, 100), done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- client.New(url, key, nil).Events(ctx, req, func(n int64) { s.ready <- n },
			func(e client.Event) error { s.events <- e; return nil })
	}()
	t.Cleanup(cancel)
	select {
	case n := <-s.ready:
		s.ready <- n
	case err := <-s.done:
		t.Fatalf("the stream ended before it was ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the stream was never ready")
	}
	return s
}

func (s *stream) next(t *testing.T) client.Event {
	t.Helper()
	select {
	case e := <-s.events:
		return e
	case err := <-s.done:
		t.Fatalf("the stream ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no event came")
	}
	return client.Event{}
}

// none checks that nothing is queued on s (after a command whose events
// it would have shown have been seen on another stream).
func (s *stream) none(t *testing.T) {
	t.Helper()
	select {
	case e := <-s.events:
		t.Errorf("unexpected event %d %s %s", e.ID, e.Type, e.Data)
	default:
	}
}

// TestEventsStream: the stream sends every committed event with its ledger
// index as id and its ledger entry's bytes as data, filtered by agent and
// resource prefix; an agent key sees only its own events; Last-Event-ID
// resumes; bad input is refused.
func TestEventsStream(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	hs := httptest.NewServer(ts.s.Handler())
	t.Cleanup(hs.Close) // after the streams' cancels, which are registered later
	operator := ts.newKey(store.RoleOperator, "", ts.clock.Now().UnixMilli())
	agentB := ts.newKey(store.RoleAgent, "did:web:b", ts.clock.Now().UnixMilli())

	// Events made before the first stream are counted from the log.
	if st, b := ts.lease("lock:a", "did:web:a"); st != 200 {
		t.Fatalf("lease: %d %s", st, b)
	}
	if st, _, b := ts.do("POST", api.PathRelease, ts.key, `{"resource":"lock:a","actorDid":"did:web:a"}`); st != 200 {
		t.Fatalf("release: %d %s", st, b)
	}
	all := openStream(t, hs.URL, ts.key, client.EventsRequest{After: -1})
	if n := <-all.ready; n != 2 {
		t.Fatalf("ready says the next event is %d, want 2 (two events before)", n)
	}
	onlyB := openStream(t, hs.URL, ts.key, client.EventsRequest{ActorDid: "did:web:b", After: -1})
	bOwn := openStream(t, hs.URL, agentB, client.EventsRequest{After: -1})
	lockC := openStream(t, hs.URL, ts.key, client.EventsRequest{Prefix: "lock:c", After: -1})

	ts.lease("lock:a", "did:web:a")
	ts.lease("lock:b", "did:web:b")
	ts.lease("lock:c", "did:web:b")
	if st, _, b := ts.do("POST", api.PathSuspend, operator, `{"actorDid":"did:web:b"}`); st != 200 {
		t.Fatalf("suspend: %d %s", st, b)
	}
	want := []struct{ typ, actor, res string }{
		{"coordination.lease", "did:web:a", "lock:a"},
		{"coordination.lease", "did:web:b", "lock:b"},
		{"coordination.lease", "did:web:b", "lock:c"},
		{"operator.suspend", "did:web:b", ""},
		{"coordination.revoke", "did:web:b", "lock:b"},
		{"coordination.revoke", "did:web:b", "lock:c"},
	}
	var got []client.Event
	for i, w := range want {
		e := all.next(t)
		got = append(got, e)
		if e.ID != int64(2+i) || e.Type != w.typ || e.ActorDid != w.actor || e.Resource != w.res {
			t.Errorf("event %d: id %d %s %s %s, want id %d %+v", i, e.ID, e.Type, e.ActorDid, e.Resource, 2+i, w)
		}
	}
	for _, s := range []*stream{onlyB, bOwn} {
		for i := 1; i < len(want); i++ {
			if e := s.next(t); e.ID != got[i].ID {
				t.Errorf("b's stream: event %d, want %d", e.ID, got[i].ID)
			}
		}
		s.none(t)
	}
	for _, i := range []int{2, 5} {
		if e := lockC.next(t); e.ID != got[i].ID {
			t.Errorf("lock:c's stream: event %d, want %d", e.ID, got[i].ID)
		}
	}
	lockC.none(t)

	// The same bytes as the ledger's entries, at the same indexes.
	ts.ledgerWait()
	entries := ts.entries(ts.key)
	if len(entries) != 8 {
		t.Fatalf("the ledger has %d entries, want 8", len(entries))
	}
	for _, e := range got {
		data, _ := base64.StdEncoding.DecodeString(entries[e.ID].Data)
		if string(data) != string(e.Data) {
			t.Errorf("event %d: stream %s, ledger %s", e.ID, e.Data, data)
		}
	}

	// Resuming after event 4 sends 5, 6, 7 first; after 0, event 1 too
	// (the release, made before any stream).
	again := openStream(t, hs.URL, ts.key, client.EventsRequest{After: 4})
	for _, id := range []int64{5, 6, 7} {
		if e := again.next(t); e.ID != id {
			t.Errorf("resumed after 4: event %d, want %d", e.ID, id)
		}
	}
	again.none(t)
	first := openStream(t, hs.URL, ts.key, client.EventsRequest{After: 0})
	if e := first.next(t); e.ID != 1 || e.Type != "coordination.release" {
		t.Errorf("resumed after 0: event %d %s, want 1 coordination.release", e.ID, e.Type)
	}

	// Refusals.
	for _, c := range []struct {
		key    string
		req    client.EventsRequest
		status int
		reason string
	}{
		{agentB, client.EventsRequest{ActorDid: "did:web:a", After: -1}, 403, "actor_mismatch"},
		{ts.key, client.EventsRequest{ActorDid: "nodid", After: -1}, 400, "invalid_request"},
		{ts.key, client.EventsRequest{After: 99}, 400, "invalid_request"},
		{"lp_nope_nope", client.EventsRequest{After: -1}, 401, "unauthorized"},
	} {
		err := client.New(hs.URL, c.key, nil).Events(context.Background(), c.req, nil, func(client.Event) error { return nil })
		var se *client.StreamError
		if !errors.As(err, &se) || se.Status != c.status || se.Answer.Reason != c.reason {
			t.Errorf("%+v: %v, want HTTP %d %s", c.req, err, c.status, c.reason)
		}
	}
	st, _, b := ts.do("GET", RouteEvents+"?color=red", ts.key, "")
	if st != 400 {
		t.Errorf("an unknown query parameter: %d %s, want 400", st, b)
	}
	req, _ := http.NewRequest("GET", hs.URL+RouteEvents, nil)
	req.Header.Set("Authorization", "Bearer "+ts.key)
	req.Header.Set("Last-Event-ID", "x")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("Last-Event-ID x: %v %v, want 400", resp, err)
	}
}

// TestEventsStreamEndsOnShutdown: a shutdown ends open streams with an
// end event instead of waiting for their clients.
func TestEventsStreamEndsOnShutdown(t *testing.T) {
	ts := newTestServer(t, t.TempDir())
	hs := httptest.NewServer(ts.s.Handler())
	t.Cleanup(hs.Close) // after the streams' cancels, which are registered later
	s := openStream(t, hs.URL, ts.key, client.EventsRequest{After: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go ts.s.Shutdown(ctx)
	select {
	case err := <-s.done:
		var se *client.StreamError
		if !errors.As(err, &se) || se.Answer.Reason != "unavailable" {
			t.Errorf("the stream ended with %v, want an end event saying unavailable", err)
		}
	case <-ctx.Done():
		t.Fatal("the stream outlived the shutdown")
	}
}
