package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/client"
	"github.com/leaseplane/leaseplane/server/mcp"
)

// defaultPlaneURL is where leaseplane mcp looks for the plane when
// LEASEPLANE_URL is not set: the address of make run.
const defaultPlaneURL = "http://127.0.0.1:8080"

// MCPPath is where leaseplane serve answers MCP's streamable HTTP.
const MCPPath = "/mcp"

// mountMCP mounts the MCP tools at MCPPath on the server, over the same
// request path as REST (Server.Call): same keys, same rules.
func mountMCP(s *server.Server, o mountOptions) error {
	s.Handle(MCPPath, mcp.Handler(s, mcp.Options{ToolNames: o.mcpToolNames}))
	return nil
}

// clientBackend forwards MCP tool calls to a running plane over REST with
// the client's own key; the key the MCP layer passes is ignored.
type clientBackend struct{ c *client.Client }

func (b clientBackend) Call(ctx context.Context, _ string, op kernel.Op, body []byte) (int, []byte, error) {
	return b.c.Call(ctx, op, body)
}

func (b clientBackend) CallWaiting(ctx context.Context, _ string, body []byte, waitUpTo time.Duration) (int, []byte, error) {
	return b.c.CallWaiting(ctx, body, waitUpTo)
}

// Role asks the plane what the client's own key is (GET /api/v1/whoami),
// so that tools/list offers the operator tools to an operator key only.
func (b clientBackend) Role(ctx context.Context, _ string) (string, bool) {
	status, body, err := b.c.Request(ctx, http.MethodGet, server.RouteWhoami, nil)
	if err != nil || status != http.StatusOK {
		return "", false
	}
	var w struct {
		Role string `json:"role"`
	}
	if json.Unmarshal(body, &w) != nil || w.Role == "" {
		return "", false
	}
	return w.Role, true
}

// Operate forwards the operator tools to their REST routes.
func (b clientBackend) Operate(ctx context.Context, _ string, action string, body []byte) (int, []byte, error) {
	routes := map[string]string{mcp.ToolDrillsRun: server.RouteDrillsRun, mcp.ToolDrillsCancel: server.RouteDrillsCancel, mcp.ToolDetectionRun: server.RouteDetectionRun}
	path, ok := routes[action]
	if !ok {
		return 0, nil, fmt.Errorf("no operator action %q", action)
	}
	return b.c.Request(ctx, http.MethodPost, path, body)
}

// nopWriteCloser lets the process's stdout serve as the transport's writer
// without the transport closing it.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func runMCP(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("mcp", "usage: leaseplane mcp [--url URL]\n\n"+
		"Serves coordination.lease.acquire, coordination.lease.release and coordination.wait\n"+
		"to an MCP client on stdin/stdout, forwarding each call to the plane at $LEASEPLANE_URL\n"+
		"(default "+defaultPlaneURL+") with the key in $LEASEPLANE_KEY.\n", stderr)
	url := os.Getenv("LEASEPLANE_URL")
	if url == "" {
		url = defaultPlaneURL
	}
	fs.StringVar(&url, "url", url, "base URL of the running plane (default from $LEASEPLANE_URL)")
	toolNames := fs.String("mcp-tool-names", mcp.NamesDotted, "how tools/list spells the tools: dotted (coordination.lease.acquire) or underscore (coordination_lease_acquire, for Claude Desktop, Codex, Copilot); tools/call takes both")
	if code, ok := parseCount(fs, args, 0); !ok {
		return code
	}
	names, err := mcp.ParseToolNames(*toolNames)
	if err != nil {
		fmt.Fprintf(stderr, "leaseplane mcp: --mcp-tool-names: %v\n", err)
		return 2
	}
	if u, err := neturl.Parse(url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "leaseplane mcp: plane URL %q: want http://HOST:PORT or https://HOST (set LEASEPLANE_URL or --url)\n", url)
		return 2
	}
	key := os.Getenv("LEASEPLANE_KEY")
	if key == "" {
		fmt.Fprintln(stderr, "leaseplane mcp: warning: LEASEPLANE_KEY is not set; every tool call will be refused unauthorized")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := clientBackend{client.New(url, key, &http.Client{Timeout: requestTimeout})}
	opts := mcp.Options{
		ToolNames: names,
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AuthHint:  "set LEASEPLANE_KEY to a workspace or agent key of the plane at " + url,
	}
	if err := mcp.ServeStdio(ctx, b, key, io.NopCloser(stdin), nopWriteCloser{stdout}, opts); err != nil {
		fmt.Fprintf(stderr, "leaseplane mcp: %v\n", err)
		return 1
	}
	return 0
}
