package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server/httparg"
	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// The routes.
const (
	RouteLease   = "/api/v1/acp/coordination/lease"
	RouteRelease = "/api/v1/acp/coordination/release"
	RouteWait    = "/api/v1/acp/coordination/wait"
	RouteSuspend = "/api/v1/acp/operator/suspend"
	RouteResume  = "/api/v1/acp/operator/resume"
	RouteForget  = "/api/v1/acp/operator/forget"
)

func (s *Server) routes() {
	s.mux.Handle(RouteLease, s.route(http.MethodPost, kernel.OpAcquire))
	s.mux.Handle(RouteRelease, s.route(http.MethodPost, kernel.OpRelease))
	s.mux.Handle(RouteWait, s.route(http.MethodGet, kernel.OpWait))
	s.mux.Handle(RouteSuspend, s.route(http.MethodPost, kernel.OpSuspend))
	s.mux.Handle(RouteResume, s.route(http.MethodPost, kernel.OpResume))
	s.mux.Handle(RouteForget, s.route(http.MethodPost, kernel.OpForget))
	s.mux.HandleFunc(RouteEvents, s.eventsRoute)
	s.mux.HandleFunc(RouteWhoami, s.whoami)
	s.mux.HandleFunc(RouteOpenAPI, s.openapi)
	s.mux.HandleFunc(ledger.RoutePrefix, s.ledgerRoute)
	s.drillRoutes()
	s.detectionRoutes()
	s.mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, refusal(404, ReasonNotFound, "no route "+r.URL.Path+"; the routes are "+
			RouteLease+", "+RouteRelease+", "+RouteWait+", "+RouteEvents+", "+RouteSuspend+", "+RouteResume+" and "+RouteForget))
	}))
	s.mux.HandleFunc("/healthz", s.healthz)
	s.mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
}

// RouteWhoami tells a key's holder what the key is: its workspace, its
// role and, for an agent key, the agent it names (the CLI's --as default).
const RouteWhoami = "/api/v1/whoami"

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	key, ok := methodAndKey(w, r, http.MethodGet, writeEarly)
	if !ok {
		return
	}
	k, rep, ok := s.authenticateLive(r.Context(), key)
	if !ok {
		refuseKey(w, rep, writeEarly)
		return
	}
	b := append([]byte(nil), `{"ok":true,"workspace":`...)
	b = kernel.AppendQuote(b, k.Workspace)
	b = append(b, `,"role":`...)
	b = kernel.AppendQuote(b, string(k.Role))
	if k.Role == store.RoleAgent {
		b = append(b, `,"actorDid":`...)
		b = kernel.AppendQuote(b, k.AgentDID)
	}
	writeReply(w, reply{status: 200, answer: append(b, '}')})
}

// route answers one lease route: method check, bearer key (checked before
// any of the body is read, so a client without a key cannot hold a
// connection by sending a body slowly), the body's declared and actual
// size, then Call's path.
func (s *Server) route(method string, op kernel.Op) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := methodAndKey(w, r, method, writeEarly)
		if !ok {
			return
		}
		start := time.Now()
		k, rep, ok := s.authenticateLive(r.Context(), key)
		if !ok {
			s.metrics.observe(op, rep.status, time.Since(start))
			refuseKey(w, rep, writeEarly)
			return
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeEarly(w, tooLarge(s.cfg.MaxBodyBytes))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &tooBig):
				writeEarly(w, tooLarge(s.cfg.MaxBodyBytes))
			case s.stopping():
				writeEarly(w, unavailable(errShutdown))
			case errors.As(err, &ne) && ne.Timeout():
				writeEarly(w, refusal(408, ReasonTimeout, "the request body did not arrive within "+s.cfg.BodyTimeout.String()))
			default:
				writeEarly(w, refusal(400, kernel.ReasonInvalid, "reading the request body failed: "+err.Error()))
			}
			return
		}
		if op == kernel.OpWait && r.URL.RawQuery != "" {
			if body, err = httparg.WaitBody(r.URL.Query()); err != nil {
				writeReply(w, refusal(400, kernel.ReasonInvalid, err.Error()))
				return
			}
		}
		if waitUpTo := r.URL.Query().Get("waitUpToMs"); op == kernel.OpAcquire && waitUpTo != "" {
			d, err := ParseWaitUpTo(waitUpTo)
			if err != nil {
				writeReply(w, refusal(400, kernel.ReasonInvalid, err.Error()))
				return
			}
			rep = s.callHeld(r.Context(), k, body, d)
		} else {
			rep = s.callAs(r.Context(), k, op, body, start)
		}
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rep.status,
				"remote", r.RemoteAddr, "us", time.Since(start).Microseconds())
		}
		writeReply(w, rep)
	})
}

