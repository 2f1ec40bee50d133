// Package mcp exposes the lease plane as Model Context Protocol tools:
// coordination.lease.acquire, coordination.lease.release and
// coordination.wait, over streamable HTTP (Handler, mounted at /mcp by
// leaseplane serve) and over stdio (ServeStdio, run by leaseplane mcp).
//
// The tools are a thin skin over the REST path: every call goes through a
// Backend, which is the server's own request path after HTTP parsing
// (bearer key, the rule that an agent key names only itself, the kernel) or
// a client of a running plane. A tool result carries the REST answer
// byte for byte in structuredContent, with a text copy. A refusal
// (lease_held, deadlock, stale_lease, suspended) is a normal result; bad
// arguments, a missing or wrong key, an agent key naming another agent and
// an unavailable plane are isError results with a message that says what
// failed.
//
// This package is the only home of github.com/modelcontextprotocol/go-sdk
// (rule 2 of docs/ARCHITECTURE.md): nothing in its API exposes SDK types.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
)

// Backend runs one lease command on behalf of a bearer key: exactly what
// the REST route does after parsing the HTTP request. status is the HTTP
// status the REST route would answer and answer its JSON body; err is a
// failure to reach a decision at all (a plane that cannot be reached).
// *server.Server satisfies it; the stdio adapter over server/client ignores
// key and sends its own.
type Backend interface {
	Call(ctx context.Context, key string, op kernel.Op, body []byte) (status int, answer []byte, err error)
}

// WaitingBackend is a Backend that can also hold an acquire up to
// waitUpTo (POST lease?waitUpToMs=N), answering when the resource is the
// caller's or the time is up. The acquire tool's waitUpToMs argument needs
// it; *server.Server and the stdio adapter implement it.
type WaitingBackend interface {
	Backend
	CallWaiting(ctx context.Context, key string, body []byte, waitUpTo time.Duration) (status int, answer []byte, err error)
}

// maxWaitUpToMs is the longest the plane holds an acquire.
const maxWaitUpToMs = api.MaxWaitUpToMs

// Operator is what a Backend may add: the operator's actions, run on
// behalf of key exactly as their REST routes answer them (drills.run is
// POST /api/v1/drills/run, drills.cancel POST /api/v1/drills/cancel,
// detection.run POST /api/v1/detection/run; each needs an operator key).
// When the Backend has it, the MCP server offers those tools.
type Operator interface {
	Operate(ctx context.Context, key, action string, body []byte) (status int, answer []byte, err error)
}

// Roler is what a Backend may add so that tools/list offers each key the
// tools it may call: Role is key's role ("operator", "workspace" or
// "agent"); ok is false when the key is not known. Without a Roler every
// tool is listed and a call the key may not make is refused.
type Roler interface {
	Role(ctx context.Context, key string) (role string, ok bool)
}

// Options configure the MCP server. The zero value is usable.
type Options struct {
	// Version is reported as the server's version in the MCP handshake;
	// empty means kernel.Version.
	Version string
	// Logger receives the SDK's logs; nil discards them.
	Logger *slog.Logger
	// AuthHint is appended to the message of an unauthorized result, to tell
	// the agent's operator where the key comes from (the stdio server says
	// "set LEASEPLANE_KEY").
	AuthHint string
	// ToolNames is how tools/list spells the tool names: NamesDotted (the
	// default, coordination.lease.acquire) or NamesUnderscore
	// (coordination_lease_acquire), for clients that accept only
	// ^[a-zA-Z0-9_-]{1,64}$ (Claude Desktop, Codex, Copilot CLI).
	// tools/call accepts both spellings whichever is listed.
	ToolNames string
}

// Tool names, as clients call them.
const (
	ToolAcquire = "coordination.lease.acquire"
	ToolRelease = "coordination.lease.release"
	ToolWait    = "coordination.wait"
	// Operator tools (an Operator backend and an operator key).
	ToolDrillsRun    = "drills.run"
	ToolDrillsCancel = "drills.cancel"
	ToolDetectionRun = "detection.run"
)

