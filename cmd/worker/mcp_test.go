package main

import (
	"strings"
	"testing"
)

// TestMCPToolCalls: a tool call's arguments become the REST body the
// server's tools build (the strings as written, in the tool's order), or
// the server's message naming what is wrong.
func TestMCPToolCalls(t *testing.T) {
	for _, c := range []struct{ params, body, argErr, rpcErr string }{
		{params: `{"name":"coordination.lease.acquire","arguments":{"actorDid":"did:x:\u0061","resource":"r","mode":"read","ttlMs":5}}`,
			body: `{"resource":"r","actorDid":"did:x:\u0061","mode":"read"}`},
		{params: `{"name":"coordination_wait"}`},
		{params: `{"name":"coordination.lease.acquire","arguments":{"resource":"r"}}`, argErr: "invalid arguments to coordination.lease.acquire: actorDid is required"},
		{params: `{"name":"coordination.lease.release","arguments":{"resource":1,"actorDid":"d"}}`, argErr: "resource must be a string"},
		{params: `{"name":"coordination.lease.acquire","arguments":{"resource":"r","actorDid":"d","waitUpToMs":1.5}}`, argErr: "waitUpToMs must be a whole number of milliseconds from 0 to 30000"},
		{params: `{"name":"coordination.wait","arguments":{"b":1,"a":2}}`, argErr: `unknown argument "a": coordination.wait takes no arguments`},
		{params: `{"name":"drills.run"}`},
		{params: `{"name":"drills_cancel","arguments":{"id":"run_1"}}`, body: `{"id":"run_1"}`},
		{params: `{"name":"detection.run","arguments":{}}`, argErr: "detector is required"},
		{params: `{"name":"drills.runs"}`, rpcErr: `unknown tool "drills.runs"`},
	} {
		_, body, _, argErr, rpcErr := toolCall([]byte(c.params))
		if string(body) != c.body || !strings.Contains(argErr, c.argErr) || (c.argErr == "") != (argErr == "") || !strings.Contains(rpcErr, c.rpcErr) || (c.rpcErr == "") != (rpcErr == "") {
			t.Errorf("%s: body %s, argErr %q, rpcErr %q; want %s, %q, %q", c.params, body, argErr, rpcErr, c.body, c.argErr, c.rpcErr)
		}
	}
	if _, _, wait, _, _ := toolCall([]byte(`{"name":"coordination.lease.acquire","arguments":{"resource":"r","actorDid":"d","waitUpToMs":30000}}`)); wait != 30000 {
		t.Errorf("waitUpToMs 30000 read as %d", wait)
	}
}

// TestMCPResults: a grant and a refusal the agent acts on are normal
// results; any other status an isError result led by its reason.
func TestMCPResults(t *testing.T) {
	held := `{"ok":false,"reason":"lease_held","error":"x"}`
	if got := string(toolResult(409, []byte(held))); strings.Contains(got, "isError") || !strings.Contains(got, `"structuredContent":`+held) {
		t.Errorf("lease_held: %s", got)
	}
	bad := `{"ok":false,"reason":"invalid_request","error":"resource is required"}`
	want := `{"content":[{"type":"text","text":"invalid_request: resource is required"},{"type":"text","text":` +
		`"{\"ok\":false,\"reason\":\"invalid_request\",\"error\":\"resource is required\"}"}],"structuredContent":` + bad + `,"isError":true}`
	if got := string(toolResult(400, []byte(bad))); got != want {
		t.Errorf("invalid_request:\n got %s\nwant %s", got, want)
	}
	if got := string(mcpInitialize([]byte(`{"protocolVersion":"1999-01-01"}`))); !strings.Contains(got, `"protocolVersion":"2025-11-25"`) || !strings.Contains(got, `"serverInfo":{"name":"leaseplane","title":"leaseplane lease plane","version":`) {
		t.Errorf("initialize: %s", got)
	}
}
