package mcp

import (
	"context"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves the tools to one MCP client over newline-delimited
// JSON-RPC on r and w (a process's stdin and stdout) until the client
// closes r or ctx ends. Every tool call goes to b with key. A client that
// closes r right after writing its requests still gets every answer. A
// line that is not one JSON-RPC message is answered with a JSON-RPC error
// (-32700 parse error, -32600 invalid request) and the session goes on.
func ServeStdio(ctx context.Context, b Backend, key string, r io.ReadCloser, w io.WriteCloser, o Options) error {
	s := newServer(b, func(*sdk.CallToolRequest) string { return key }, o)
	d := newDrain(r, w)
	// A line the SDK could not read would end the session: the filter
	// answers it with a JSON-RPC error instead and passes on the rest.
	d.r = readCloser{newLineFilter(r, d.writeLine), r}
	err := s.Run(ctx, &sdk.IOTransport{Reader: d.reader(), Writer: d.writer()})
	if err == io.EOF || ctx.Err() != nil {
		return nil
	}
	return err
}