// The spellings of Options.ToolNames.
const (
	NamesDotted     = "dotted"
	NamesUnderscore = "underscore"
)

// ParseToolNames checks a --mcp-tool-names value: "" is dotted.
func ParseToolNames(v string) (string, error) {
	switch v {
	case "", NamesDotted:
		return NamesDotted, nil
	case NamesUnderscore:
		return NamesUnderscore, nil
	}
	return "", fmt.Errorf("tool names must be %s or %s, not %q", NamesDotted, NamesUnderscore, v)
}

// Underscored is a tool name with its dots as underscores
// (coordination_lease_acquire).
func Underscored(name string) string { return strings.ReplaceAll(name, ".", "_") }

// refusals are the reasons that are decisions of the plane, returned as
// normal tool results: the agent is expected to act on them.
var refusals = map[string]bool{
	kernel.ReasonLeaseHeld:  true,
	kernel.ReasonDeadlock:   true,
	kernel.ReasonStaleLease: true,
	kernel.ReasonSuspended:  true,
}

const acquireDescription = `Ask the lease plane for a lease on a shared resource before you act on it.

A lease is a short, exclusive claim: while you hold the lease on a resource (a deploy slot, a file, a cloud account, any name your team agrees on, such as "lock:deploy/production"), no other agent is granted it. Every lease lapses 30000 ms after it was granted or last renewed, so an agent that crashes never blocks the others for long.

Arguments: resource (the name, 1-256 bytes), actorDid (your own DID, starting with "did:"; a key issued to an agent may only name that agent), mode (optional: read, write or delete; a new lease asks write by default, a renewal keeps its mode; on a read-shared resource read leases of different agents coexist), waitUpToMs (optional, at most 30000: when the resource is held, the plane keeps your call open and answers as soon as the lease is yours, or lease_held when the time is up), ttlMs (optional, accepted for compatibility and dropped: every lease runs 30000 ms).

Read "ok" in the result:
- ok true: you hold the lease; "lease" has its id, fence (a counter you can pass downstream as a fencing token) and expiresAtMs. Do your work, then call coordination.lease.release. Calling acquire again while you hold it renews it for another 30000 ms.
- reason "lease_held": another agent ("holder") has it and you are now queued. Call acquire again with waitUpToMs (say 30000) to wait for it, or wait stampede.waitMs milliseconds before asking again; do not retry sooner, and do not act on the resource meanwhile.
- reason "deadlock": granting would close a wait cycle: "holder" has what you ask for and is itself waiting (on "waitingOn") for something you hold; "cycle" lists the agents and resources around the loop. Waiting will never succeed: release the leases you hold, then start over.
- reason "suspended": an operator has stopped you; stop and report to a person.`

const releaseDescription = `Give back your lease on a resource as soon as you are done with it, so the next agent in the queue gets it without waiting for the lease to lapse.

Arguments: resource and actorDid (your own DID, the one you acquired with). Releasing also takes you out of the resource's queue. Releasing a lease you do not hold is not an error: the result says released false and releasedIds is empty. A prompt release raises your trust score; a lease left to lapse lowers it.`

const waitDescription = `Read the lease plane's queues: for every resource that is held or waited on, its holders (with lease ids and expiry times) and its waiters in queue order (admitted, sinceMs, lapsesAtMs), plus the deadlock refusals of the last 30000 ms. Takes no arguments and changes nothing.

Use it to see who holds what before asking, or to find the agents you are waiting on. Waiters not admitted (beyond the first 8) should back off longer.`

const drillsDescription = `Start a run of the lease plane's six drills (two agents and one slot, a holder that crashes, a deadlock, a herd of fifty, a stale leaseId, an operator suspending an agent), each against the live plane in a workspace of its own, compared with the kernel's own replay. Takes no arguments; needs an operator key. The result has the run's "id"; the run goes on in the background (the crashed holder takes 30 s): GET /api/v1/drills/runs lists runs and their drills, a failed drill with the first answer that differed.`

