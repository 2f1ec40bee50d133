//go:build js && wasm

package main

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall/js"

	"github.com/syumai/workers"
	"github.com/syumai/workers/cloudflare"
	"github.com/syumai/workers/cloudflare/kv"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
)

// The bindings of wrangler.jsonc.
const (
	bindingKeys       = "KEYS"
	bindingWorkspaces = "WORKSPACES"
	secretAdmin       = "LEASEPLANE_ADMIN_SECRET"
)

// main keeps one Go runtime for every request of the isolate: it registers
// the handler and says it is ready, then never returns, and the entry
// module (front.mjs) hands it each request. (workers.Serve would return
// after the first response, and syumai/workers' generated entry boots a
// new instance per request.)
func main() {
	workers.ServeNonBlock(http.HandlerFunc(handle))
	workers.Ready()
	select {}
}

// served counts the requests this runtime has handled (GET /healthz shows
// it, so a test can tell one runtime served them all).
var served atomic.Int64

func handle(w http.ResponseWriter, r *http.Request) {
	served.Add(1)
	route(w, r)
}

// route answers one request, a client's or a drill's (drills.go).
func route(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == api.PathEvents {
		events(w, r) // a stream (events.go)
		return
	}
	rep, allow := answer(r)
	if allow != "" {
		w.Header().Set("Allow", allow)
	}
	write(w, rep)
}

// answer decides the reply to r; allow is the Allow header to send with
// it (the route's method, when r used another), or "".
func answer(r *http.Request) (reply, string) {
	path := r.URL.Path
	switch {
	case path == "/healthz":
		b := strconv.AppendInt([]byte(`{"ok":true,"tier":"workers","served":`), served.Load(), 10)
		return reply{status: 200, body: append(b, '}')}, ""
	case path == pathOpenAPI:
		return openapi(r.Method)
	case strings.HasPrefix(path, "/admin/v1/"):
		return admin(r), ""
	case strings.HasPrefix(path, api.PathLedger):
		allow := ""
		if rt, ok := api.LedgerRoute(path); ok && !rt.Allows(r.Method) {
			allow = rt.Method
		}
		return ledgerRoute(r), allow
	case path == api.PathWhoami || path == pathMetrics:
		return keyedGet(r, path), ""
	case path == pathMCP:
		allow := ""
		if r.Method != "POST" {
			allow = "POST"
		}
		return mcp(r), allow
	case path == pathDrillRunner:
		return drillRunner(r), ""
	case isDrillPath(path):
		rt, ok := routeIn(drillRoutes, path)
		return routed(r, rt, ok, func() reply { return refusal(404, "not_found", "no drill route "+path) }, drills)
	case strings.HasPrefix(path, pathDetection):
		rt, ok := routeIn(detectionRoutes, path)
		return routed(r, rt, ok, func() reply { return refusal(404, "not_found", "no detection route "+path) }, detection)
	}
	rt, ok := api.LeaseRoute(path)
	return routed(r, rt, ok, func() reply { return fromAPI(api.NotFound(path, api.LeaseRouteList)) }, lease)
}

// routed answers r by f when the path has route rt of its table (found)
// and r uses its method.
func routed(r *http.Request, rt api.Route, found bool, notFound func() reply, f func(*http.Request, api.Route) reply) (reply, string) {
	if !found {
		return notFound(), ""
	}
	if !rt.Allows(r.Method) {
		return fromAPI(api.MethodNotAllowed(rt, r.Method)), rt.Method
	}
	return f(r, rt), ""
}

// lease authenticates one lease request and sends it to its workspace's
// object.
func lease(r *http.Request, rt api.Route) reply {
	// The key is checked before any of the body is read, as on the server.
	k, rep, ok := requestKey(r)
	if !ok {
		return rep
	}
	q, err := api.ParseQuery(rt, r.URL.RawQuery)
	if err != nil {
		return fromAPI(api.BadQuery(err))
	}
	if r.ContentLength > maxBodyBytes {
		return tooLarge()
	}
	body, rep, ok := readBody(r)
	if !ok {
		return rep
	}
	if rt.Op == kernel.OpWait && r.URL.RawQuery != "" {
		if body, err = api.WaitBody(q); err != nil {
			return fromAPI(api.BadQuery(err))
		}
	}
	c := kernel.DecodeCommand(rt.Op, 0, body)
	if rt.Op == kernel.OpAcquire {
		if _, _, err = api.WaitUpTo(q, &c); err != nil {
			return fromAPI(api.BadQuery(err))
		}
	}
	return command(k, c)
}

