package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/servertest"
)

const (
	wsKey     = "ws-key"  // a workspace key: names any agent
	agentAKey = "agent-a" // an agent key of didA only
	didA      = "did:web:acme.example:agent:a"
	didB      = "did:web:acme.example:agent:b"
	resource  = "lock:deploy/production"
	badKey    = "no-such-key"
	startMs   = int64(1_700_000_000_000)
	stepMs    = int64(100)
	mcpPath   = "/mcp"
)

// plane is a Backend over the real native kernel with the REST rules the
// server applies before it: 401 for an unknown key, 403 actor_mismatch when
// an agent key names another agent. The clock advances stepMs per call.
type plane struct {
	mu    sync.Mutex
	eng   kernel.Engine
	now   int64
	keys  map[string]string // key -> the only actorDid it may name ("" = any)
	calls []string          // key + " " + op, in order
}

func newPlane(t testing.TB) *plane {
	t.Helper()
	eng, err := kernel.Native.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &plane{eng: eng, now: startMs, keys: map[string]string{wsKey: "", agentAKey: didA}}
}

func (p *plane) Call(_ context.Context, key string, op kernel.Op, body []byte) (int, []byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, key+" "+string(op))
	only, ok := p.keys[key]
	if !ok {
		return http.StatusUnauthorized, []byte(`{"ok":false,"reason":"unauthorized","error":"unknown key"}`), nil
	}
	if only != "" && len(body) > 0 {
		var b struct {
			ActorDid string `json:"actorDid"`
		}
		if json.Unmarshal(body, &b) == nil && b.ActorDid != only {
			return http.StatusForbidden, []byte(`{"ok":false,"reason":"actor_mismatch","error":"this key may only name ` + only + `"}`), nil
		}
	}
	p.now += stepMs
	r, err := p.eng.Apply(op, p.now, body)
	if err != nil {
		return 0, nil, err
	}
	return r.Status, r.Answer, nil
}

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// newBearerClient is an HTTP client that sends key as a Bearer token (none
// when key is empty).
func newBearerClient(key string) *http.Client {
	return &http.Client{Transport: bearerTransport{key}}
}

// connector opens a client session that calls the plane with key.
type connector func(t testing.TB, p *plane, key string) *sdk.ClientSession