const drillsCancelDescription = `Cancel a run of the drills that is queued or running in your workspace: a queued run never starts, a running one stops, and the run is kept as cancelled with no verdict. Argument: id, the run's id ("run_N") as drills.run answered it. Needs an operator key. Refused with not_found for a run this workspace does not have, and run_ended for one that has already finished or was cancelled. Each workspace may have at most 4 runs queued or running; cancelling one frees its place.`

const detectionDescription = `Run a detector over this workspace's signed ledger. Argument: detector (the name; "lease-overlap" finds pairs of leases on one resource whose lives overlapped with conflicting modes, and fences that did not rise). Needs an operator key. The result has the checkpoint the run read up to and the findings, each citing both ledger entries with inclusion proofs and the case it was filed as (a case is filed once however often runs repeat).`

const instructions = `leaseplane coordinates agents that share resources. Before acting on a shared resource, call coordination.lease.acquire; act only when the result has ok true; call coordination.lease.release when done. On lease_held ask again with waitUpToMs (up to 30000) to be answered when the lease is yours; on deadlock release what you hold.`

// Output schemas: loose objects that every REST answer of the tool fits,
// grants and refusals alike.
var (
	refusalProps = map[string]any{
		"ok":     map[string]any{"type": "boolean", "description": "true when the plane granted or answered; false on a refusal or error"},
		"reason": map[string]any{"type": "string", "description": "why ok is false: lease_held, deadlock, stale_lease, suspended, invalid_request, unauthorized, actor_mismatch, unavailable"},
		"error":  map[string]any{"type": "string", "description": "a message for a human"},
	}
	leaseSchema = map[string]any{
		"type": "object",
		"properties": map[string]any{
			"id":          map[string]any{"type": "string"},
			"resource":    map[string]any{"type": "string"},
			"holder":      map[string]any{"type": "string"},
			"mode":        map[string]any{"type": "string"},
			"fence":       map[string]any{"type": "integer"},
			"grantedAtMs": map[string]any{"type": "integer"},
			"expiresAtMs": map[string]any{"type": "integer"},
		},
	}
	stringArray = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
)

func objectSchema(props map[string]any) map[string]any {
	all := map[string]any{}
	for k, v := range refusalProps {
		all[k] = v
	}
	for k, v := range props {
		all[k] = v
	}
	return map[string]any{"type": "object", "properties": all, "required": []string{"ok"}}
}

var (
	acquireOutput = objectSchema(map[string]any{
		"lease":     leaseSchema,
		"holder":    map[string]any{"type": "string", "description": "lease_held: the earliest-granted live holder; deadlock: the holder on the cycle"},
		"holders":   stringArray,
		"waitingOn": map[string]any{"type": "string"},
		"cycle":     stringArray,
		"stampede": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"admitted": stringArray,
				"waitMs":   map[string]any{"type": "integer", "description": "milliseconds to wait before asking again"},
			},
		},
	})
	releaseOutput = objectSchema(map[string]any{
		"released":    map[string]any{"type": "boolean"},
		"releasedIds": stringArray,
	})
	waitOutput = objectSchema(map[string]any{
		"nowMs":     map[string]any{"type": "integer"},
		"queues":    map[string]any{"type": "array", "items": map[string]any{"type": "object"}},
		"deadlocks": map[string]any{"type": "array", "items": map[string]any{"type": "object"}},
	})
	drillsOutput = objectSchema(map[string]any{
		"id": map[string]any{"type": "string", "description": "the run's id, as GET /api/v1/drills/runs lists it"},
	})
	drillsCancelOutput = objectSchema(map[string]any{
		"run": map[string]any{"type": "object", "description": "the cancelled run, as GET /api/v1/drills/runs lists it"},
	})
	detectionOutput = objectSchema(map[string]any{
		"detector":   map[string]any{"type": "string"},
		"checkpoint": map[string]any{"type": "string", "description": "the signed checkpoint the run read the ledger up to"},
		"treeSize":   map[string]any{"type": "integer"},
		"findings":   map[string]any{"type": "array", "items": map[string]any{"type": "object"}},
	})
)