// command sends one lease command of key k, decoded once by its caller
// (kernel.DecodeCommand, the query's waitUpToMs set by api.WaitUpTo), to
// its workspace's object, once the contract admits it (api.Admit: the
// key's role for the op, an agent key's actorDid). It crosses to the
// object as a command record (kernel.PutRecord), which the object stamps
// with its clock, steps and logs as it came.
func command(k keyRecord, c kernel.Command) reply {
	if rep, ok := admit(k, c); !ok {
		return rep
	}
	return toObject(k.workspace, "/op/"+string(c.Op), kernel.AppendRecord(nil, c), k.id)
}

const pathMCP = "/mcp"

// mcp answers POST /mcp (mcp.go): the key as on REST, checked before the
// body is read; a tool call is the REST command its arguments make.
func mcp(r *http.Request) reply {
	if r.Method != "POST" {
		return refusal(405, "method_not_allowed", "/mcp takes POST: it is stateless streamable HTTP (no stream to GET, no session to DELETE)")
	}
	k, rep, ok := requestKey(r)
	if !ok {
		return rep
	}
	body, rep, ok := readBody(r)
	if !ok {
		return rep
	}
	m, err := parseRPC(body)
	if err != nil {
		return refusal(400, kernel.ReasonInvalid, err.Error())
	}
	if m.id == nil {
		return reply{status: 202} // a notification: nothing to answer
	}
	result := func(b []byte) reply { return reply{status: 200, body: rpcResult(m.id, b)} }
	switch m.method {
	case "initialize":
		return result(mcpInitialize(m.params))
	case "ping":
		return result([]byte("{}"))
	case "tools/list":
		// The object says whether it still holds the key (a revocation).
		if rep := toObject(k.workspace, "/keyed/whoami", nil, k.id); rep.status != 200 {
			return rep
		}
		return result(mcpToolList(k.role))
	case "tools/call":
		t, body, wait, argErr, rpcErr := toolCall(m.params)
		if rpcErr != "" {
			return reply{status: 200, body: rpcError(m.id, -32602, rpcErr)}
		}
		if argErr != "" {
			return result(toolError(argErr))
		}
		if t.path != "" {
			return operatorTool(r, m.id, t, body)
		}
		c := kernel.DecodeCommand(t.op, 0, body)
		if wait > 0 && c.Invalid == "" {
			c.WaitUpToMs, c.HasWaitUpTo = int64(wait), true
		}
		rep := command(k, c)
		if rep.status == 401 { // a key the object no longer holds: refused as at the HTTP level
			return rep
		}
		return result(toolResult(rep.status, rep.body))
	}
	return refusal(400, kernel.ReasonInvalid, "JSON RPC not handled: "+strconv.Quote(m.method)+" unsupported")
}

// ledgerRoute answers the ledger's routes (api.LedgerRoutes): GET for any
// key of the workspace (a workspace sees only its own ledger), POST
// exported for an operator key only, as on the server.
func ledgerRoute(r *http.Request) reply {
	rt, ok := api.LedgerRoute(r.URL.Path)
	if !ok {
		return fromAPI(api.NotFound(r.URL.Path, api.LedgerRouteList))
	}
	if !rt.Allows(r.Method) {
		return fromAPI(api.MethodNotAllowed(rt, r.Method))
	}
	k, rep, ok := requestKey(r)
	if !ok {
		return rep
	}
	if no := api.Authorize(api.Key{Role: api.Role(k.role), AgentDID: k.agentDID}, rt); no != nil {
		return fromAPI(*no)
	}
	if _, err := api.ParseQuery(rt, r.URL.RawQuery); err != nil {
		return fromAPI(api.BadQuery(err))
	}
	return toObject(k.workspace, "/ledger/"+strings.TrimPrefix(r.URL.Path, api.PathLedger)+"?"+r.URL.RawQuery, nil, k.id)
}

// pathMetrics is a workspace's metrics (Prometheus text, from its object's
// own counters); the server's /metrics is the whole plane's.
const pathMetrics = "/metrics"

// keyedGet answers GET whoami and metrics: the workspace's object answers
// both for a key it holds (so a revoked key learns nothing either).
func keyedGet(r *http.Request, path string) reply {
	if r.Method != "GET" && r.Method != "HEAD" {
		return refusal(405, "method_not_allowed", path+" takes GET, not "+r.Method)
	}
	k, rep, ok := requestKey(r)
	if !ok {
		return rep
	}
	if r.URL.RawQuery != "" {
		return refusal(400, kernel.ReasonInvalid, path+" takes no query parameters")
	}
	return toObject(k.workspace, "/keyed"+strings.TrimPrefix(path, "/api/v1"), nil, k.id)
}

