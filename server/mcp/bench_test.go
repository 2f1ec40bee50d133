package mcp

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchmarkCall measures one coordination.lease.acquire round trip (a
// renewal after the first) through a real Go SDK client, over the native
// kernel with no disk: the cost MCP adds on top of the plane.
func benchmarkCall(b *testing.B, connect connector) {
	p := newPlane(b)
	benchAcquire(b, connect(b, p, wsKey))
}

// benchAcquire times coordination.lease.acquire calls through cs (each a
// renewal after the first).
func benchAcquire(b *testing.B, cs *sdk.ClientSession) {
	args := map[string]any{"resource": resource, "actorDid": didA}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: ToolAcquire, Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("acquire: %v %v", err, res)
		}
	}
}

func BenchmarkAcquireHTTP(b *testing.B)  { benchmarkCall(b, connectHTTP) }
func BenchmarkAcquireStdio(b *testing.B) { benchmarkCall(b, connectStdio) }