var (
	resourceArg = map[string]any{"type": "string", "description": "the resource's name, 1-256 bytes of UTF-8, e.g. lock:deploy/production"}
	actorArg    = map[string]any{"type": "string", "description": "your own DID, e.g. did:web:acme.example:agent:release"}
	ttlArg      = map[string]any{"type": "number", "description": "accepted and dropped: every lease runs 30000 ms"}
	modeArg     = map[string]any{"type": "string", "enum": []string{"read", "write", "delete"}, "description": "what you will do: read, write or delete. Omitted: a new lease asks write, a renewal keeps the mode you hold. On a read-shared resource, read leases of different agents coexist"}
	waitArg     = map[string]any{"type": "integer", "minimum": 0, "maximum": maxWaitUpToMs, "description": "wait up to this many milliseconds (at most 30000) for the lease: the plane answers as soon as it is yours, or lease_held when the time is up"}
)

func inputSchema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// tool is one tool's definition and how its arguments become a REST body.
type tool struct {
	def  *sdk.Tool
	op   kernel.Op
	args []arg
	// action, for an operator tool, is what Operator.Operate runs.
	action string
}

// arg is one argument a tool takes.
type arg struct {
	name     string
	kind     string // "string", "number" or "wait" (waitUpToMs: an integer 0..30000)
	required bool
	forward  bool // copied into the REST body
}

func boolp(b bool) *bool { return &b }

// toolDef is a tool's definition; no tool reaches outside the plane
// (OpenWorldHint false).
func toolDef(name, title, description string, input, output any, ann sdk.ToolAnnotations) *sdk.Tool {
	ann.OpenWorldHint = boolp(false)
	return &sdk.Tool{Name: name, Title: title, Description: description, InputSchema: input, OutputSchema: output, Annotations: &ann}
}

func tools() []tool {
	return []tool{
		{
			def: toolDef(ToolAcquire, "Acquire a lease", acquireDescription,
				inputSchema(map[string]any{"resource": resourceArg, "actorDid": actorArg, "mode": modeArg, "waitUpToMs": waitArg, "ttlMs": ttlArg}, "resource", "actorDid"),
				acquireOutput, sdk.ToolAnnotations{Title: "Acquire a lease", DestructiveHint: boolp(false), IdempotentHint: true}),
			op: kernel.OpAcquire,
			args: []arg{
				{name: "resource", kind: "string", required: true, forward: true},
				{name: "actorDid", kind: "string", required: true, forward: true},
				{name: "mode", kind: "string", forward: true},
				{name: "waitUpToMs", kind: "wait"},
				{name: "ttlMs", kind: "number"},
			},
		},
		{
			def: toolDef(ToolRelease, "Release a lease", releaseDescription,
				inputSchema(map[string]any{"resource": resourceArg, "actorDid": actorArg}, "resource", "actorDid"),
				releaseOutput, sdk.ToolAnnotations{Title: "Release a lease", DestructiveHint: boolp(false), IdempotentHint: true}),
			op: kernel.OpRelease,
			args: []arg{
				{name: "resource", kind: "string", required: true, forward: true},
				{name: "actorDid", kind: "string", required: true, forward: true},
			},
		},
		{
			def: toolDef(ToolWait, "Read the queues", waitDescription,
				inputSchema(map[string]any{}),
				waitOutput, sdk.ToolAnnotations{Title: "Read the queues", ReadOnlyHint: true, IdempotentHint: true}),
			op: kernel.OpWait,
		},
	}
}