// requestKey checks r's bearer key: the key's record, or the refusal to
// answer (401, or 503 when the keys cannot be read).
func requestKey(r *http.Request) (keyRecord, reply, bool) {
	key, ok := api.BearerKey(r.Header.Get("Authorization"))
	if !ok {
		return keyRecord{}, fromAPI(api.MalformedAuthorization()), false
	}
	ks, err := openKeys()
	if err != nil {
		return keyRecord{}, unavailable(err.Error()), false
	}
	return authenticate(ks, key)
}

func readBody(r *http.Request) ([]byte, reply, bool) {
	if r.Body == nil {
		return nil, reply{}, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, fromAPI(api.Invalid("reading the request body failed: " + err.Error())), false
	}
	if len(body) > maxBodyBytes {
		return nil, tooLarge(), false
	}
	return body, reply{}, true
}

// headerKeyID carries the id of the request's key to the workspace's
// object, which refuses a key it does not hold (revoked, or never made
// there). The object is reachable only through its binding.
const headerKeyID = "X-Leaseplane-Key-Id"

// toObject sends body to path on the workspace's Durable Object, with
// keyID (empty for the admin routes) for the object to check, and returns
// its answer.
func toObject(workspace, path string, body []byte, keyID string) reply {
	ns, err := cloudflare.NewDurableObjectNamespace(bindingWorkspaces)
	if err != nil {
		return unavailable("binding " + bindingWorkspaces + ": " + err.Error())
	}
	stub, err := ns.Get(ns.IdFromName(workspace))
	if err != nil {
		return unavailable("workspace object: " + err.Error())
	}
	req, err := http.NewRequest("POST", "https://workspace"+path, strings.NewReader(string(body)))
	if err != nil {
		return unavailable(err.Error())
	}
	if keyID != "" {
		req.Header.Set(headerKeyID, keyID)
	}
	res, err := stub.Fetch(req)
	if err != nil {
		return unavailable("workspace object: " + err.Error())
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return unavailable("workspace object: " + err.Error())
	}
	ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	rep := reply{status: res.StatusCode, retryAfter: ra, body: b}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		rep.contentType = ct
	}
	return rep
}

// kvKeys is the key store in Workers KV.
type kvKeys struct{ ns *kv.Namespace }

func openKeys() (kvKeys, error) {
	ns, err := cloudflare.NewKVNamespace(bindingKeys)
	if err != nil {
		return kvKeys{}, errors.New("binding " + bindingKeys + ": " + err.Error())
	}
	return kvKeys{ns}, nil
}

func (s kvKeys) Get(name string) (string, bool, error) {
	v, err := s.ns.GetString(name, nil)
	if err != nil {
		return "", false, err
	}
	// syumai/workers gives a missing value (JavaScript null) as "<null>";
	// no stored value has that form.
	if v == "<null>" {
		return "", false, nil
	}
	return v, true, nil
}

func (s kvKeys) Put(name, value string) error { return s.ns.PutString(name, value, nil) }
func (s kvKeys) Delete(name string) error     { return s.ns.Delete(name) }

// admin answers the routes that make workspaces and keys, for the holder of
// the LEASEPLANE_ADMIN_SECRET secret (docs/WORKERS.md):
//
//	POST   /admin/v1/workspaces?name=N            body: the rules (optional)
//	POST   /admin/v1/keys?workspace=N&role=R[&agentDid=D]
//	DELETE /admin/v1/keys?id=ID
func admin(r *http.Request) reply {
	secret := cloudflare.Getenv(secretAdmin)
	if secret == "" {
		return refusal(404, "not_found", "the admin routes are off: set the "+secretAdmin+" secret")
	}
	key, ok := api.BearerKey(r.Header.Get("Authorization"))
	if !ok || !sameSecret(key, secret) {
		return refusal(401, "unauthorized", "the admin routes need Authorization: Bearer "+secretAdmin)
	}
	body, rep, ok := readBody(r)
	if !ok {
		return rep
	}
	ks, err := openKeys()
	if err != nil {
		return unavailable(err.Error())
	}
	q := r.URL.Query()
	switch {
	case r.URL.Path == "/admin/v1/workspaces" && r.Method == "POST":
		return createWorkspace(ks, q.Get("name"), body)
	case r.URL.Path == "/admin/v1/keys" && r.Method == "POST":
		return createKey(ks, q)
	case r.URL.Path == "/admin/v1/keys" && r.Method == "DELETE":
		return revokeKey(ks, q.Get("id"))
	}
	return refusal(404, "not_found", "no admin route "+r.Method+" "+r.URL.Path+
		"; they are POST /admin/v1/workspaces, POST /admin/v1/keys and DELETE /admin/v1/keys")
}

