package mcp

import (
	"context"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves the tools to one MCP client over newline-delimited
// JSON-RPC on r and w (a process's stdin and stdout) until the client
// closes r or ctx ends. Every tool call goes to b with key.
func ServeStdio(ctx context.Context, b Backend, key string, r io.ReadCloser, w io.WriteCloser, o Options) error {
	s := newServer(b, func(*sdk.CallToolRequest) string { return key }, o)
	err := s.Run(ctx, &sdk.IOTransport{Reader: r, Writer: w})
	if err == io.EOF || ctx.Err() != nil {
		return nil
	}
	return err
}