func tooLarge(max int64) reply {
	return refusal(413, ReasonTooLarge, "the request body is larger than "+strconv.FormatInt(max, 10)+" bytes")
}

// writeEarly answers before the body was read (or after reading it
// failed) and closes the connection, so that the server does not go on
// reading what is left of the body.
func writeEarly(w http.ResponseWriter, r reply) {
	w.Header().Set("Connection", "close")
	writeReply(w, r)
}

// methodAndKey checks r's method (HEAD passes where GET is asked) and
// takes its bearer key; when it refuses (405, 401) it has answered with
// write, and ok is false.
func methodAndKey(w http.ResponseWriter, r *http.Request, method string, write func(http.ResponseWriter, reply)) (key string, ok bool) {
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		write(w, refusal(405, ReasonMethodNotAllowed, r.URL.Path+" takes "+method+", not "+r.Method))
		return "", false
	}
	if key, ok = httparg.BearerKey(r.Header.Get("Authorization")); !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
		write(w, refusal(401, ReasonUnauthorized, "the Authorization header must be Bearer KEY"))
	}
	return key, ok
}

// refuseKey answers the refusal of a key (401 with WWW-Authenticate, or
// 503 when the look-up failed) with write.
func refuseKey(w http.ResponseWriter, rep reply, write func(http.ResponseWriter, reply)) {
	if rep.status == 401 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
	}
	write(w, rep)
}

var (
	jsonType   = []string{"application/json"}
	noSniff    = []string{"nosniff"}
	noStore    = []string{"no-store"}
	retryAfter = [...][]string{{"0"}, {"1"}}
)

func writeReply(w http.ResponseWriter, r reply) {
	h := w.Header()
	h["Content-Type"] = jsonType
	h["X-Content-Type-Options"] = noSniff
	h["Cache-Control"] = noStore
	if r.retryAfter > 0 {
		if r.retryAfter < len(retryAfter) {
			h["Retry-After"] = retryAfter[r.retryAfter]
		} else {
			h.Set("Retry-After", strconv.Itoa(r.retryAfter))
		}
	}
	w.WriteHeader(r.status)
	w.Write(r.answer)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	s.life.RLock()
	closed := s.closed
	s.life.RUnlock()
	s.wsMu.RLock()
	n := len(s.workspaces)
	s.wsMu.RUnlock()
	var err error
	if closed {
		err = errShutdown
	} else {
		err = s.store.Ping(ctx)
	}
	if err != nil {
		writeReply(w, unavailable(err))
		return
	}
	b := append([]byte(nil), `{"ok":true,"engine":`...)
	b = kernel.AppendQuote(b, s.engine.Name())
	b = append(b, `,"kernel":`...)
	b = kernel.AppendQuote(b, kernel.Version)
	b = append(b, `,"workspaces":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	writeReply(w, reply{status: 200, answer: append(b, '}')})
}

// securityHeaders gives every answer headers that refuse framing,
// content sniffing, Referer leaks and any active content: the API answers
// JSON, which no browser should run or frame. Handlers that serve pages
// (package web) set a policy of their own over this one.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Security-Policy"] = apiCSP
		h["X-Frame-Options"] = frameDeny
		h["Referrer-Policy"] = noReferrer
		h["X-Content-Type-Options"] = noSniff
		next.ServeHTTP(w, r)
	})
}

var (
	apiCSP     = []string{"default-src 'none'; frame-ancestors 'none'"}
	frameDeny  = []string{"DENY"}
	noReferrer = []string{"no-referrer"}
)

// recoverer answers a panicking handler 500 with a JSON body instead of
// dropping the connection, and logs it.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panicked", "path", r.URL.Path, "panic", v)
				writeReply(w, refusal(500, ReasonInternal, "the server failed on this request; it is logged"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
