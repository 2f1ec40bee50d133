package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/store"
)

// Reasons the server itself answers with (the contract's, package
// kernel/api; the kernel's are in kernel).
const (
	ReasonUnauthorized     = api.ReasonUnauthorized
	ReasonActorMismatch    = api.ReasonActorMismatch
	ReasonForbidden        = api.ReasonForbidden
	ReasonUnavailable      = api.ReasonUnavailable
	ReasonTooLarge         = api.ReasonTooLarge
	ReasonTimeout          = api.ReasonTimeout
	ReasonNotFound         = api.ReasonNotFound
	ReasonMethodNotAllowed = api.ReasonMethodNotAllowed
	ReasonInternal         = api.ReasonInternal
)

// reply is a decided answer with the header the REST route adds.
type reply struct {
	status      int
	retryAfter  int
	answer      []byte
	contentType string // "" for JSON
}

// fromAPI is the contract's reply as the server's.
func fromAPI(r api.Reply) reply {
	return reply{status: r.Status, retryAfter: r.RetryAfter, answer: r.Body}
}

// apiKey is what the contract's role rules need of a key.
func apiKey(k store.Key) api.Key {
	return api.Key{Role: api.Role(k.Role), AgentDID: k.AgentDID}
}

// Call runs one command for the holder of key (the bearer key without
// "Bearer "), exactly as the REST route does after parsing HTTP: 401
// unauthorized for a missing, unknown or revoked key; 403 actor_mismatch
// when an agent key names another actorDid; 403 forbidden for suspend and
// resume without an operator key; then the command is applied in the key's
// workspace and made durable before the answer is returned; 503
// unavailable when that fails (nothing is granted). answer is the JSON
// body. err is nil whenever there is an answer, even a 503; it is ctx's
// error when ctx ended before the command was applied.
func (s *Server) Call(ctx context.Context, key string, op kernel.Op, body []byte) (status int, answer []byte, err error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	start := time.Now()
	k, r, ok := s.authenticateLive(ctx, key)
	if !ok {
		s.metrics.observe(op, r.status, time.Since(start))
		return r.status, r.answer, nil
	}
	r = s.run(ctx, k, op, body)
	return r.status, r.answer, nil
}

// run is the one path of a command for an authenticated key, for the REST
// routes (after authed), MCP and Server.Call alike: decided while the
// server is open (503 once it closed), and counted in the metrics. A held
// acquire takes callHeld, which decides on this path's decide.
func (s *Server) run(ctx context.Context, k store.Key, op kernel.Op, body []byte) reply {
	start := time.Now()
	r := s.open(func() reply {
		r, _ := s.decide(ctx, k, op, body, nil)
		return r
	})
	s.metrics.observe(op, r.status, time.Since(start))
	return r
}

// stopping reports whether Shutdown has begun.
func (s *Server) stopping() bool {
	s.bodies.mu.Lock()
	defer s.bodies.mu.Unlock()
	return s.bodies.stopping
}

// authenticateLive is authenticate while the server is open.
func (s *Server) authenticateLive(ctx context.Context, key string) (store.Key, reply, bool) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return store.Key{}, unavailable(errShutdown), false
	}
	return s.authenticate(ctx, key)
}

// decide applies one command for the holder of k; s.life is held for
// reading and the server is open. It also returns a channel closed at the
// workspace's next change that may free a resource after this command (nil
// when the command never reached the workspace). A held request passes its
// heldAsk h, which records the ask (nil otherwise); when it is not h's turn
// to ask, nothing is applied and h.again is set.
func (s *Server) decide(ctx context.Context, k store.Key, op kernel.Op, body []byte, h *heldAsk) (reply, <-chan struct{}) {
	rt, ok := api.RouteOf(op)
	if !ok {
		return fromAPI(api.Invalid("op must be acquire, release, wait, suspend, resume or forget")), nil
	}
	// The key's role for the op; an agent key's actorDid, read with the
	// kernel's own decoding (for other keys the engine's decoding refuses
	// bad input with the same answer).
	if no := api.Admit(apiKey(k), rt, body); no != nil {
		return fromAPI(*no), nil
	}
	ws, err := s.workspace(k.WorkspaceID)
	if err != nil {
		s.log.Error("workspace unavailable", "workspace", k.Workspace, "err", err)
		return unavailable(err), nil
	}
	ws.mu.Lock()
	if h != nil && !ws.mayAskLocked(h) {
		// A wake came after h's turn: it waits for its turn again.
		ws.mu.Unlock()
		h.again = true
		return reply{}, nil
	}
	a := s.applyLocked(ws, op, body) // never panics
	changed := ws.changedLocked()
	if h != nil {
		ws.askedLocked(h, a.res)
	}
	ws.mu.Unlock()
	if err := a.wait(); err != nil {
		return unavailable(err), nil
	}
	return reply{status: a.res.Status, retryAfter: a.res.RetryAfterSec, answer: a.res.Answer}, changed
}

