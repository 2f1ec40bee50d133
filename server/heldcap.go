package server

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/store"
)

// Defaults of the caps on open held requests (Config.MaxHeld,
// Config.MaxHeldPerKey): plane-wide half the connection cap, so that held
// requests never take every connection, and per key a share of that.
const (
	DefaultMaxHeldPerKey = 32
	defaultHeldFraction  = 2 // MaxHeld is MaxConns / 2 by default
)

// LimitHeldRequests names the cap on open held requests in a 429
// limit_exceeded refusal.
const LimitHeldRequests = "heldRequests"

// errKeyRevoked ends the context of a request held for a key that was
// revoked meanwhile.
var errKeyRevoked = errors.New("the key was revoked while the request was held")

// heldRequests counts the open held requests (REST ?waitUpToMs and MCP
// held acquires) plane-wide and per key, and ends those of a revoked key.
// It sits in front of whatever holds the request, so the caps and the
// revocation hold however the waiting is done.
type heldRequests struct {
	mu        sync.Mutex
	max       int
	maxPerKey int
	perKey    map[string]int // by key id
	open      map[*heldSlot]struct{}
	refused   int64
}

// heldSlot is one open held request.
type heldSlot struct {
	keyID     string
	workspace string // the key's, to look the key up again after a revocation
	cancel    context.CancelCauseFunc
}

// hold takes a slot for a held request by k and returns the context to hold it under (ended, with cause errKeyRevoked,
// when the key is revoked) and a function to call when it is answered; or
// the 429 refusal when a cap is reached.
func (s *Server) hold(ctx context.Context, k store.Key) (context.Context, func(), reply, bool) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	max, limit := h.max, "open held requests in the plane"
	if len(h.open) < h.max {
		max, limit = h.maxPerKey, "open held requests of one key"
		if h.perKey[k.ID] < h.maxPerKey {
			ctx, cancel := context.WithCancelCause(ctx)
			sl := &heldSlot{keyID: k.ID, workspace: k.Workspace, cancel: cancel}
			h.open[sl] = struct{}{}
			h.perKey[k.ID]++
			done := func() {
				cancel(nil)
				h.mu.Lock()
				delete(h.open, sl)
				if h.perKey[sl.keyID]--; h.perKey[sl.keyID] <= 0 {
					delete(h.perKey, sl.keyID)
				}
				h.mu.Unlock()
			}
			return ctx, done, reply{}, true
		}
	}
	h.refused++
	b := append([]byte(nil), `{"ok":false,"reason":"limit_exceeded","limit":"`+LimitHeldRequests+`","max":`...)
	b = strconv.AppendInt(b, int64(max), 10)
	b = append(b, `,"error":`...)
	b = kernel.AppendQuote(b, "too many "+limit+" (at most "+strconv.Itoa(max)+"); ask without waitUpToMs, or once one is answered")
	return ctx, nil, reply{status: 429, retryAfter: 1, answer: append(b, '}')}, false
}

// endRevokedHeld ends the held requests whose key is no longer valid (a
// revocation raised the key epoch): each is answered 401.
func (s *Server) endRevokedHeld(ctx context.Context) {
	h := &s.held
	h.mu.Lock()
	byWorkspace := map[string][]*heldSlot{}
	for sl := range h.open {
		byWorkspace[sl.workspace] = append(byWorkspace[sl.workspace], sl)
	}
	h.mu.Unlock()
	for ws, sls := range byWorkspace {
		keys, err := s.store.Keys(ws)
		if err != nil {
			s.log.Warn("looking up the keys of held requests failed; they stay held", "workspace", ws, "err", err)
			continue
		}
		valid := map[string]bool{}
		for _, k := range keys {
			valid[k.ID] = k.RevokedMs == 0
		}
		for _, sl := range sls {
			if !valid[sl.keyID] {
				sl.cancel(errKeyRevoked)
			}
		}
	}
}

// heldOpen counts the open held requests (for tests and metrics).
func (h *heldRequests) heldOpen() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open)
}

// refusedCount counts the held requests refused at a cap so far.
func (h *heldRequests) refusedCount() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused
}
