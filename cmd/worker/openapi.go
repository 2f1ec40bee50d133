package main

import "github.com/leaseplane/leaseplane/kernel/api"

// pathOpenAPI is where the front answers api.OpenAPI, the server's
// document, with no key, as the server does; cmd/worker/test/mcp.test.mjs
// holds the answer to a running server's. Where a documented route
// answers otherwise on this tier, docs/WORKERS.md says.
const pathOpenAPI = api.PathOpenAPI

// openapi answers GET (and HEAD) /openapi.json; any other method 405.
func openapi(method string) (reply, string) {
	if method != "GET" && method != "HEAD" {
		return refusal(405, api.ReasonMethodNotAllowed, pathOpenAPI+" takes GET, not "+method), "GET"
	}
	return reply{status: 200, body: api.OpenAPI}, ""
}
