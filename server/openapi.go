package server

import (
	"net/http"
	"slices"
	"sync"

	"github.com/leaseplane/leaseplane/kernel/api"
)

// RouteOpenAPI serves api.OpenAPI, with no key.
const RouteOpenAPI = api.PathOpenAPI

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		writeEarly(w, refusal(405, api.ReasonMethodNotAllowed, r.URL.Path+" takes GET, not "+r.Method))
		return
	}
	writeReply(w, reply{status: 200, answer: api.OpenAPI})
}

// routeMux is the server's ServeMux that also remembers the patterns
// registered on it, so that a test can hold the OpenAPI document to them.
// The lease routes, which every acquire and release takes, are also found
// by their exact path in a map (HandleExact), ahead of the ServeMux's
// pattern matching: the mux's look-up was 2 % of the server's CPU in
// spread (docs/BENCHMARKS.md "Server load").
type routeMux struct {
	*http.ServeMux
	mu       sync.Mutex
	patterns []string
	exact    map[string]http.Handler // written before the server serves
}

// HandleExact registers h at path, a clean path with no method, host or
// wildcard, on the mux and in the map of exact paths.
func (m *routeMux) HandleExact(path string, h http.Handler) {
	m.Handle(path, h)
	if m.exact == nil {
		m.exact = map[string]http.Handler{}
	}
	m.exact[path] = h
}

// ServeHTTP answers a request for an exact path as the ServeMux would:
// the ServeMux matches a pattern of a clean path without wildcards to that
// path alone, whatever the method and host, and sets the request's Pattern
// to it. A request whose path was escaped (RawPath set), a CONNECT or any
// other path goes to the ServeMux, which cleans, redirects and matches.
func (m *routeMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m.exact[r.URL.Path]; ok && r.URL.RawPath == "" && r.Method != http.MethodConnect && r.RequestURI != "*" {
		r.Pattern = r.URL.Path
		h.ServeHTTP(w, r)
		return
	}
	m.ServeMux.ServeHTTP(w, r)
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.ServeMux.Handle(pattern, h)
	m.mu.Lock()
	m.patterns = append(m.patterns, pattern)
	m.mu.Unlock()
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Patterns are the patterns registered on the server's mux (its own routes
// and what was mounted with Handle), sorted.
func (s *Server) Patterns() []string {
	s.mux.mu.Lock()
	defer s.mux.mu.Unlock()
	p := slices.Clone(s.mux.patterns)
	slices.Sort(p)
	return p
}