// operatorTools are the tools of an Operator backend.
func operatorTools() []tool {
	return []tool{
		{
			def: toolDef(ToolDrillsRun, "Run the drills", drillsDescription,
				inputSchema(map[string]any{}),
				drillsOutput, sdk.ToolAnnotations{Title: "Run the drills", DestructiveHint: boolp(false)}),
			action: ToolDrillsRun,
		},
		{
			def: toolDef(ToolDrillsCancel, "Cancel a drill run", drillsCancelDescription,
				inputSchema(map[string]any{"id": map[string]any{"type": "string", "description": "the run's id, run_N, as drills.run answered it"}}, "id"),
				drillsCancelOutput, sdk.ToolAnnotations{Title: "Cancel a drill run", DestructiveHint: boolp(true), IdempotentHint: true}),
			action: ToolDrillsCancel,
			args:   []arg{{name: "id", kind: "string", required: true, forward: true}},
		},
		{
			def: toolDef(ToolDetectionRun, "Run a detector over the ledger", detectionDescription,
				inputSchema(map[string]any{"detector": map[string]any{"type": "string", "description": "the detector's name, such as lease-overlap"}}, "detector"),
				detectionOutput, sdk.ToolAnnotations{Title: "Run a detector", DestructiveHint: boolp(false)}),
			action: ToolDetectionRun,
			args:   []arg{{name: "detector", kind: "string", required: true, forward: true}},
		},
	}
}

// body checks a tool call's arguments and builds the REST body: a JSON
// object of the forwarded string arguments in the order the tool lists
// them, or nil for a tool that forwards none. The error names the argument.
//
// A forwarded string goes into the body exactly as the client wrote it,
// escapes and all, never decoded and encoded again: decoding would turn
// invalid UTF-8 and lone surrogates into U+FFFD, so that the kernel would
// accept names that the REST route refuses (and two different names would
// become one). The kernel's own decoding then judges every byte.
func (t tool) body(raw json.RawMessage) ([]byte, time.Duration, error) {
	var got map[string]json.RawMessage
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if trimmed[0] != '{' {
			return nil, 0, fmt.Errorf("arguments must be a JSON object")
		}
		if err := json.Unmarshal(trimmed, &got); err != nil {
			return nil, 0, fmt.Errorf("arguments are not valid JSON: %v", err)
		}
	}
	known := map[string]arg{}
	var names []string
	for _, a := range t.args {
		known[a.name] = a
		names = append(names, a.name)
	}
	var unknown []string
	for k := range got {
		if _, ok := known[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		takes := "takes no arguments"
		if len(names) > 0 {
			takes = "takes only " + strings.Join(names, ", ")
		}
		return nil, 0, fmt.Errorf("unknown argument %q: %s %s", unknown[0], t.def.Name, takes)
	}
	var b bytes.Buffer
	var wait time.Duration
	for _, a := range t.args {
		v, present := got[a.name]
		v = bytes.TrimSpace(v)
		if present && bytes.Equal(v, []byte("null")) {
			present = false
		}
		if !present {
			if a.required {
				return nil, 0, fmt.Errorf("%s is required", a.name)
			}
			continue
		}
		switch a.kind {
		case "string":
			if len(v) < 2 || v[0] != '"' {
				return nil, 0, fmt.Errorf("%s must be a string", a.name)
			}
			if a.forward {
				if b.Len() == 0 {
					b.WriteByte('{')
				} else {
					b.WriteByte(',')
				}
				k, _ := json.Marshal(a.name)
				b.Write(k)
				b.WriteByte(':')
				b.Write(v)
			}
		case "number":
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return nil, 0, fmt.Errorf("%s must be a number", a.name)
			}
		case "wait":
			var f float64
			if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || f < 0 || f > maxWaitUpToMs {
				return nil, 0, fmt.Errorf("%s must be a whole number of milliseconds from 0 to %d", a.name, maxWaitUpToMs)
			}
			wait = time.Duration(f) * time.Millisecond
		}
	}
	if b.Len() == 0 {
		return nil, wait, nil
	}
	b.WriteByte('}')
	return b.Bytes(), wait, nil
}

// answerFields are the parts of a REST answer that decide how a tool
// result is shaped.
type answerFields struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
}

