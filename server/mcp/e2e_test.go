package mcp

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/client"
	"github.com/leaseplane/leaseplane/server/store"
)

// realPlane is the real server in-process on a temporary data folder, with
// /mcp mounted as leaseplane serve mounts it, a workspace key and agent A's
// key.
type realPlane struct {
	url         string
	wsKey       string
	agentKey    string
	operatorKey string
}

func startRealPlane(t testing.TB) realPlane {
	t.Helper()
	srv, err := server.New(server.Config{DataDir: t.TempDir(), Engine: kernel.Native, Clock: time.Now})
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	srv.Handle(mcpPath, Handler(srv, Options{}))
	now := time.Now().UnixMilli()
	w, _, err := srv.Store().EnsureWorkspace("acme", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := srv.Store().CreateKey(w, store.RoleWorkspace, "", now)
	if err != nil {
		t.Fatal(err)
	}
	agent, _, err := srv.Store().CreateKey(w, store.RoleAgent, didA, now)
	if err != nil {
		t.Fatal(err)
	}
	operator, _, err := srv.Store().CreateKey(w, store.RoleOperator, "", now)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return realPlane{url: hs.URL, wsKey: ws, agentKey: agent, operatorKey: operator}
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the binary leaseplaneBinary built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// leaseplaneBinary builds cmd/leaseplane once per test run.
func leaseplaneBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "leaseplane-mcp-test")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "leaseplane")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/leaseplane/leaseplane/cmd/leaseplane").CombinedOutput()
		if err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build ./cmd/leaseplane: %v\n%s", binErr, binPath)
	}
	return binPath
}

// connectSubprocess starts `leaseplane mcp` as a child process speaking MCP
// on its stdin and stdout, forwarding to url with key.
func connectSubprocess(t testing.TB, url, key string) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(leaseplaneBinary(t), "mcp")
	cmd.Env = append(os.Environ(), "LEASEPLANE_URL="+url, "LEASEPLANE_KEY="+key)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("leaseplane mcp stderr:\n%s", stderr.String())
		}
	})
	return connect(t, &sdk.CommandTransport{Command: cmd})
}

func connectRealHTTP(t testing.TB, url, key string) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: url + mcpPath, HTTPClient: newBearerClient(key)}
	return connect(t, tr)
}

// realConnectors are the two ways a client reaches the real server:
// streamable HTTP at /mcp, and stdio through a leaseplane mcp child.
var realConnectors = []struct {
	name    string
	connect func(t testing.TB, url, key string) *sdk.ClientSession
}{
	{"http", connectRealHTTP},
	{"stdio-subprocess", connectSubprocess},
}

// TestRealServer runs the acceptance flow against the real server: over
// streamable HTTP at /mcp, and over stdio through `leaseplane mcp` as a
// child process forwarding to the server's REST routes.
func TestRealServer(t *testing.T) {
	for _, tr := range realConnectors {
		t.Run(tr.name, func(t *testing.T) {
			p := startRealPlane(t)
			flow(t, tr.connect(t, p.url, p.agentKey), tr.connect(t, p.url, p.wsKey))

			// A key the plane does not know: refused at the HTTP level
			// (contract_test.go); through leaseplane mcp, an isError result.
			if tr.name == "http" {
				return
			}
			wantToolError(t, "unknown key", tr.connect(t, p.url, "lp_not-a-key"), &sdk.CallToolParams{Name: ToolWait}, "unauthorized")
		})
	}
}