func connectHTTP(t testing.TB, p *plane, key string) *sdk.ClientSession {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(mcpPath, Handler(p, Options{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tr := &sdk.StreamableClientTransport{Endpoint: srv.URL + mcpPath, HTTPClient: newBearerClient(key)}
	return connect(t, tr)
}

func connectStdio(t testing.TB, p *plane, key string) *sdk.ClientSession {
	t.Helper()
	// Two OS pipes, as between an MCP client and a server process.
	toServerR, toServerW := io.Pipe()
	toClientR, toClientW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeStdio(ctx, p, key, toServerR, toClientW, Options{}) }()
	t.Cleanup(func() {
		cancel()
		toServerW.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	})
	return connect(t, &sdk.IOTransport{Reader: toClientR, Writer: toServerW})
}

func connect(t testing.TB, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "leaseplane-test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

var transports = []struct {
	name    string
	connect connector
}{
	{"http", connectHTTP},
	{"stdio", connectStdio},
}

// call calls a tool and checks that its structuredContent fits the tool's
// declared output schema and equals its first text block's JSON (the text
// copy), for results that are not errors.
func call(t *testing.T, cs *sdk.ClientSession, schemas map[string]*jsonschema.Resolved, name string, args any) (*sdk.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.StructuredContent == nil {
		if !res.IsError {
			t.Fatalf("%s: no structuredContent in a result that is not an error", name)
		}
		return res, nil
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: structuredContent is not an object: %s", name, raw)
	}
	if err := schemas[name].Validate(v); err != nil {
		t.Errorf("%s: structuredContent %s does not fit the output schema: %v", name, raw, err)
	}
	if !res.IsError {
		text := res.Content[0].(*sdk.TextContent).Text
		var tv any
		if err := json.Unmarshal([]byte(text), &tv); err != nil {
			t.Errorf("%s: text copy is not JSON: %q", name, text)
		}
		tb, _ := json.Marshal(tv)
		vb, _ := json.Marshal(v)
		if !bytes.Equal(tb, vb) {
			t.Errorf("%s: text copy %s differs from structuredContent %s", name, tb, vb)
		}
	}
	return res, v
}

// listTools lists the tools, checks their names and schemas and returns the
// resolved output schemas by tool name.
func listTools(t *testing.T, cs *sdk.ClientSession) map[string]*jsonschema.Resolved {
	t.Helper()
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	out := map[string]*jsonschema.Resolved{}
	required := map[string][]string{
		ToolAcquire: {"resource", "actorDid"},
		ToolRelease: {"resource", "actorDid"},
		ToolWait:    nil,
		// the operator tools, offered by a Backend that is an Operator
		ToolDrillsRun:    nil,
		ToolDrillsCancel: {"id"},
		ToolDetectionRun: {"detector"},
	}
	props := map[string][]string{
		ToolAcquire:      {"actorDid", "mode", "resource", "ttlMs", "waitUpToMs"},
		ToolRelease:      {"actorDid", "resource"},
		ToolWait:         nil,
		ToolDrillsRun:    nil,
		ToolDrillsCancel: {"id"},
		ToolDetectionRun: {"detector"},
	}
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		in := schemaOf(t, tl.InputSchema)
		if !slices.Equal(in.Required, required[tl.Name]) {
			t.Errorf("%s: required %v, want %v", tl.Name, in.Required, required[tl.Name])
		}
		var got []string
		for k := range in.Properties {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, props[tl.Name]) {
			t.Errorf("%s: input properties %v, want %v", tl.Name, got, props[tl.Name])
		}
		if tl.OutputSchema == nil {
			t.Fatalf("%s: no output schema", tl.Name)
		}
		r, err := schemaOf(t, tl.OutputSchema).Resolve(nil)
		if err != nil {
			t.Fatalf("%s: output schema does not resolve: %v", tl.Name, err)
		}
		out[tl.Name] = r
		if len(tl.Description) < 100 {
			t.Errorf("%s: description too short for an agent: %q", tl.Name, tl.Description)
		}
	}
	slices.Sort(names)
	want := []string{ToolAcquire, ToolRelease, ToolWait}
	if slices.Contains(names, ToolDrillsRun) {
		want = []string{ToolAcquire, ToolRelease, ToolWait, ToolDetectionRun, ToolDrillsCancel, ToolDrillsRun}
		slices.Sort(want)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	return out
}

func schemaOf(t *testing.T, v any) *jsonschema.Schema {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("schema %s: %v", b, err)
	}
	return &s
}

// toolNames lists the tools cs is offered, by name, sorted.
func toolNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, x := range lt.Tools {
		names = append(names, x.Name)
	}
	slices.Sort(names)
	return names
}

// wantToolError calls a tool on cs and fails the test (saying what) unless
// the call answers an isError result containing want.
func wantToolError(t *testing.T, what string, cs *sdk.ClientSession, params *sdk.CallToolParams, want string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatalf("%s: protocol error: %v", what, err)
	}
	if !res.IsError || !strings.Contains(text(res), want) {
		t.Errorf("%s: isError=%v %q, want an error containing %q", what, res.IsError, text(res), want)
	}
}

func text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestToolsFlow is the acceptance flow over both transports: list
// the three tools, acquire, be refused lease_held by another agent, read
// the queue, release; an agent key naming another agent gets an error.
func TestToolsFlow(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := newPlane(t)
			flow(t, tr.connect(t, p, agentAKey), tr.connect(t, p, wsKey))
		})
	}
}

