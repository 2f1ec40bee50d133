// Package api is the REST contract every host of the plane speaks, once, as
// data and pure functions: the routes (method, path, the kernel op they
// run, the query parameters they take), the roles of keys and who may do
// what, the status codes and the refusal bodies of the errors a host
// answers itself (401, 403, 405, 408, 413, 429, 503, ...). The server's
// REST routes, its MCP tools, the Go client and the Workers front all read
// it, so no host imports another host's package to agree with it.
//
// It imports only the kernel and the standard library, reads no clock and
// does no I/O: the hosts do that and ask it what to answer.
package api

import (
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
)

// Role is what a key may do in its workspace.
type Role string

// The roles of keys.
const (
	// RoleWorkspace may name any agent of its workspace.
	RoleWorkspace Role = "workspace"
	// RoleAgent names only its own agent (Key.AgentDID).
	RoleAgent Role = "agent"
	// RoleOperator may do what a workspace key may, and the operator's
	// acts (suspend, resume, forget, drills' runs, cancels and cadence).
	RoleOperator Role = "operator"
)

// Access is who may use a route.
type Access int

const (
	// AnyKey: every key of the workspace.
	AnyKey Access = iota
	// NoAgentKey: a workspace or operator key.
	NoAgentKey
	// OperatorKey: an operator key only.
	OperatorKey
)

// Route is one REST route of the contract.
type Route struct {
	Method string    // "GET" (HEAD passes too), "POST" or "PUT"
	Path   string    // the whole path, such as "/api/v1/acp/coordination/lease"
	Op     kernel.Op // the kernel command it runs; "" for the host's own routes
	Access Access
	// Query lists the query parameters the route takes; any other, or one
	// given twice, is refused (ParseQuery).
	Query []string
	// What names the route in refusals ("suspend needs an operator key").
	What string
}

// The paths of the routes.
const (
	PathLease            = "/api/v1/acp/coordination/lease"
	PathRelease          = "/api/v1/acp/coordination/release"
	PathWait             = "/api/v1/acp/coordination/wait"
	PathEvents           = "/api/v1/acp/coordination/events"
	PathSuspend          = "/api/v1/acp/operator/suspend"
	PathResume           = "/api/v1/acp/operator/resume"
	PathForget           = "/api/v1/acp/operator/forget"
	PathWhoami           = "/api/v1/whoami"
	PathLedger           = "/api/v1/ledger/" // + key, checkpoint, entries, proof, consistency, receipt, exported
	PathDetectors        = "/api/v1/detection/detectors"
	PathDetectionRun     = "/api/v1/detection/run"
	PathDetectionCases   = "/api/v1/detection/cases"
	PathDrillsRun        = "/api/v1/drills/run"
	PathDrillsRuns       = "/api/v1/drills/runs"
	PathDrillsCadence    = "/api/v1/drills/cadence"
	PathDrillsCancel     = "/api/v1/drills/cancel"
	ParamWaitUpToMs      = "waitUpToMs"
	MaxWaitUpToMs        = 30000 // the longest a lease request is held (?waitUpToMs=N)
	DefaultMaxBodyBytes  = 8192  // a request body's default limit (413 above it)
	MaxKeyLen            = 200   // a longer bearer key is refused without a look-up
	KeyPrefix            = "lp_" // every key is "lp_" ID "_" secret
	ledgerExported       = "exported"
	ledgerExportedAction = "recording an export"
)

// The lease routes: each runs one kernel command.
var (
	Lease   = Route{Method: "POST", Path: PathLease, Op: kernel.OpAcquire, Query: []string{ParamWaitUpToMs}, What: "acquire"}
	Release = Route{Method: "POST", Path: PathRelease, Op: kernel.OpRelease, What: "release"}
	Wait    = Route{Method: "GET", Path: PathWait, Op: kernel.OpWait, Query: []string{"prefix", "after", "limit"}, What: "wait"}
	Suspend = Route{Method: "POST", Path: PathSuspend, Op: kernel.OpSuspend, Access: OperatorKey, What: "suspend"}
	Resume  = Route{Method: "POST", Path: PathResume, Op: kernel.OpResume, Access: OperatorKey, What: "resume"}
	Forget  = Route{Method: "POST", Path: PathForget, Op: kernel.OpForget, Access: OperatorKey, What: "forget"}
)

// LeaseRoutes are the routes that run kernel commands, in the order the
// docs list them.
var LeaseRoutes = []Route{Lease, Release, Wait, Suspend, Resume, Forget}

// The host's own routes (no kernel command).
var (
	Events         = Route{Method: "GET", Path: PathEvents, Query: []string{"actorDid", "prefix"}, What: "the events stream"}
	Whoami         = Route{Method: "GET", Path: PathWhoami, What: PathWhoami}
	Detectors      = Route{Method: "GET", Path: PathDetectors, Access: NoAgentKey, What: PathDetectors}
	DetectionRun   = Route{Method: "POST", Path: PathDetectionRun, Access: OperatorKey, What: PathDetectionRun}
	DetectionCases = Route{Method: "GET", Path: PathDetectionCases, Access: NoAgentKey, Query: []string{"status"}, What: PathDetectionCases}
	DrillsRun      = Route{Method: "POST", Path: PathDrillsRun, Access: OperatorKey, What: PathDrillsRun}
	DrillsRuns     = Route{Method: "GET", Path: PathDrillsRuns, Access: NoAgentKey, Query: []string{"limit"}, What: PathDrillsRuns}
	DrillsCadence  = Route{Method: "PUT", Path: PathDrillsCadence, Access: OperatorKey, What: PathDrillsCadence}
	DrillsCancel   = Route{Method: "POST", Path: PathDrillsCancel, Access: OperatorKey, What: PathDrillsCancel}
)

