package server

import (
	"net/http"
	"strconv"

	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// ledgerRoute answers GET /api/v1/ledger/...: the caller's workspace's
// ledger, under the same keys as the lease routes (any role: a ledger is
// readable by everyone its workspace trusts to lease); and POST
// /api/v1/ledger/exported, which records an export (a workspace or
// operator key: it lets retention drop entry bodies).
func (s *Server) ledgerRoute(w http.ResponseWriter, r *http.Request) {
	name, _ := ledger.SplitRoute(r.URL.Path)
	method := http.MethodGet
	if name == ledger.RouteExported {
		method = http.MethodPost
	}
	key, ok := methodAndKey(w, r, method, writeReply)
	if !ok {
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
		refuseKey(w, rep, writeReply)
		return
	}
	if method == http.MethodPost && k.Role == store.RoleAgent {
		writeReply(w, refusal(403, ReasonForbidden, "recording an export needs a workspace or operator key; this is an agent key"))
		return
	}
	if _, err := s.workspace(k.WorkspaceID); err != nil {
		writeReply(w, unavailable(err))
		return
	}
	// Opened at the workspace's load; again here in case that failed.
	if err := s.ledger.Workspace(k.WorkspaceID, k.Workspace); err != nil {
		writeReply(w, unavailable(err))
		return
	}
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