// createWorkspace makes the workspace's object and its first key. The
// object is the truth about what exists: it refuses a second creation once
// the workspace has had a key, but a creation whose key was never made (a
// failure after the object was made) can be sent again with the same rules.
func createWorkspace(ks kvKeys, name string, rules []byte) reply {
	if err := validWorkspaceName(name); err != nil {
		return refusal(400, kernel.ReasonInvalid, "workspace "+err.Error())
	}
	if rep := toObject(name, "/create?name="+name, rules, ""); rep.status != 200 {
		return rep
	}
	return issueKey(ks, name, roleWorkspace, "")
}

func createKey(ks kvKeys, q url.Values) reply {
	name, role, agent := q.Get("workspace"), q.Get("role"), q.Get("agentDid")
	if err := validWorkspaceName(name); err != nil {
		return refusal(404, "not_found", "no workspace "+strconv.Quote(name))
	}
	switch role {
	case roleWorkspace, roleOperator:
		if agent != "" {
			return refusal(400, kernel.ReasonInvalid, "a "+role+" key names no agent")
		}
	case roleAgent:
		if err := validAgent(agent); err != nil {
			return refusal(400, kernel.ReasonInvalid, err.Error())
		}
	default:
		return refusal(400, kernel.ReasonInvalid, "role must be workspace, agent or operator")
	}
	return issueKey(ks, name, role, agent)
}

// issueKey writes the new key's record to KV, then has the workspace's
// object hold its id (from then on the key works). A failure of either
// leaves no working key, and the call can be repeated.
func issueKey(ks kvKeys, workspace, role, agent string) reply {
	id, key, rep := makeKey(ks, workspace, role, agent)
	if rep.status != 200 {
		return rep
	}
	b := append([]byte(nil), `{"ok":true,"workspace":`...)
	b = kernel.AppendQuote(b, workspace)
	b = append(b, `,"id":`...)
	b = kernel.AppendQuote(b, id)
	b = append(b, `,"role":`...)
	b = kernel.AppendQuote(b, role)
	if agent != "" {
		b = append(b, `,"agentDid":`...)
		b = kernel.AppendQuote(b, agent)
	}
	b = append(b, `,"key":`...)
	b = kernel.AppendQuote(b, key)
	return reply{status: 200, body: append(b, '}')}
}

// makeKey makes a key of workspace: its record in KV, its id held by the
// workspace's object. rep is 200 when it was made, else the refusal.
func makeKey(ks kvKeys, workspace, role, agent string) (id, key string, rep reply) {
	id, key = newKey()
	rec := keyRecord{id: id, workspace: workspace, role: role, agentDID: agent, hash: keyHash(key)}
	if err := ks.Put(idName(id), rec.format()); err != nil {
		return "", "", unavailable(err.Error())
	}
	q := url.Values{"id": {id}, "role": {role}}
	if agent != "" {
		q.Set("agentDid", agent)
	}
	if rep := toObject(workspace, "/keys/add?"+q.Encode(), nil, ""); rep.status != 200 {
		ks.Delete(idName(id)) // best effort: an id the object does not hold works nowhere
		return "", "", rep
	}
	return id, key, reply{status: 200}
}

// revokeKey has the key's workspace object drop its id: from its answer
// on, every request with the key is refused, at every location. The KV
// record is deleted after, best effort (a cached copy of it authorizes
// nothing).
func revokeKey(ks kvKeys, id string) reply {
	if !validKeyID(id) {
		return refusal(404, "not_found", "no key "+strconv.Quote(id))
	}
	v, found, err := ks.Get(idName(id))
	if err != nil {
		return unavailable(err.Error())
	}
	if !found {
		return refusal(404, "not_found", "no key "+strconv.Quote(id))
	}
	rec, err := parseKeyRecord(v)
	if err != nil {
		return unavailable(err.Error())
	}
	if rep := toObject(rec.workspace, "/keys/revoke?id="+id, nil, ""); rep.status != 200 {
		return rep
	}
	ks.Delete(idName(id))
	return reply{status: 200, body: []byte(`{"ok":true,"revoked":true}`)}
}

// write writes r with the headers of every reply (api.SetHeaders, the
// server's too).
func write(w http.ResponseWriter, r reply) {
	api.SetHeaders(w.Header(), r.contentType, r.retryAfter, r.status)
	w.WriteHeader(r.status)
	// The body goes to JavaScript as one Uint8Array, not through
	// syumai/workers' stream: closing that stream closes the library's
	// done channel, which a second response would close again (a panic)
	// in a runtime that serves many requests.
	rw, ok := w.(rawBodyWriter)
	if !ok {
		w.Write(r.body)
		return
	}
	u := js.Global().Get("Uint8Array").New(len(r.body))
	js.CopyBytesToJS(u, r.body)
	rw.WriteRawJSBody(u)
}

// rawBodyWriter is syumai/workers' ResponseWriter: it takes the response
// body as a JavaScript value.
type rawBodyWriter interface{ WriteRawJSBody(body js.Value) }
