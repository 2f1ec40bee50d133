package main

import (
	_ "embed"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
)

// MCP over streamable HTTP at /mcp: stateless (no Mcp-Session-Id), one
// JSON-RPC message per POST, answered with JSON, as the server's /mcp
// (server/mcp) answers. The front cannot link the MCP SDK (it would not
// fit the Workers bundle, and no host imports another host's package), so
// this is the protocol's small part a stateless tool server needs:
// initialize, ping, tools/list, tools/call and notifications. What the
// server's SDK says about itself and its tools (capabilities,
// instructions, the tools/list result) is mcp.json, the server's own
// answers, kept here as they are; cmd/worker/test/mcp.test.mjs compares
// them with a running server's and rewrites the file with
// LEASEPLANE_WRITE_MCP=1.
//
//go:embed mcp.json
var mcpServer []byte

// mcpParts are mcp.json's members, raw.
var mcpParts = func() map[string][]byte {
	m := map[string][]byte{}
	if err := kernel.ScanObject(mcpServer, func(name string, raw []byte) error {
		m[name] = raw
		return nil
	}); err != nil {
		panic("mcp.json: " + err.Error())
	}
	return m
}()

// mcpVersions are the protocol versions the server's SDK speaks; a client
// asking another is answered with mcpLatest.
var mcpVersions = []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

const mcpLatest = "2025-11-25"

// rpcMessage is one JSON-RPC message, its members raw (id nil for a
// notification).
type rpcMessage struct {
	id, params []byte
	method     string
}

func parseRPC(b []byte) (rpcMessage, error) {
	var m rpcMessage
	var version string
	err := kernel.ScanObject(b, func(name string, raw []byte) error {
		var err error
		switch name {
		case "jsonrpc":
			version, err = kernel.Unquote(raw)
		case "id":
			m.id = raw
		case "method":
			m.method, err = kernel.Unquote(raw)
		case "params":
			m.params = raw
		}
		return err
	})
	if err != nil {
		return m, errors.New("the body is not one JSON-RPC message: " + err.Error())
	}
	if version != "2.0" {
		return m, errors.New(`the body is not a JSON-RPC 2.0 message (jsonrpc must be "2.0")`)
	}
	if m.method == "" {
		return m, errors.New("the message has no method: this server takes requests and notifications only")
	}
	return m, nil
}

func rpcResult(id, result []byte) []byte {
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	b = append(b, `,"result":`...)
	return append(append(b, result...), '}')
}

func rpcError(id []byte, code int, msg string) []byte {
	b := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":`...)
	return append(kernel.AppendQuote(b, msg), "}}"...)
}

// mcpInitialize is initialize's result for the version the client asked.
func mcpInitialize(params []byte) []byte {
	asked := ""
	kernel.ScanObject(params, func(name string, raw []byte) error {
		if name == "protocolVersion" {
			asked, _ = kernel.Unquote(raw)
		}
		return nil
	})
	version := mcpLatest
	for _, v := range mcpVersions {
		if v == asked {
			version = v
		}
	}
	b := append([]byte(`{"capabilities":`), mcpParts["capabilities"]...)
	b = append(b, `,"instructions":`...)
	b = append(b, mcpParts["instructions"]...)
	b = append(b, `,"protocolVersion":`...)
	b = kernel.AppendQuote(b, version)
	b = append(b, `,"serverInfo":`...)
	info := mcpParts["serverInfo"]
	b = append(b, info[:len(info)-1]...)
	b = append(b, `,"version":`...)
	return append(kernel.AppendQuote(b, kernel.Version), "}}"...)
}

// mcpTool is one tool: its op (or, for an operator tool, the REST route
// that answers it) and arguments, in the server's order.
type mcpTool struct {
	name string
	op   kernel.Op
	path string // an operator tool's route (POST): its answer is the tool's
	args []mcpArg
}

type mcpArg struct {
	name     string
	kind     string // "string", "number" or "wait" (an integer 0..30000)
	required bool
	forward  bool // copied into the REST body
}

var mcpTools = []mcpTool{
	{name: "coordination.lease.acquire", op: kernel.OpAcquire, args: []mcpArg{
		{"resource", "string", true, true}, {"actorDid", "string", true, true}, {"mode", "string", false, true},
		{"waitUpToMs", "wait", false, false}, {"ttlMs", "number", false, false}}},
	{name: "coordination.lease.release", op: kernel.OpRelease, args: []mcpArg{
		{"resource", "string", true, true}, {"actorDid", "string", true, true}}},
	{name: "coordination.wait", op: kernel.OpWait},
	// The operator tools, listed to operator keys (mcpToolList); any
	// other key's call is refused by the route, as on the server.
	{name: "drills.run", path: api.PathDrillsRun},
	{name: "drills.cancel", path: api.PathDrillsCancel, args: []mcpArg{{"id", "string", true, true}}},
	{name: "detection.run", path: api.PathDetectionRun, args: []mcpArg{{"detector", "string", true, true}}},
}

// mcpToolList is tools/list's result for a key of role: the server's
// answer to that role (mcp.json: "operatorTools" for an operator key,
// "tools" for any other).
func mcpToolList(role string) []byte {
	if role == string(api.RoleOperator) {
		return mcpParts["operatorTools"]
	}
	return mcpParts["tools"]
}