// LedgerRoutes are the ledger's routes (every key of the workspace reads
// its ledger; recording an export needs a workspace or operator key).
var LedgerRoutes = []Route{
	{Method: "GET", Path: PathLedger + "key", What: PathLedger + "key"},
	{Method: "GET", Path: PathLedger + "checkpoint", What: PathLedger + "checkpoint"},
	{Method: "GET", Path: PathLedger + "entries", Query: []string{"start", "count"}, What: PathLedger + "entries"},
	{Method: "GET", Path: PathLedger + "proof", Query: []string{"index", "size"}, What: PathLedger + "proof"},
	{Method: "GET", Path: PathLedger + "consistency", Query: []string{"from", "to"}, What: PathLedger + "consistency"},
	{Method: "GET", Path: PathLedger + "receipt", Query: []string{"leaseId"}, What: PathLedger + "receipt"},
	{Method: "POST", Path: PathLedger + ledgerExported, Access: OperatorKey, Query: []string{"size", "root"}, What: ledgerExportedAction},
}

// LeaseRoute is the lease route at path.
func LeaseRoute(path string) (Route, bool) {
	for _, r := range LeaseRoutes {
		if r.Path == path {
			return r, true
		}
	}
	return Route{}, false
}

// LedgerRoute is the ledger route at path (PathLedger + its name).
func LedgerRoute(path string) (Route, bool) {
	for _, r := range LedgerRoutes {
		if r.Path == path {
			return r, true
		}
	}
	return Route{}, false
}

// RouteOf is the lease route that runs op.
func RouteOf(op kernel.Op) (Route, bool) {
	for _, r := range LeaseRoutes {
		if r.Op == op {
			return r, true
		}
	}
	return Route{}, false
}

// LeaseRouteList names the lease routes for a 404's message.
var LeaseRouteList = PathLease + ", " + PathRelease + ", " + PathWait + ", " + PathSuspend + ", " + PathResume + " and " + PathForget

// RouteList names the lease routes and the events stream for a 404's
// message on a host that serves both.
var RouteList = PathLease + ", " + PathRelease + ", " + PathWait + ", " + PathEvents + ", " + PathSuspend + ", " + PathResume + " and " + PathForget

// LedgerRouteList names the ledger's routes for a 404's message.
const LedgerRouteList = PathLedger + "key, checkpoint, entries, proof, consistency, receipt and exported"

// Allows reports whether method is the route's (HEAD where it takes GET).
func (r Route) Allows(method string) bool {
	return method == r.Method || (r.Method == "GET" && method == "HEAD")
}

// Key is what a host knows of the key a request came with, once it has
// looked it up.
type Key struct {
	Role     Role
	AgentDID string // an agent key's own agent
}

// Authorize decides whether key k may use route r (the role's part): nil
// when it may, else the 403 to answer.
func Authorize(k Key, r Route) *Reply {
	switch {
	case r.Access == OperatorKey && k.Role != RoleOperator:
		rep := Forbidden(r.What + " needs an operator key; this is " + withArticle(string(k.Role)) + " key")
		return &rep
	case r.Access == NoAgentKey && k.Role == RoleAgent:
		rep := Forbidden(r.What + " needs a workspace or operator key; this is an agent key")
		return &rep
	}
	return nil
}

// AuthorizeActor decides whether key k may name actorDid (the body's,
// as the kernel decoded it): an agent key names only its own agent (403
// actor_mismatch); nil when it may.
func AuthorizeActor(k Key, actorDid string) *Reply {
	if k.Role == RoleAgent && actorDid != k.AgentDID {
		rep := Reply{Status: 403, Body: kernel.ActorMismatchAnswer(k.AgentDID, actorDid)}
		return &rep
	}
	return nil
}

// Admit is what a host decides before a lease route's command reaches the
// workspace: the route's role (Authorize), then, for an agent key, the
// command's actorDid (AuthorizeActor). c is the body as the host decoded
// it, once, with kernel.DecodeCommand: an agent key's command the kernel
// refused to decode is 400 invalid_request with the kernel's words; other
// keys' invalid commands are left to the kernel, which refuses them alike.
// nil means: send the command.
func Admit(k Key, r Route, c kernel.Command) *Reply {
	if rep := Authorize(k, r); rep != nil {
		return rep
	}
	if k.Role != RoleAgent || r.Op == kernel.OpWait || r.Op == "" {
		return nil
	}
	if c.Invalid != "" {
		rep := Invalid(c.Invalid)
		return &rep
	}
	return AuthorizeActor(k, c.ActorDid)
}

// withArticle puts "a" or "an" before a role's name: "an agent", "a workspace".
func withArticle(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// BearerKey takes the key out of an Authorization header's value. The
// scheme is case-insensitive (RFC 9110) and the key is trimmed. An absent
// header gives "" and ok, so that the caller can say the key is missing; a
// value that is not "Bearer KEY" with a non-empty KEY gives ok false.
func BearerKey(h string) (key string, ok bool) {
	if h == "" {
		return "", true
	}
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(rest)
	return key, key != ""
}

// WellFormedKey reports whether key has the form of a key at all (not
// empty, at most MaxKeyLen bytes, KeyPrefix first): others are refused
// without a look-up.
func WellFormedKey(key string) bool {
	return key != "" && len(key) <= MaxKeyLen && strings.HasPrefix(key, KeyPrefix)
}
