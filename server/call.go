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
// unauthorized for a missing, unknown or revoked key; 403 forbidden for
// suspend, resume and forget without an operator key; the body decoded
// once into the kernel's command; 403 actor_mismatch when an agent key
// names another actorDid; then the command is applied in the key's
// workspace and made durable before the answer is returned (an acquire
// with waitUpToMs in its body is held, as CallWaiting); 503 unavailable
// when that fails (nothing is granted). answer is the JSON body. err is
// nil whenever there is an answer, even a 503; it is ctx's error when ctx
// ended before the command was applied.
func (s *Server) Call(ctx context.Context, key string, op kernel.Op, body []byte) (status int, answer []byte, err error) {
	return s.call(ctx, key, op, body, -1)
}

// CallWaiting is Call for an acquire held up to waitUpTo (at most
// api.MaxWaitUpToMs; the body carries no waitUpToMs of its own): MCP's
// acquire with waitUpToMs. A held request ends when ctx does, its ask
// cancelled.
func (s *Server) CallWaiting(ctx context.Context, key string, body []byte, waitUpTo time.Duration) (status int, answer []byte, err error) {
	return s.call(ctx, key, kernel.OpAcquire, body, min(waitUpTo.Milliseconds(), api.MaxWaitUpToMs))
}

// call is Call and CallWaiting: waitMs, when 0 or more, is the acquire's
// waitUpToMs given beside the body.
func (s *Server) call(ctx context.Context, key string, op kernel.Op, body []byte, waitMs int64) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	start := time.Now()
	k, r, ok := s.authenticateLive(ctx, key)
	if !ok {
		s.metrics.observe(op, r.status, time.Since(start))
		return r.status, r.answer, nil
	}
	rt, ok := api.RouteOf(op)
	if !ok {
		r = fromAPI(api.Invalid("op must be acquire, release, wait, suspend, resume or forget"))
		return r.status, r.answer, nil
	}
	if no := api.Authorize(apiKey(k), rt); no != nil {
		return no.Status, no.Body, nil
	}
	c := kernel.DecodeCommand(op, 0, body)
	if waitMs >= 0 && c.Invalid == "" {
		c.WaitUpToMs, c.HasWaitUpTo, body = waitMs, true, nil
	}
	r, _ = s.run(ctx, k, c, body)
	return r.status, r.answer, nil
}

// run is the one path of a decoded command for an authenticated key whose
// role the route admits, for the REST routes, MCP and Server.Call alike:
// an agent key's actorDid checked, then one step in the key's workspace
// while the server is open (503 once it closed), counted in the metrics.
// A held acquire (waitUpToMs above 0) takes runHeld, which returns, for a
// grant, the lease to release if the answer cannot be delivered. body is
// what the log keeps (applyLocked).
func (s *Server) run(ctx context.Context, k store.Key, c kernel.Command, body []byte) (reply, *heldGrant) {
	if c.Invalid == "" && c.Op != kernel.OpWait {
		if no := api.AuthorizeActor(apiKey(k), c.ActorDid); no != nil {
			return fromAPI(*no), nil
		}
	}
	if c.Op == kernel.OpAcquire && c.WaitUpToMs > 0 && c.Invalid == "" {
		return s.runHeld(ctx, k, c, body)
	}
	start := time.Now()
	r := s.open(func() reply { return s.decide(k, c, body) })
	s.metrics.observe(c.Op, r.status, time.Since(start))
	return r, nil
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

// decide applies one command for the holder of k and waits until its
// answer is durable; s.life is held for reading and the server is open.
func (s *Server) decide(k store.Key, c kernel.Command, body []byte) reply {
	ws, err := s.workspace(k.WorkspaceID)
	if err != nil {
		s.log.Error("workspace unavailable", "workspace", k.Workspace, "err", err)
		return unavailable(err)
	}
	ws.mu.Lock()
	a := s.applyLocked(ws, c, body) // never panics
	ws.mu.Unlock()
	if err := a.wait(); err != nil {
		return unavailable(err)
	}
	return reply{status: a.rd.Status, retryAfter: a.rd.RetryAfterSec, answer: a.rd.Answer}
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
