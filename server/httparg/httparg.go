// Package httparg reads what a REST request carries outside its body: the
// key of its "Authorization: Bearer KEY" header and the wait route's query
// parameters. It is the one reader of both for the server's routes, its MCP
// tools and the Workers front (cmd/worker, built for GOOS=js), so it
// imports only the standard library and the kernel.
package httparg

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
)

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

// WaitBody turns wait's query parameters (?prefix=&after=&limit=, each at
// most once) into the command body the kernel reads; the kernel checks the
// values.
func WaitBody(q url.Values) ([]byte, error) {
	b := []byte{'{'}
	for _, name := range [...]string{"prefix", "after", "limit"} {
		vs, ok := q[name]
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return nil, errors.New("query parameter " + name + " is given more than once")
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = kernel.AppendQuote(b, name)
		b = append(b, ':')
		if name == "limit" {
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 1 || n > kernel.MaxWaitLimit {
				return nil, errors.New("query parameter limit must be an integer from 1 to " + strconv.Itoa(kernel.MaxWaitLimit))
			}
			b = strconv.AppendInt(b, int64(n), 10)
		} else {
			b = kernel.AppendQuote(b, vs[0])
		}
	}
	for name := range q {
		if name != "prefix" && name != "after" && name != "limit" {
			return nil, errors.New("unknown query parameter " + strconv.Quote(name) + " (wait takes prefix, after and limit)")
		}
	}
	return append(b, '}'), nil
}