// flow runs the acceptance flow with a, a session with agent A's own key,
// and ws, a session with a workspace key.
func flow(t *testing.T, a, ws *sdk.ClientSession) {
	t.Helper()
	schemas := listTools(t, a)

	res, v := call(t, a, schemas, ToolAcquire, map[string]any{"resource": resource, "actorDid": didA, "ttlMs": 5000})
	if res.IsError || v["ok"] != true {
		t.Fatalf("acquire by A: %s", text(res))
	}
	lease := v["lease"].(map[string]any)
	if lease["holder"] != didA || lease["expiresAtMs"].(float64)-lease["grantedAtMs"].(float64) != kernel.LeaseTTLMs {
		t.Errorf("lease %v: want holder %s and the fixed 30000 ms lifetime (ttlMs dropped)", lease, didA)
	}

	res, v = call(t, ws, schemas, ToolAcquire, map[string]any{"resource": resource, "actorDid": didB})
	if res.IsError {
		t.Fatalf("a refusal must be a normal result, got isError: %s", text(res))
	}
	if v["ok"] != false || v["reason"] != kernel.ReasonLeaseHeld || v["holder"] != didA {
		t.Fatalf("acquire by B: %v, want lease_held by %s", v, didA)
	}
	if w := v["stampede"].(map[string]any)["waitMs"]; w != float64(50) {
		t.Errorf("stampede.waitMs %v, want 50", w)
	}

	res, v = call(t, a, schemas, ToolWait, map[string]any{})
	if res.IsError {
		t.Fatalf("wait: %s", text(res))
	}
	queues := v["queues"].([]any)
	if len(queues) != 1 {
		t.Fatalf("wait: queues %v, want one", queues)
	}
	q := queues[0].(map[string]any)
	waiters := q["waiters"].([]any)
	if q["resource"] != resource || len(waiters) != 1 || waiters[0].(map[string]any)["actorDid"] != didB {
		t.Errorf("wait: queue %v, want %s with waiter %s", q, resource, didB)
	}

	// Agent A's key naming B: an error result, not a refusal.
	res, v = call(t, a, schemas, ToolRelease, map[string]any{"resource": resource, "actorDid": didB})
	if !res.IsError || v["reason"] != "actor_mismatch" || !strings.Contains(text(res), "actor_mismatch") {
		t.Errorf("agent key naming another agent: isError=%v %s, want an actor_mismatch error", res.IsError, text(res))
	}

	res, v = call(t, a, schemas, ToolRelease, map[string]any{"resource": resource, "actorDid": didA})
	if res.IsError || v["ok"] != true || v["released"] != true || len(v["releasedIds"].([]any)) != 1 {
		t.Fatalf("release: %s", text(res))
	}

	res, v = call(t, ws, schemas, ToolAcquire, map[string]any{"resource": resource, "actorDid": didB})
	if res.IsError || v["ok"] != true {
		t.Errorf("acquire by B after the release: %s", text(res))
	}
}

// TestStructuredContentIsTheRESTAnswer checks the bytes: structuredContent
// and the text copy carry exactly what the REST route answers.
func TestStructuredContentIsTheRESTAnswer(t *testing.T) {
	p := newPlane(t)
	cs := connectStdio(t, p, wsKey)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: ToolAcquire, Arguments: map[string]any{"resource": resource, "actorDid": didA}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ok":true,"lease":{"id":"` + kernel.LeaseID(resource, 1) + `","resource":"lock:deploy/production","holder":"did:web:acme.example:agent:a","mode":"write","fence":1,"grantedAtMs":1700000000100,"expiresAtMs":1700000030100}}`
	if got := text(res); got != want {
		t.Errorf("text copy\n got %s\nwant %s", got, want)
	}
}

// TestErrorResults covers the isError results: bad arguments, a refused
// input, a wrong key, a plane that cannot be reached.
func TestErrorResults(t *testing.T) {
	cases := []struct {
		name     string
		key      string
		tool     string
		args     any
		contains string
		backend  bool // the call reaches the backend
	}{
		{"missing resource", wsKey, ToolAcquire, map[string]any{"actorDid": didA}, "resource is required", false},
		{"missing actorDid", wsKey, ToolRelease, map[string]any{"resource": resource}, "actorDid is required", false},
		{"resource not a string", wsKey, ToolAcquire, map[string]any{"resource": 7, "actorDid": didA}, "resource must be a string", false},
		{"ttlMs not a number", wsKey, ToolAcquire, map[string]any{"resource": resource, "actorDid": didA, "ttlMs": "long"}, "ttlMs must be a number", false},
		{"leaseId on release", wsKey, ToolRelease, map[string]any{"resource": resource, "actorDid": didA, "leaseId": "x"}, `unknown argument "leaseId"`, false},
		{"mode not a string", wsKey, ToolAcquire, map[string]any{"resource": resource, "actorDid": didA, "mode": 1}, "mode must be a string", false},
		{"kernel refuses the mode", wsKey, ToolAcquire, map[string]any{"resource": resource, "actorDid": didA, "mode": "bogus"}, "invalid_request: mode", true},
		{"argument to wait", wsKey, ToolWait, map[string]any{"resource": resource}, "coordination.wait takes no arguments", false},
		{"arguments not an object", wsKey, ToolAcquire, []any{resource, didA}, "arguments must be a JSON object", false},
		{"kernel refuses the DID", wsKey, ToolAcquire, map[string]any{"resource": resource, "actorDid": "agent-a"}, "invalid_request: actorDid", true},
		{"empty resource", wsKey, ToolAcquire, map[string]any{"resource": "", "actorDid": didA}, "invalid_request: resource", true},
		{"unknown key", badKey, ToolWait, nil, "unauthorized", true},
	}
	for _, tr := range transports {
		for _, c := range cases {
			t.Run(tr.name+"/"+c.name, func(t *testing.T) {
				p := newPlane(t)
				cs := tr.connect(t, p, c.key)
				wantToolError(t, c.tool, cs, &sdk.CallToolParams{Name: c.tool, Arguments: c.args}, c.contains)
				if reached := len(p.calls) > 0; reached != c.backend {
					t.Errorf("backend calls %v, want reached=%v", p.calls, c.backend)
				}
			})
		}
	}
}

