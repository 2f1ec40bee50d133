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
type routeMux struct {
	*http.ServeMux
	mu       sync.Mutex
	patterns []string
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
