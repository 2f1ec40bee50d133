package main

import (
	_ "embed"

	"github.com/leaseplane/leaseplane/kernel/api"
)

// openAPI is the server's OpenAPI document (server/openapi.json), kept
// here byte for byte: the front answers it at GET /openapi.json with no
// key, as the server does. openapi_test.go holds it to the server's file
// and cmd/worker/test/openapi.test.mjs to a running server's answer. Where
// a documented route answers otherwise on this tier, docs/WORKERS.md says.
//
//go:embed openapi.json
var openAPI []byte

const pathOpenAPI = "/openapi.json"

// openapi answers GET (and HEAD) /openapi.json; any other method 405.
func openapi(method string) (reply, string) {
	if method != "GET" && method != "HEAD" {
		return refusal(405, api.ReasonMethodNotAllowed, pathOpenAPI+" takes GET, not "+method), "GET"
	}
	return reply{status: 200, body: openAPI}, ""
}
