package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/kernel/scenario"
	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/server/store"
)

// TestCorpusOverREST replays every corpus scenario through the REST routes
// and checks that each answer body is byte for byte the transcript's
// answer, with the status its reason calls for: a transcript is exactly
// what the plane would have answered over HTTP.
//
// Steps REST cannot express are sent as the nearest request: a tick
// becomes a wait (both move the clock and lapse what is due; neither
// answer is compared), and steps whose op or atMs is itself invalid are
// skipped. The server's alarms fire as the test clock passes them, as
// they would in a running plane. Suspend and resume go to the operator routes with an operator
// key.
func TestCorpusOverREST(t *testing.T) {
	files, err := filepath.Glob("../kernel/testdata/scenarios/*.json")
	if err != nil || len(files) < 40 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	compared := 0
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			compared += replayOverREST(t, file)
		})
	}
	t.Logf("%d answers of %d corpus scenarios compared over REST", compared, len(files))
	if compared < 300 {
		t.Fatalf("only %d answers compared over REST", compared)
	}
}

func replayOverREST(t *testing.T, file string) int {
	in, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	// The server decides by the current semantics only: scenarios of an
	// older one are compared by the hosts' parity runs, not here.
	if s.Semantics != 0 && s.Semantics != kernel.Semantics {
		return 0
	}
	golden, err := os.ReadFile(strings.TrimSuffix(file, ".json") + ".golden")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(golden), "\n")
	lines = lines[1 : 1+len(s.Steps)] // between {"steps":[ and ],"trust"
	clock := servertest.NewClock()
	// The plane's clock starts where the wall clock is when the server
	// starts and never goes back: start it at the scenario's first time.
	for _, step := range s.Steps {
		if c, err := kernel.DecodeStep(step); err == nil {
			clock.Advance(time.UnixMilli(c.NowMs).Sub(clock.Now()))
			break
		}
	}
	srv := mustNew(t, Config{
		DataDir:    t.TempDir(),
		Engine:     kernel.Native,
		Clock:      clock.Now,
		AfterFunc:  clock.AfterFunc,
		FirstRules: s.Rules,
		// The herd's fifty held asks come with one key.
		MaxConns: 4096, MaxHeld: 1024, MaxHeldPerKey: 1024,
	})
	defer srv.Shutdown(context.Background())
	key := mustBootstrap(t, srv, "default")
	ws, _, err := srv.Store().EnsureWorkspace("default", s.Rules, 0)
	if err != nil {
		t.Fatal(err)
	}
	opKey, _, err := srv.Store().CreateKey(ws, store.RoleOperator, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, s: srv, clock: clock, key: key}
	held := newHeldRequests(t, srv, key)
	defer held.end()
	compared := 0
	for i, step := range s.Steps {
		var want struct {
			Answer  json.RawMessage `json:"answer"`
			Held    string          `json:"held"`
			Answers []struct {
				AskID  string          `json:"askId"`
				Answer json.RawMessage `json:"answer"`
			} `json:"answers"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSuffix(lines[i], ",")), &want); err != nil {
			t.Fatalf("golden line %d: %v", i, err)
		}
		// The held asks this step ended are answered to their requests,
		// each byte for byte as the transcript has it.
		checkAnswers := func() {
			for _, a := range want.Answers {
				status, got := held.answer(a.AskID)
				if !bytes.Equal(got, a.Answer) {
					t.Fatalf("step %d: held request %s answered %s\ntranscript says %s", i, a.AskID, got, a.Answer)
				}
				if ws := statusOf(a.Answer); status != ws {
					t.Fatalf("step %d: held request %s: status %d, want %d for %s", i, a.AskID, status, ws, a.Answer)
				}
				compared++
			}
		}
		c, decErr := kernel.DecodeStep(step)
		op, atMs, body, ok := restOf(step)
		if !ok {
			continue // op or atMs itself invalid: no REST request says that
		}
		if atMs > servertest.NewClock().Now().Add(100*365*24*time.Hour).UnixMilli() {
			break // beyond what the test's clock can reach (the kernel's goes to 2^53 ms)
		}
		if decErr == nil {
			op, atMs = c.Op, c.NowMs
			clock.Advance(time.UnixMilli(atMs).Sub(clock.Now()))
		} else if _, restErr := kernel.DecodeRequest(op, 0, []byte(body)); restErr == nil || restErr.Error() != decErr.Error() {
			continue // the step's fault is in its op or atMs, which a REST request cannot carry
		}
		// An invalid step leaves the clock alone: the kernel ignores its time.
		var method, route, k string
		switch op {
		case kernel.OpCancel:
			// No route: the host cancels when a held request's client goes
			// away, which is what the test does here.
			if decErr == nil {
				held.cancel(c)
				checkAnswers()
			}
			continue
		case kernel.OpAcquire:
			if decErr == nil && c.WaitUpToMs > 0 {
				// Sent in the background; the next step goes once it is
				// parked on its ask (or answered at once).
				if status, got, ok := held.send(body, want.Held); ok {
					if !bytes.Equal(got, want.Answer) {
						t.Fatalf("step %d held acquire %s:\nREST answered   %s\ntranscript says %s", i, body, got, want.Answer)
					}
					if ws := statusOf(want.Answer); status != ws {
						t.Fatalf("step %d: status %d, want %d for %s", i, status, ws, want.Answer)
					}
				}
				compared++
				checkAnswers()
				continue
			}
			method, route, k = "POST", api.PathLease, key
		case kernel.OpRelease:
			method, route, k = "POST", api.PathRelease, key
		case kernel.OpSuspend:
			method, route, k = "POST", api.PathSuspend, opKey
		case kernel.OpResume:
			method, route, k = "POST", api.PathResume, opKey
		case kernel.OpForget:
			method, route, k = "POST", api.PathForget, opKey
		case kernel.OpTick:
			if body != "{}" {
				continue // a GET has no body to be wrong in
			}
			method, route, k, body = "GET", api.PathWait, key, ""
		case kernel.OpWait:
			q, ok := queryOf(body)
			if !ok {
				continue // a wrong type: a query parameter is text
			}
			method, route, k, body = "GET", api.PathWait+q, key, ""
		}
		status, _, got := ts.do(method, route, k, body)
		checkAnswers()
		if op == kernel.OpTick {
			continue
		}
		if !bytes.Equal(got, want.Answer) {
			t.Fatalf("step %d %s %s %s:\nREST answered   %s\ntranscript says %s", i, method, route, body, got, want.Answer)
		}
		if ws := statusOf(want.Answer); status != ws {
			t.Fatalf("step %d: status %d, want %d for %s", i, status, ws, want.Answer)
		}
		compared++
	}
	return compared
}

// restOf splits a step into its op, its time and the REST body (the step
// without atMs and op, members otherwise as written). ok is false when the
// op or atMs cannot be read.
func restOf(step []byte) (op kernel.Op, atMs int64, body string, ok bool) {
	var b strings.Builder
	b.WriteByte('{')
	n := 0
	opOK, atOK := false, false
	err := kernel.ScanMembers(step, func(name string, raw []byte) error {
		switch name {
		case "op":
			s, err := kernel.Unquote(raw)
			if o, perr := kernel.ParseOp(s); err == nil && perr == nil {
				op, opOK = o, true
			}
			return nil
		case "atMs":
			var v int64
			if json.Unmarshal(raw, &v) == nil && v >= 0 {
				atMs, atOK = v, true
			}
			return nil
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		b.Write(kernel.AppendQuote(nil, name))
		b.WriteByte(':')
		b.Write(raw)
		return nil
	})
	b.WriteByte('}')
	return op, atMs, b.String(), err == nil && opOK && atOK
}

// queryOf turns a wait step's paging into query parameters; ok is false
// when a value has a type a query cannot carry (or the REST route refuses
// on its own, as an out-of-range limit).
func queryOf(body string) (q string, ok bool) {
	var m map[string]any
	if json.Unmarshal([]byte(body), &m) != nil {
		return "", false
	}
	v := url.Values{}
	for name, val := range m {
		switch x := val.(type) {
		case string:
			if name != "prefix" && name != "after" {
				return "", false
			}
			v.Set(name, x)
		case float64:
			if name != "limit" || x < 1 || x > kernel.MaxWaitLimit {
				return "", false
			}
			v.Set(name, strconv.FormatFloat(x, 'f', -1, 64))
		default:
			return "", false
		}
	}
	if len(v) == 0 {
		return "", true
	}
	return "?" + v.Encode(), true
}

func statusOf(answer []byte) int {
	var a struct {
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(answer, &a)
	switch {
	case a.OK:
		return 200
	case a.Reason == kernel.ReasonInvalid:
		return 400
	case a.Reason == kernel.ReasonSuspended:
		return 403
	case a.Reason == kernel.ReasonLimit:
		return 429
	}
	return 409
}

// corpusHeld are the held requests of one scenario replayed over REST,
// by the askId the transcript gives them.
type corpusHeld struct {
	t       *testing.T
	s       *Server
	key     string
	byAsk   map[string]*corpusRequest
	cancels []context.CancelFunc
}

type corpusRequest struct {
	cancel context.CancelFunc
	done   chan struct{}
	status int
	body   []byte
}

func newHeldRequests(t *testing.T, s *Server, key string) *corpusHeld {
	return &corpusHeld{t: t, s: s, key: key, byAsk: map[string]*corpusRequest{}}
}

// send posts a held acquire in the background. When the transcript holds
// it (askID not empty), send returns once the server has parked it on
// that ask; else it returns its answer (ok).
func (h *corpusHeld) send(body, askID string) (status int, answer []byte, ok bool) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancels = append(h.cancels, cancel)
	r := &corpusRequest{cancel: cancel, done: make(chan struct{})}
	req := httptest.NewRequestWithContext(ctx, "POST", api.PathLease, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+h.key)
	go func() {
		defer close(r.done)
		w := httptest.NewRecorder()
		h.s.Handler().ServeHTTP(w, req)
		r.status, r.body = w.Code, w.Body.Bytes()
	}()
	if askID == "" {
		r.wait(h.t, body)
		return r.status, r.body, true
	}
	h.byAsk[askID] = r
	until(h.t, "the held request "+askID+" parked", func() bool {
		select {
		case <-r.done:
			h.t.Fatalf("held acquire %s answered %d %s; the transcript holds it as %s", body, r.status, r.body, askID)
		default:
		}
		return h.parked(askID)
	})
	return 0, nil, false
}

// parked reports whether a request is parked on askID.
func (h *corpusHeld) parked(askID string) bool {
	h.s.wsMu.RLock()
	defer h.s.wsMu.RUnlock()
	for _, ws := range h.s.workspaces {
		ws.mu.Lock()
		_, ok := ws.parked[askID]
		ws.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// answer is what the request held on askID was answered.
func (h *corpusHeld) answer(askID string) (int, []byte) {
	h.t.Helper()
	r := h.byAsk[askID]
	if r == nil {
		h.t.Fatalf("the transcript answers %s, which no request held", askID)
	}
	r.wait(h.t, askID)
	delete(h.byAsk, askID)
	return r.status, r.body
}

// cancel is a cancel step over REST: the clients of the asks it names (or
// of all, without askId) go away, and the server cancels their asks.
func (h *corpusHeld) cancel(c kernel.Command) {
	h.t.Helper()
	for id, r := range h.byAsk {
		if c.HasAskID && id != c.AskID {
			continue
		}
		if !h.parked(id) {
			continue // answered already
		}
		r.cancel()
		r.wait(h.t, id)
		delete(h.byAsk, id)
	}
}

// end lets the requests still held go.
func (h *corpusHeld) end() {
	for _, c := range h.cancels {
		c()
	}
	for _, r := range h.byAsk {
		r.wait(h.t, "a held request at the end")
	}
}

func (r *corpusRequest) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer in 30 s", what)
	}
}

// until polls cond, failing the test with what when it has not held
// within 30 s (a watchdog, not a timing).
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