// findTool finds a tool by either spelling (coordination.wait,
// coordination_wait).
func findTool(name string) (mcpTool, bool) {
	for _, t := range mcpTools {
		if name == t.name || name == strings.ReplaceAll(t.name, ".", "_") {
			return t, true
		}
	}
	return mcpTool{}, false
}

// toolCall reads tools/call's params: the tool, the REST body its
// arguments make (nil for none) and waitUpToMs (0 for none). A message
// for the client when the arguments are wrong (a tool error), or when the
// params are (rpcErr).
func toolCall(params []byte) (t mcpTool, body []byte, wait int, argErr string, rpcErr string) {
	var name string
	var args []byte
	if err := kernel.ScanObject(params, func(k string, raw []byte) error {
		var err error
		switch k {
		case "name":
			name, err = kernel.Unquote(raw)
		case "arguments":
			args = raw
		}
		return err
	}); err != nil {
		return t, nil, 0, "", "invalid params: " + err.Error()
	}
	t, ok := findTool(name)
	if !ok {
		return t, nil, 0, "", "unknown tool " + strconv.Quote(name)
	}
	body, wait, err := t.body(args)
	if err != nil {
		return t, nil, 0, "invalid arguments to " + t.name + ": " + err.Error(), ""
	}
	return t, body, wait, "", ""
}

// body checks a call's arguments and builds the REST body, as the
// server's tools do: the forwarded strings exactly as the client wrote
// them, in the tool's order; the kernel judges every byte.
func (t mcpTool) body(raw []byte) ([]byte, int, error) {
	got := map[string][]byte{}
	if s := strings.TrimSpace(string(raw)); s != "" && s != "null" {
		if s[0] != '{' {
			return nil, 0, errors.New("arguments must be a JSON object")
		}
		if err := kernel.ScanObject(raw, func(k string, v []byte) error {
			got[k] = v
			return nil
		}); err != nil {
			return nil, 0, errors.New("arguments are not valid JSON: " + err.Error())
		}
	}
	var names []string
	for _, a := range t.args {
		names = append(names, a.name)
	}
	var unknown []string
	for k := range got {
		if !slices.Contains(names, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		first := unknown[0]
		for _, u := range unknown {
			first = min(first, u)
		}
		takes := "takes no arguments"
		if len(names) > 0 {
			takes = "takes only " + strings.Join(names, ", ")
		}
		return nil, 0, errors.New("unknown argument " + strconv.Quote(first) + ": " + t.name + " " + takes)
	}
	var b []byte
	wait := 0
	for _, a := range t.args {
		v, present := got[a.name]
		if present && string(v) == "null" {
			present = false
		}
		if !present {
			if a.required {
				return nil, 0, errors.New(a.name + " is required")
			}
			continue
		}
		switch a.kind {
		case "string":
			if len(v) < 2 || v[0] != '"' {
				return nil, 0, errors.New(a.name + " must be a string")
			}
			if len(b) == 0 {
				b = append(b, '{')
			} else {
				b = append(b, ',')
			}
			b = append(kernel.AppendQuote(b, a.name), ':')
			b = append(b, v...)
		case "number":
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				return nil, 0, errors.New(a.name + " must be a number")
			}
		case "wait":
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil || f != math.Trunc(f) || f < 0 || f > api.MaxWaitUpToMs {
				return nil, 0, errors.New(a.name + " must be a whole number of milliseconds from 0 to " + strconv.Itoa(api.MaxWaitUpToMs))
			}
			wait = int(f)
		}
	}
	if len(b) == 0 {
		return nil, wait, nil
	}
	return append(b, '}'), wait, nil
}

// toolResult is a tool's result for the REST status and answer, shaped
// as the server's: the answer as structuredContent with a text copy; a
// refusal the agent acts on (lease_held, deadlock, stale_lease, suspended)
// is a normal result, any other status an isError result led by a message.
func toolResult(status int, answer []byte) []byte {
	reason, msg, err := kernel.StringMembers(answer, "reason", "error")
	if err != nil {
		return toolError("the lease plane answered HTTP " + strconv.Itoa(status) + " with a body that is not JSON")
	}
	text := kernel.AppendQuote([]byte(`{"type":"text","text":`), string(answer))
	text = append(text, '}')
	b := []byte(`{"content":[`)
	refusal := reason == kernel.ReasonLeaseHeld || reason == kernel.ReasonDeadlock || reason == kernel.ReasonStaleLease || reason == kernel.ReasonSuspended
	if status != 200 && !refusal {
		lead := reason
		if lead == "" {
			lead = "HTTP " + strconv.Itoa(status)
		}
		if msg != "" {
			lead += ": " + msg
		}
		b = append(kernel.AppendQuote(append(b, `{"type":"text","text":`...), lead), "},"...)
	}
	b = append(append(b, text...), `],"structuredContent":`...)
	b = append(b, answer...)
	if status != 200 && !refusal {
		b = append(b, `,"isError":true`...)
	}
	return append(b, '}')
}

// toolError is an isError result with only a message.
func toolError(msg string) []byte {
	b := kernel.AppendQuote([]byte(`{"content":[{"type":"text","text":`), msg)
	return append(b, `}],"isError":true}`...)
}