// downPlane is a Backend that cannot reach its plane.
type downPlane struct{}

func (downPlane) Call(context.Context, string, kernel.Op, []byte) (int, []byte, error) {
	return 0, nil, io.ErrUnexpectedEOF
}

func TestUnreachablePlane(t *testing.T) {
	toServerR, toServerW := io.Pipe()
	toClientR, toClientW := io.Pipe()
	go ServeStdio(context.Background(), downPlane{}, "", toServerR, toClientW, Options{AuthHint: "set LEASEPLANE_KEY"})
	defer toServerW.Close()
	cs := connect(t, &sdk.IOTransport{Reader: toClientR, Writer: toServerW})
	wantToolError(t, "wait with the plane down", cs, &sdk.CallToolParams{Name: ToolWait}, "gave no decision")
}

// TestHTTPAuth checks the HTTP layer: no bearer key is HTTP 401 with a
// challenge and a JSON refusal, before any MCP processing.
func TestHTTPAuth(t *testing.T) {
	p := newPlane(t)
	srv := httptest.NewServer(Handler(p, Options{}))
	defer srv.Close()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}`
	for _, auth := range []string{"", "Basic dXNlcjpwdw==", "Bearer ", "Bearer"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, body := servertest.Send(t, req)
		var v map[string]any
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &v) != nil || v["reason"] != "unauthorized" ||
			!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %d %s %v, want 401 unauthorized with a Bearer challenge", auth, resp.StatusCode, body, resp.Header)
		}
	}
	if len(p.calls) != 0 {
		t.Errorf("backend called without a key: %v", p.calls)
	}

	// With a key (any case of the scheme) the same request initializes.
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(init))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "bearer "+wsKey)
	resp, body := servertest.Send(t, req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"leaseplane"`) {
		t.Errorf("initialize with a key: %d %s", resp.StatusCode, body)
	}
}

// TestHTTPBodyLimit checks that an oversized body is refused, not read.
func TestHTTPBodyLimit(t *testing.T) {
	srv := httptest.NewServer(Handler(newPlane(t), Options{}))
	defer srv.Close()
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"coordination.wait","arguments":{"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}}}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+wsKey)
	resp, _ := servertest.Send(t, req)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d, want 413", resp.StatusCode)
	}
}

// TestRefusalsAreResults checks that deadlock and suspended, like
// lease_held, are normal results whose answers fit the output schema.
func TestRefusalsAreResults(t *testing.T) {
	p := newPlane(t)
	cs := connectStdio(t, p, wsKey)
	schemas := listTools(t, cs)
	acquire := func(res, did string) map[string]any {
		t.Helper()
		r, v := call(t, cs, schemas, ToolAcquire, map[string]any{"resource": res, "actorDid": did})
		if r.IsError {
			t.Fatalf("acquire %s by %s: isError %s", res, did, text(r))
		}
		return v
	}
	acquire("r1", didA)
	acquire("r2", didB)
	if v := acquire("r2", didA); v["reason"] != kernel.ReasonLeaseHeld {
		t.Fatalf("A asks r2: %v, want lease_held", v)
	}
	v := acquire("r1", didB)
	if v["reason"] != kernel.ReasonDeadlock || v["holder"] != didA || v["waitingOn"] != "r2" {
		t.Fatalf("B asks r1: %v, want deadlock with holder A waiting on r2", v)
	}
	if cycle, _ := v["cycle"].([]any); len(cycle) == 0 {
		t.Errorf("deadlock without a cycle: %v", v)
	}
	_, v = call(t, cs, schemas, ToolWait, nil)
	if d, _ := v["deadlocks"].([]any); len(d) != 1 {
		t.Errorf("wait: deadlocks %v, want the one refused", v["deadlocks"])
	}

	if _, _, err := p.Call(context.Background(), wsKey, kernel.OpSuspend, []byte(`{"actorDid":"`+didB+`"}`)); err != nil {
		t.Fatal(err)
	}
	if v := acquire("r3", didB); v["reason"] != kernel.ReasonSuspended {
		t.Errorf("suspended agent: %v, want suspended", v)
	}
}

