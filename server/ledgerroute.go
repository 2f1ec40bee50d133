package server

import (
	"net/http"
	"strconv"

	"github.com/leaseplane/leaseplane/server/ledger"
)

// ledgerRoute answers GET /api/v1/ledger/...: the caller's workspace's
// ledger, under the same keys as the lease routes (any role: a ledger is
// readable by everyone its workspace trusts to lease).
func (s *Server) ledgerRoute(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		writeReply(w, refusal(405, ReasonMethodNotAllowed, r.URL.Path+" takes GET, not "+r.Method))
		return
	}
	key, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
		writeReply(w, refusal(401, ReasonUnauthorized, "the Authorization header must be Bearer KEY"))
		return
	}
	s.life.RLock()
	closed := s.closed
	s.life.RUnlock()
	if closed {
		writeReply(w, unavailable(errShutdown))
		return
	}
	if s.ledger == nil {
		writeReply(w, refusal(404, ReasonNotFound, "this server runs without a ledger"))
		return
	}
	k, rep, ok := s.authenticate(r.Context(), key)
	if !ok {
		if rep.status == 401 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
		}
		writeReply(w, rep)
		return
	}
	if _, err := s.workspace(k.WorkspaceID); err != nil {
		writeReply(w, unavailable(err))
		return
	}
	name, _ := ledger.SplitRoute(r.URL.Path)
	lr := s.ledger.Route(r.Context(), k.WorkspaceID, name, r.URL.Query())
	h := w.Header()
	h.Set("Content-Type", lr.ContentType)
	h["X-Content-Type-Options"] = noSniff
	h["Cache-Control"] = noStore
	if lr.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(lr.RetryAfter))
	}
	w.WriteHeader(lr.Status)
	w.Write(lr.Body)
}