// TestOperatorTools calls drills.run, drills.cancel and detection.run on
// the real server, over streamable HTTP and through leaseplane mcp: with
// the operator key they answer what their REST routes answer; with a
// workspace key they are refused.
func TestOperatorTools(t *testing.T) {
	for _, tr := range realConnectors {
		t.Run(tr.name, func(t *testing.T) {
			p := startRealPlane(t)
			ctx := context.Background()
			op := tr.connect(t, p.url, p.operatorKey)
			if names := toolNames(t, op); !slices.Contains(names, ToolDrillsRun) || !slices.Contains(names, ToolDetectionRun) {
				t.Fatalf("tools %v lack the operator tools", names)
			}
			res, err := op.CallTool(ctx, &sdk.CallToolParams{Name: ToolDrillsRun})
			if err != nil || res.IsError || !strings.Contains(text(res), `"id":"run_1"`) {
				t.Fatalf("drills.run: %v %v %q", err, res.IsError, text(res))
			}
			// The run just asked is queued or running (one drill alone
			// takes 30 s): drills.cancel ends it; a second cancel finds it
			// ended, and a run the workspace does not have is not found.
			res, err = op.CallTool(ctx, &sdk.CallToolParams{Name: ToolDrillsCancel, Arguments: map[string]any{"id": "run_1"}})
			if err != nil || res.IsError || !strings.Contains(text(res), `"id":"run_1"`) || strings.Contains(text(res), `"cancelledAtMs":null`) {
				t.Fatalf("drills.cancel: %v %v %q", err, res.IsError, text(res))
			}
			wantToolError(t, "drills.cancel of a cancelled run", op, &sdk.CallToolParams{Name: ToolDrillsCancel, Arguments: map[string]any{"id": "run_1"}}, "run_ended")
			wantToolError(t, "drills.cancel of another run", op, &sdk.CallToolParams{Name: ToolDrillsCancel, Arguments: map[string]any{"id": "run_99"}}, "not_found")
			wantToolError(t, "drills.cancel without an id", op, &sdk.CallToolParams{Name: ToolDrillsCancel}, "id is required")
			res, err = op.CallTool(ctx, &sdk.CallToolParams{Name: ToolDetectionRun, Arguments: map[string]any{"detector": "lease-overlap"}})
			if err != nil || res.IsError || !strings.Contains(text(res), `"detector":"lease-overlap"`) || !strings.Contains(text(res), `"findings":[]`) {
				t.Fatalf("detection.run: %v %v %q", err, res.IsError, text(res))
			}
			wantToolError(t, "detection.run without a detector", op, &sdk.CallToolParams{Name: ToolDetectionRun}, "detector is required")
			// A workspace or agent key is not offered the operator tools
			// (and is refused if it calls one all the same); acquire takes
			// a mode.
			for _, k := range []struct{ name, key string }{{"workspace", p.wsKey}, {"agent", p.agentKey}} {
				cs := tr.connect(t, p.url, k.key)
				if names, want := toolNames(t, cs), []string{ToolAcquire, ToolRelease, ToolWait}; !slices.Equal(names, want) {
					t.Errorf("a %s key is offered %v, want %v", k.name, names, want)
				}
				wantToolError(t, "drills.run with a "+k.name+" key", cs, &sdk.CallToolParams{Name: ToolDrillsRun}, "needs an operator key")
				wantToolError(t, "drills.cancel with a "+k.name+" key", cs, &sdk.CallToolParams{Name: ToolDrillsCancel, Arguments: map[string]any{"id": "run_1"}}, "needs an operator key")
			}
			ws := tr.connect(t, p.url, p.wsKey)
			res, err = ws.CallTool(ctx, &sdk.CallToolParams{Name: ToolAcquire, Arguments: map[string]any{"resource": "doc:readme", "actorDid": didA, "mode": "read"}})
			if err != nil || res.IsError || !strings.Contains(text(res), `"mode":"read"`) {
				t.Fatalf("acquire with mode read: %v %v %q", err, res.IsError, text(res))
			}
			wantToolError(t, "acquire with mode bogus", ws, &sdk.CallToolParams{Name: ToolAcquire, Arguments: map[string]any{"resource": "doc:readme", "actorDid": didA, "mode": "bogus"}}, "mode")
		})
	}
}

// Benchmarks of one acquire (a renewal after the first, so every call
// changes state and waits for its SQLite commit) against the real server:
// straight over REST, and through MCP over HTTP and over a leaseplane mcp
// child process. The differences are what MCP costs.

func BenchmarkRealAcquireREST(b *testing.B) {
	p := startRealPlane(b)
	c := client.New(p.url, p.wsKey, nil)
	body := []byte(`{"resource":"` + resource + `","actorDid":"` + didA + `"}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		status, answer, err := c.Call(ctx, kernel.OpAcquire, body)
		if err != nil || status != 200 {
			b.Fatalf("acquire: %d %s %v", status, answer, err)
		}
	}
}

func benchmarkRealMCP(b *testing.B, connect func(t testing.TB, url, key string) *sdk.ClientSession) {
	p := startRealPlane(b)
	benchAcquire(b, connect(b, p.url, p.wsKey))
}

func BenchmarkRealAcquireMCPHTTP(b *testing.B)  { benchmarkRealMCP(b, connectRealHTTP) }
func BenchmarkRealAcquireMCPStdio(b *testing.B) { benchmarkRealMCP(b, connectSubprocess) }