// result turns a REST status and answer into a tool result.
func result(status int, answer []byte, authHint string) *sdk.CallToolResult {
	var f answerFields
	if err := json.Unmarshal(answer, &f); err != nil {
		return errorResult(fmt.Sprintf("the lease plane answered HTTP %d with a body that is not JSON: %.200q", status, answer))
	}
	res := &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: string(answer)}},
		StructuredContent: json.RawMessage(answer),
	}
	if status == http.StatusOK || refusals[f.Reason] {
		return res
	}
	res.IsError = true
	msg := f.Reason
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", status)
	}
	if f.Error != "" {
		msg += ": " + f.Error
	}
	if f.Reason == api.ReasonUnauthorized && authHint != "" {
		msg += " (" + authHint + ")"
	}
	res.Content = []sdk.Content{&sdk.TextContent{Text: msg}, &sdk.TextContent{Text: string(answer)}}
	return res
}

// errorResult is an isError result with only a message.
func errorResult(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
}

// newServer builds the MCP server with the three tools; keyOf gives the
// bearer key of one call.
func newServer(b Backend, keyOf func(*sdk.CallToolRequest) string, o Options) *sdk.Server {
	version := o.Version
	if version == "" {
		version = kernel.Version
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "leaseplane", Title: "leaseplane lease plane", Version: version},
		&sdk.ServerOptions{Instructions: instructions, Logger: logger})
	underscore := o.ToolNames == NamesUnderscore
	listed := map[string]string{} // either spelling -> the listed one
	all := tools()
	op, isOperator := b.(Operator)
	if isOperator {
		all = append(all, operatorTools()...)
	}
	for _, t := range all {
		dotted := t.def.Name
		if underscore {
			t.def.Name = Underscored(dotted)
		}
		listed[dotted], listed[Underscored(dotted)] = t.def.Name, t.def.Name
		s.AddTool(t.def, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			body, wait, err := t.body(req.Params.Arguments)
			if err != nil {
				return errorResult("invalid arguments to " + t.def.Name + ": " + err.Error()), nil
			}
			var status int
			var answer []byte
			if t.action != "" {
				if body == nil {
					body = []byte("{}")
				}
				status, answer, err = op.Operate(ctx, keyOf(req), t.action, body)
			} else if wait > 0 {
				wb, ok := b.(WaitingBackend)
				if !ok {
					return errorResult(t.def.Name + ": this plane cannot hold a request: call again without waitUpToMs"), nil
				}
				status, answer, err = wb.CallWaiting(ctx, keyOf(req), body, wait)
			} else {
				status, answer, err = b.Call(ctx, keyOf(req), t.op, body)
			}
			if err != nil {
				return errorResult(fmt.Sprintf("%s: the lease plane gave no decision: %v", t.def.Name, err)), nil
			}
			return result(status, answer, o.AuthHint), nil
		})
	}
	operatorOnly := map[string]bool{}
	for _, t := range operatorTools() {
		operatorOnly[t.def.Name], operatorOnly[Underscored(t.def.Name)] = true, true
	}
	roler, _ := b.(Roler)
	// tools/call accepts both spellings, whichever tools/list shows; with a
	// Roler, tools/list shows the operator tools to operator keys only.
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if r, ok := req.(*sdk.CallToolRequest); ok && r.Params != nil {
				if name, ok := listed[r.Params.Name]; ok {
					r.Params.Name = name
				}
			}
			res, err := next(ctx, method, req)
			if lr, ok := res.(*sdk.ListToolsResult); ok && err == nil && roler != nil && len(operatorOnly) > 0 {
				key := ""
				if r, ok := req.(*sdk.ListToolsRequest); ok && r.Extra != nil && r.Extra.Header != nil {
					key, _ = headerKey(r.Extra.Header)
				}
				if role, ok := roler.Role(ctx, key); !ok || role != "operator" {
					kept := lr.Tools[:0:0]
					for _, t := range lr.Tools {
						if !operatorOnly[t.Name] {
							kept = append(kept, t)
						}
					}
					lr.Tools = kept
				}
			}
			return res, err
		}
	})
	return s
}
