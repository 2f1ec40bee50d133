package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the REST contract, the one both
// tiers answer at PathOpenAPI with no key, byte for byte (docs/openapi.json
// is a copy). server/openapi_test.go checks it against the patterns the
// server registers and against real answers: a route added without its
// entry fails that test.
//
//go:embed openapi.json
var OpenAPI []byte

// PathOpenAPI serves OpenAPI.
const PathOpenAPI = "/openapi.json"
