package server

import (
	"net/http"

	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// ledgerRoutes answers /api/v1/ledger/...: each route of the contract's
// api.LedgerRoutes behind authed (GET for any key of the workspace: a
// ledger is readable by everyone its workspace trusts to lease; POST
// exported, which records an export and lets retention drop entry bodies,
// for an operator key only: the root it needs is public in every
// checkpoint), and 404 for any other path there.
func (s *Server) ledgerRoutes() http.Handler {
	hs := map[string]http.Handler{}
	for _, rt := range api.LedgerRoutes {
		name, _ := ledger.SplitRoute(rt.Path)
		hs[rt.Path] = s.authed(rt, func(r *http.Request, k store.Key, q api.Query, _ []byte) reply {
			return s.ledgerRoute(r, k, name, q)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := hs[r.URL.Path]
		if !ok {
			writeReply(w, fromAPI(api.NotFound(r.URL.Path, api.LedgerRouteList)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) ledgerRoute(r *http.Request, k store.Key, name string, q api.Query) reply {
	if s.ledger == nil {
		return refusal(404, api.ReasonNotFound, "this server runs without a ledger")
	}
	if _, err := s.workspace(k.WorkspaceID); err != nil {
		return unavailable(err)
	}
	// Opened at the workspace's load; again here in case that failed.
	if err := s.ledger.Workspace(k.WorkspaceID, k.Workspace); err != nil {
		return unavailable(err)
	}
	lr := s.ledger.Route(r.Context(), k.WorkspaceID, name, q.Values())
	return reply{status: lr.Status, retryAfter: lr.RetryAfter, answer: lr.Body, contentType: lr.ContentType}
}
