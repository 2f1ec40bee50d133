package api

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/leaseplane/leaseplane/kernel"
)

// Query is a request's query parameters, read strictly for one route:
// each is one the route takes, given at most once.
type Query struct {
	names, values []string
}

// QueryError is a refused query parameter: Param names it (empty when
// the query string as a whole is malformed).
type QueryError struct {
	Param string
	Msg   string
}

func (e *QueryError) Error() string { return e.Msg }

// BadQuery is the 400 invalid_request for err: with "parameter" naming
// the parameter at fault when err is a *QueryError that names one, as the
// ledger's routes answer a bad parameter.
func BadQuery(err error) Reply {
	qe, ok := err.(*QueryError)
	if !ok || qe.Param == "" {
		return Invalid(err.Error())
	}
	b := append([]byte(`{"ok":false,"reason":"invalid_request","parameter":`), kernel.AppendQuote(nil, qe.Param)...)
	b = append(b, `,"error":`...)
	b = kernel.AppendQuote(b, qe.Msg)
	return Reply{Status: 400, Body: append(b, '}')}
}

// ParseQuery reads a request's raw query (after "?") for route r. An
// unknown parameter, one given twice, a malformed query string, or a
// prefix or after that is not valid UTF-8 is an error naming it, to answer
// 400 invalid_request as an unknown body field is.
func ParseQuery(r Route, raw string) (Query, error) {
	var q Query
	if raw == "" {
		return q, nil
	}
	vs, err := url.ParseQuery(raw)
	if err != nil {
		return q, &QueryError{Msg: "malformed query string: " + err.Error()}
	}
	names := make([]string, 0, len(vs))
	for name := range vs {
		names = append(names, name)
	}
	slices.Sort(names) // the first wrong one named is the same every time
	for _, name := range names {
		if !slices.Contains(r.Query, name) {
			return Query{}, &QueryError{name, "unknown query parameter " + strconv.Quote(name) + takes(r)}
		}
		if len(vs[name]) != 1 {
			return Query{}, &QueryError{name, "query parameter " + name + " is given more than once"}
		}
		v := vs[name][0]
		if (name == "prefix" || name == "after") && !utf8.ValidString(v) {
			return Query{}, &QueryError{name, "query parameter " + name + " is not valid UTF-8"}
		}
		q.names = append(q.names, name)
		q.values = append(q.values, v)
	}
	return q, nil
}

func takes(r Route) string {
	switch len(r.Query) {
	case 0:
		return " (" + r.What + " takes none)"
	case 1:
		return " (" + r.What + " takes only " + r.Query[0] + ")"
	}
	return " (" + r.What + " takes " + strings.Join(r.Query[:len(r.Query)-1], ", ") + " and " + r.Query[len(r.Query)-1] + ")"
}

// Get is the parameter's value and whether it was given.
func (q Query) Get(name string) (string, bool) {
	if i := slices.Index(q.names, name); i >= 0 {
		return q.values[i], true
	}
	return "", false
}

// Values is the query as url.Values (for a host's routes that read it so).
func (q Query) Values() url.Values {
	v := make(url.Values, len(q.names))
	for i, n := range q.names {
		v[n] = []string{q.values[i]}
	}
	return v
}

// WaitBody turns wait's query parameters (prefix, after, limit) into the
// command body the kernel reads; the kernel checks prefix and after like
// resource names. A limit that is not an integer from 1 to
// kernel.MaxWaitLimit is an error naming it.
func WaitBody(q Query) ([]byte, error) {
	b := []byte{'{'}
	for _, name := range Wait.Query {
		v, ok := q.Get(name)
		if !ok {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = kernel.AppendQuote(b, name)
		b = append(b, ':')
		if name == "limit" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > kernel.MaxWaitLimit || !digits(v) {
				return nil, &QueryError{"limit", "query parameter limit must be an integer from 1 to " + strconv.Itoa(kernel.MaxWaitLimit)}
			}
			b = strconv.AppendInt(b, int64(n), 10)
		} else {
			b = kernel.AppendQuote(b, v)
		}
	}
	return append(b, '}'), nil
}

// WaitUpTo reads the lease route's waitUpToMs from the query, "0" or
// [1-9][0-9]* up to MaxWaitUpToMs, and sets it in c, the acquire as the
// host decoded its body (kernel.DecodeCommand). given is false when the
// query has none. When the body carried waitUpToMs too, that is an error
// naming it; a command the kernel could not decode is left as it is, for
// the kernel to refuse.
func WaitUpTo(q Query, c *kernel.Command) (ms int, given bool, err error) {
	v, ok := q.Get(ParamWaitUpToMs)
	if !ok {
		return 0, false, nil
	}
	n, perr := strconv.Atoi(v)
	if perr != nil || !digits(v) || (len(v) > 1 && v[0] == '0') || n > MaxWaitUpToMs {
		return 0, false, &QueryError{ParamWaitUpToMs, "waitUpToMs must be a whole number of milliseconds from 0 to " +
			strconv.Itoa(MaxWaitUpToMs) + ", not " + strconv.Quote(v)}
	}
	if c.HasWaitUpTo {
		return 0, false, &QueryError{ParamWaitUpToMs, "waitUpToMs is given both in the query and in the body: give it once"}
	}
	if c.Invalid == "" {
		c.WaitUpToMs, c.HasWaitUpTo = int64(n), true
	}
	return n, true, nil
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// WaitUpToQuery is the query a client sends for a held request of ms
// milliseconds (capped at MaxWaitUpToMs; none for ms ≤ 0).
func WaitUpToQuery(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return "?" + ParamWaitUpToMs + "=" + strconv.FormatInt(min(ms, MaxWaitUpToMs), 10)
}
