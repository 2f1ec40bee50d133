// Package bearer reads the key out of an "Authorization: Bearer KEY"
// header. It is the one parser of that header for the REST routes, the MCP
// tools and the Workers front (cmd/worker, built for GOOS=js), so it
// imports nothing but the standard library's strings.
package bearer

import "strings"

// Key takes the key out of an Authorization header's value. The scheme is
// case-insensitive (RFC 9110) and the key is trimmed. An absent header
// gives "" and ok, so that the caller can say the key is missing; a value
// that is not "Bearer KEY" with a non-empty KEY gives ok false.
func Key(h string) (key string, ok bool) {
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