func refusal(status int, reason, msg string) reply {
	return fromAPI(api.Refusal(status, reason, msg))
}

func unavailable(err error) reply {
	what := ""
	if err != nil {
		what = err.Error()
	}
	return fromAPI(api.Unavailable(what))
}

// Authenticate checks key as every route does before it reads a request:
// ok, or the refusal to answer (401 unauthorized, 503 unavailable). The
// MCP handler calls it before any MCP processing.
func (s *Server) Authenticate(ctx context.Context, key string) (status int, answer []byte, ok bool) {
	_, r, ok := s.authenticateLive(ctx, key)
	return r.status, r.answer, ok
}

// keyCache remembers keys looked up in the store for a while. Every entry
// carries the key epoch at which its look-up began; an entry of an older
// epoch is not trusted, so a revocation, which raises the epoch, takes
// effect for every cached key at once.
type keyCache struct {
	mu      sync.RWMutex
	entries map[string]keyEntry
	epoch   atomic.Int64 // the newest key epoch seen in the store
}

type keyEntry struct {
	key     store.Key
	checked time.Time
	epoch   int64
}

func (s *Server) authenticate(ctx context.Context, key string) (store.Key, reply, bool) {
	if key == "" {
		return store.Key{}, fromAPI(api.MissingKey()), false
	}
	bad := func() reply { return fromAPI(api.BadKey()) }
	if !api.WellFormedKey(key) || !strings.HasPrefix(key, store.KeyPrefix) {
		return store.Key{}, bad(), false
	}
	now := time.UnixMilli(s.nowMs())
	epoch := s.keys.epoch.Load()
	s.keys.mu.RLock()
	e, hit := s.keys.entries[key]
	s.keys.mu.RUnlock()
	if hit && e.epoch == epoch && now.Sub(e.checked) < s.cfg.KeyCacheTTL && now.Sub(e.checked) >= 0 {
		markAuthenticated(ctx)
		return e.key, reply{}, true
	}
	k, found, err := s.store.LookupKey(ctx, key)
	if err != nil {
		s.log.Error("key look-up failed", "err", err)
		return store.Key{}, unavailable(errors.New("key look-up failed")), false
	}
	if !found || k.RevokedMs != 0 {
		if hit {
			s.keys.mu.Lock()
			delete(s.keys.entries, key)
			s.keys.mu.Unlock()
		}
		return store.Key{}, bad(), false
	}
	s.keys.mu.Lock()
	if len(s.keys.entries) > 100000 {
		clear(s.keys.entries)
	}
	s.keys.entries[key] = keyEntry{key: k, checked: now, epoch: epoch}
	s.keys.mu.Unlock()
	markAuthenticated(ctx)
	return k, reply{}, true
}

// DefaultKeyPoll is how often a server reads the store's key epoch when
// Config.KeyPoll is 0: a revocation made by another process (leaseplane
// keys revoke) takes effect within it.
const DefaultKeyPoll = 50 * time.Millisecond

// RevokeKey revokes a key (by id, or the key itself) and stops accepting it
// at once: no request that starts after RevokeKey returns is accepted
// with it.
func (s *Server) RevokeKey(ctx context.Context, idOrKey string) (store.Key, error) {
	k, err := s.store.RevokeKey(idOrKey, s.nowMs())
	if err != nil {
		return k, err
	}
	return k, s.syncKeyEpoch(ctx)
}

// syncKeyEpoch reads the store's key epoch; when it rose, cached keys stop
// being trusted and the epoch is acknowledged in the store (leaseplane keys
// revoke waits for that).
func (s *Server) syncKeyEpoch(ctx context.Context) error {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	epoch, applied, err := s.store.KeyEpochs(ctx)
	if err != nil {
		return err
	}
	if epoch != s.keys.epoch.Load() {
		s.keys.epoch.Store(epoch)
		s.keys.mu.Lock()
		clear(s.keys.entries)
		s.keys.mu.Unlock()
		// The requests held for a revoked key end now, before the
		// revocation is acknowledged.
		s.endRevokedHeld(ctx)
	}
	if applied < epoch {
		return s.store.AckKeyEpoch(epoch)
	}
	return nil
}

// watchKeys runs syncKeyEpoch every Config.KeyPoll until stop closes.
func (s *Server) watchKeys(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.KeyPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := s.syncKeyEpoch(context.Background()); err != nil {
				s.log.Warn("reading the key epoch failed; will try again", "err", err)
			}
		}
	}
}
