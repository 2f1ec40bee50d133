//go:build js && wasm

package main

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall/js"

	"github.com/syumai/workers/cloudflare"

	"github.com/leaseplane/leaseplane/kernel/api"
)

// events answers GET /api/v1/acp/coordination/events, the events stream:
// the front checks the key, its role and the request as the server does
// (api.ParseEvents), then the workspace's object serves the stream
// (events.mjs), from its ledger, and its body goes to the client as it
// comes, never through Go.
func events(w http.ResponseWriter, r *http.Request) {
	rt := api.Events
	if !rt.Allows(r.Method) {
		w.Header().Set("Allow", rt.Method)
		write(w, fromAPI(api.MethodNotAllowed(rt, r.Method)))
		return
	}
	k, q, _, rep, ok := keyed(r, rt)
	if !ok {
		write(w, rep)
		return
	}
	er, no := api.ParseEvents(api.Key{Role: api.Role(k.role), AgentDID: k.agentDID}, q, r.Header.Get("Last-Event-ID"))
	if no != nil {
		write(w, fromAPI(*no))
		return
	}
	v := url.Values{"after": {strconv.FormatInt(er.After, 10)}}
	if er.ActorDid != "" {
		v.Set("actorDid", er.ActorDid)
	}
	if er.Prefix != "" {
		v.Set("prefix", er.Prefix)
	}
	res, rep := streamFromObject(k, "/keyed/events?"+v.Encode())
	if res == nil {
		write(w, rep)
		return
	}
	rw, ok := w.(rawBodyWriter)
	if !ok {
		res.Body.Close()
		write(w, unavailable("the events stream needs syumai/workers' response writer"))
		return
	}
	for _, h := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options", "X-Accel-Buffering"} {
		w.Header().Set(h, res.Header.Get(h))
	}
	w.WriteHeader(200)
	rw.WriteRawJSBody(res.Body.(rawBodyGetter).GetRawJSBody())
}

// rawBodyGetter is syumai/workers' body of a fetched response: the
// JavaScript stream under it.
type rawBodyGetter interface{ GetRawJSBody() js.Value }

// streamFromObject asks k's workspace object for path and returns its
// answer when it is a stream (200), else nil and the answer as a reply.
func streamFromObject(k keyRecord, path string) (*http.Response, reply) {
	ns, err := cloudflare.NewDurableObjectNamespace(bindingWorkspaces)
	if err != nil {
		return nil, unavailable("binding " + bindingWorkspaces + ": " + err.Error())
	}
	stub, err := ns.Get(ns.IdFromName(k.workspace))
	if err != nil {
		return nil, unavailable("workspace object: " + err.Error())
	}
	req, err := http.NewRequest("GET", "https://workspace"+path, nil)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	req.Header.Set(headerKeyID, k.id)
	res, err := stub.Fetch(req)
	if err != nil {
		return nil, unavailable("workspace object: " + err.Error())
	}
	if _, ok := res.Body.(rawBodyGetter); ok && res.StatusCode == 200 && strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, reply{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, unavailable("workspace object: " + err.Error())
	}
	ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	return nil, reply{status: res.StatusCode, retryAfter: ra, body: b}
}
