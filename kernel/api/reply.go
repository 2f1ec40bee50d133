package api

import (
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
)

// Reply is an answer a host writes: its status, its Retry-After header in
// seconds (0 for none) and its JSON body.
type Reply struct {
	Status     int
	RetryAfter int
	Body       []byte
}

// Every reply's headers, shared by the hosts (callers never append to
// them).
var (
	jsonType        = []string{"application/json"}
	noSniff         = []string{"nosniff"}
	noStore         = []string{"no-store"}
	retryAfters     = [...][]string{{"0"}, {"1"}}
	bearerChallenge = []string{`Bearer realm="leaseplane"`}
)

// SetHeaders sets on h (a net/http Header: its type is this map's) the
// headers every reply of either host carries: Content-Type (JSON, or
// contentType when set), nosniff, no-store, Retry-After when retryAfter is
// above zero, and on a 401 the Bearer challenge. The keys are canonical.
func SetHeaders(h map[string][]string, contentType string, retryAfter, status int) {
	h["Content-Type"] = jsonType
	if contentType != "" {
		h["Content-Type"] = []string{contentType}
	}
	h["X-Content-Type-Options"] = noSniff
	h["Cache-Control"] = noStore
	if retryAfter > 0 {
		if retryAfter < len(retryAfters) {
			h["Retry-After"] = retryAfters[retryAfter]
		} else {
			h["Retry-After"] = []string{strconv.Itoa(retryAfter)}
		}
	}
	if status == 401 {
		h["Www-Authenticate"] = bearerChallenge
	}
}

// The reasons the hosts answer with themselves (the kernel's are in
// package kernel).
const (
	ReasonUnauthorized     = "unauthorized"
	ReasonActorMismatch    = "actor_mismatch"
	ReasonForbidden        = "forbidden"
	ReasonUnavailable      = "unavailable"
	ReasonTooLarge         = "body_too_large"
	ReasonTimeout          = "request_timeout"
	ReasonNotFound         = "not_found"
	ReasonMethodNotAllowed = "method_not_allowed"
	ReasonInternal         = "internal"
)

// LimitHeldRequests names the cap on open held HTTP requests in a 429
// limit_exceeded refusal.
const LimitHeldRequests = "heldRequests"

// Refusal is {"ok": false, "reason": reason, "error": msg} with status.
func Refusal(status int, reason, msg string) Reply {
	return Reply{Status: status, Body: kernel.RefusalAnswer(reason, msg)}
}

// Invalid is 400 invalid_request: msg names what is wrong.
func Invalid(msg string) Reply { return Reply{Status: 400, Body: kernel.InvalidAnswer(msg)} }

// MissingKey is 401: the request has no key at all.
func MissingKey() Reply {
	return Refusal(401, ReasonUnauthorized, "missing key: send Authorization: Bearer KEY")
}

// MalformedAuthorization is 401: the Authorization header is not Bearer KEY.
func MalformedAuthorization() Reply {
	return Refusal(401, ReasonUnauthorized, "the Authorization header must be Bearer KEY")
}

// BadKey is 401 for a key that is unknown, malformed or revoked.
func BadKey() Reply { return Refusal(401, ReasonUnauthorized, "unknown or revoked key") }

// Forbidden is 403 forbidden: the key's role may not do this (msg says why).
func Forbidden(msg string) Reply { return Refusal(403, ReasonForbidden, msg) }

// NotFound is 404 for a path no route has; routes lists them.
func NotFound(path, routes string) Reply {
	return Refusal(404, ReasonNotFound, "no route "+path+"; the routes are "+routes)
}

// MethodNotAllowed is 405 (the host adds Allow: r.Method).
func MethodNotAllowed(r Route, method string) Reply {
	return Refusal(405, ReasonMethodNotAllowed, r.Path+" takes "+r.Method+", not "+method)
}

// Timeout is 408: the body did not arrive within d (as the host writes it).
func Timeout(d string) Reply {
	return Refusal(408, ReasonTimeout, "the request body did not arrive within "+d)
}

// TooLarge is 413: the body is larger than max bytes.
func TooLarge(max int64) Reply {
	return Refusal(413, ReasonTooLarge, "the request body is larger than "+strconv.FormatInt(max, 10)+" bytes")
}

// LimitExceeded is 429 limit_exceeded with the limit's name and max,
// answered with Retry-After: 1 (a host's own caps, such as
// LimitHeldRequests).
func LimitExceeded(limit string, max int, msg string) Reply {
	b := append([]byte(nil), `{"ok":false,"reason":"limit_exceeded","limit":`...)
	b = kernel.AppendQuote(b, limit)
	b = append(b, `,"max":`...)
	b = strconv.AppendInt(b, int64(max), 10)
	b = append(b, `,"error":`...)
	b = kernel.AppendQuote(b, msg)
	return Reply{Status: 429, RetryAfter: 1, Body: append(b, '}')}
}

// Unavailable is 503: the plane cannot decide now and granted nothing;
// what (may be "") says why. Retry-After: 1.
func Unavailable(what string) Reply {
	msg := "the lease plane cannot decide now; nothing was granted; retry"
	if what != "" {
		msg += " (" + what + ")"
	}
	r := Refusal(503, ReasonUnavailable, msg)
	r.RetryAfter = 1
	return r
}

// Internal is 500: the host failed on this request (a bug, logged).
func Internal() Reply {
	return Refusal(500, ReasonInternal, "the server failed on this request; it is logged")
}