// bufferCloser is an output that records what the server wrote.
type bufferCloser struct{ servertest.Buffer }

func (w *bufferCloser) Close() error { return nil }

// TestStdioAnswersBeforeEOF checks that a client that writes its requests
// and closes its end at once (a shell pipe) gets every answer.
func TestStdioAnswersBeforeEOF(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"coordination.lease.acquire","arguments":{"resource":"r","actorDid":"` + didA + `"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
	}, "\n") + "\n"
	var out bufferCloser
	if err := ServeStdio(context.Background(), newPlane(t), wsKey, io.NopCloser(strings.NewReader(in)), &out, Options{}); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	got := out.String()
	for _, want := range []string{`"id":1,"result":{`, `"id":"two","result":{"content":[{"type":"text","text":"{\"ok\":true`, `"id":3,"result":{`, `"name":"coordination.wait"`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
}

func TestLineBuf(t *testing.T) {
	var l lineBuf
	var lines []string
	f := func(b []byte) { lines = append(lines, string(b)) }
	l.feed([]byte("ab"), f)
	l.feed([]byte("c\nd\n\nef"), f)
	l.feed([]byte(strings.Repeat("x", maxTrackedLine)+"\ng\n"), f)
	if want := []string{"abc", "d", "", "g"}; !slices.Equal(lines, want) {
		t.Errorf("lines %q, want %q", lines, want)
	}
}

// TestArgumentsReachTheKernelIntact checks that names with characters JSON
// encoders like to escape arrive unchanged.
func TestArgumentsReachTheKernelIntact(t *testing.T) {
	p := newPlane(t)
	cs := connectStdio(t, p, wsKey)
	schemas := listTools(t, cs)
	name := "file:<a&b>/\u2028\"quoted\"/ünï/\u2028"
	_, v := call(t, cs, schemas, ToolAcquire, map[string]any{"resource": name, "actorDid": didA})
	if got := v["lease"].(map[string]any)["resource"]; got != name {
		t.Errorf("resource %q, want %q", got, name)
	}
}

// TestHTTPBehindAProxy checks that a request reaching the loopback
// listener with a public Host (a reverse proxy on the same machine) is
// served like any other.
func TestHTTPBehindAProxy(t *testing.T) {
	srv := httptest.NewServer(Handler(newPlane(t), Options{}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"coordination.wait","arguments":{}}}`))
	req.Host = "plane.example.com"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+wsKey)
	resp, body := servertest.Send(t, req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `\"queues\":[]`) {
		t.Errorf("via a proxy: %d %s, want 200 with the queues", resp.StatusCode, body)
	}
}

// oddPlane answers with a fixed status and body.
type oddPlane struct {
	status int
	body   string
}

func (o oddPlane) Call(context.Context, string, kernel.Op, []byte) (int, []byte, error) {
	return o.status, []byte(o.body), nil
}

// TestOddAnswers covers answers the plane should never give: they become
// error results that say what came back, never a crash.
func TestOddAnswers(t *testing.T) {
	for _, c := range []struct {
		plane    oddPlane
		contains string
	}{
		{oddPlane{502, "<html>bad gateway</html>"}, "HTTP 502 with a body that is not JSON"},
		{oddPlane{200, "[1,2]"}, "HTTP 200 with a body that is not JSON"},
		{oddPlane{503, `{"ok":false,"reason":"unavailable","error":"commit failed"}`}, "unavailable: commit failed"},
		{oddPlane{500, `{"ok":false}`}, "HTTP 500"},
	} {
		toServerR, toServerW := io.Pipe()
		toClientR, toClientW := io.Pipe()
		go ServeStdio(context.Background(), c.plane, "", toServerR, toClientW, Options{})
		cs := connect(t, &sdk.IOTransport{Reader: toClientR, Writer: toServerW})
		wantToolError(t, fmt.Sprintf("%d %s", c.plane.status, c.plane.body), cs, &sdk.CallToolParams{Name: ToolWait}, c.contains)
		toServerW.Close()
	}
}
