package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

func (s *Server) routes() {
	for _, rt := range api.LeaseRoutes {
		s.mux.HandleExact(rt.Path, s.keyed(rt, s.leaseRoute(rt)))
	}
	s.mux.Handle(RouteEvents, s.keyed(api.Events, s.eventsRoute))
	s.mux.Handle(RouteWhoami, s.authed(api.Whoami, s.whoami))
	s.mux.HandleFunc(RouteOpenAPI, s.openapi)
	s.mux.Handle(ledger.RoutePrefix, s.ledgerRoutes())
	s.drillRoutes()
	s.detectionRoutes()
	s.mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, fromAPI(api.NotFound(r.URL.Path, api.RouteList)))
	}))
	s.mux.HandleFunc("/healthz", s.healthz)
	s.mux.Handle("/metrics", s.metricsHandler())
}

// RouteWhoami tells a key's holder what the key is: its workspace, its
// role and, for an agent key, the agent it names (the CLI's --as default).
const RouteWhoami = api.PathWhoami

func (s *Server) whoami(r *http.Request, k store.Key, _ api.Query, _ []byte) reply {
	b := append([]byte(nil), `{"ok":true,"workspace":`...)
	b = kernel.AppendQuote(b, k.Workspace)
	b = append(b, `,"role":`...)
	b = kernel.AppendQuote(b, string(k.Role))
	if k.Role == store.RoleAgent {
		b = append(b, `,"actorDid":`...)
		b = kernel.AppendQuote(b, k.AgentDID)
	}
	return reply{status: 200, answer: append(b, '}')}
}

// keyHandler answers a route for the holder of k, after authed checked
// everything the contract checks before a route's own work: q is the
// route's query, read strictly, and body the whole request body.
type keyHandler func(r *http.Request, k store.Key, q api.Query, body []byte) reply

// authed is the one wrapper of every route that takes a key and answers
// one reply (keyed's checks, then h's reply written).
func (s *Server) authed(rt api.Route, h keyHandler) http.Handler {
	return s.keyed(rt, func(w http.ResponseWriter, r *http.Request, k store.Key, q api.Query, body []byte) {
		start := time.Now()
		rep := h(r, k, q, body)
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rep.status,
				"remote", r.RemoteAddr, "us", time.Since(start).Microseconds())
		}
		writeReply(w, rep)
	})
}

// keyed is the one wrapper of every route that takes a key. In order, each
// checked once: the method (405), the bearer key, before any of the body is
// read, so a client without a key cannot hold a connection by sending a
// body slowly (401; 503 when the server is shutting down or the look-up
// failed), the key's role for the route (403), the query parameters,
// strictly (400 naming an unknown or repeated one), the body's declared
// and actual size (413) and its arrival (408). A refusal before the body
// is read closes the connection. h does the route's own work and writes
// its answer (a stream, for the events route).
func (s *Server) keyed(rt api.Route, h func(w http.ResponseWriter, r *http.Request, k store.Key, q api.Query, body []byte)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rt.Allows(r.Method) {
			w.Header().Set("Allow", rt.Method)
			writeEarly(w, fromAPI(api.MethodNotAllowed(rt, r.Method)))
			return
		}
		key, ok := api.BearerKey(r.Header.Get("Authorization"))
		if !ok {
			refuseKey(w, fromAPI(api.MalformedAuthorization()))
			return
		}
		start := time.Now()
		k, rep, ok := s.authenticateLive(r.Context(), key)
		if !ok {
			if rt.Op != "" {
				s.metrics.observe(rt.Op, rep.status, time.Since(start))
			}
			refuseKey(w, rep)
			return
		}
		if no := api.Authorize(apiKey(k), rt); no != nil {
			writeEarly(w, fromAPI(*no))
			return
		}
		q, err := api.ParseQuery(rt, r.URL.RawQuery)
		if err != nil {
			writeEarly(w, fromAPI(api.BadQuery(err)))
			return
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeEarly(w, fromAPI(api.TooLarge(s.cfg.MaxBodyBytes)))
			return
		}
		body, err := readBody(w, r, s.cfg.MaxBodyBytes)
		if err != nil {
			var tooBig *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &tooBig):
				writeEarly(w, fromAPI(api.TooLarge(s.cfg.MaxBodyBytes)))
			case s.stopping():
				writeEarly(w, unavailable(errShutdown))
			case errors.As(err, &ne) && ne.Timeout():
				writeEarly(w, fromAPI(api.Timeout(s.cfg.BodyTimeout.String())))
			default:
				writeEarly(w, fromAPI(api.Invalid("reading the request body failed: "+err.Error())))
			}
			return
		}
		h(w, r, k, q, body)
	})
}

// readBody reads r's whole body, at most max bytes. A body of declared
// length (every client of the plane sends one) goes into one buffer of its
// size, read up to its end, which the body guard sees (guardBody); one
// without a length is read through http.MaxBytesReader.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	n := r.ContentLength
	if n < 0 || n > max {
		return io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	}
	// One byte more than declared: the read goes on to the body's end.
	b := make([]byte, n+1)
	got, err := io.ReadFull(r.Body, b)
	switch {
	case err == nil: // more than declared: never from net/http, which stops there
		if n+1 > max {
			return nil, &http.MaxBytesError{Limit: max}
		}
		rest, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max-n-1))
		return append(b, rest...), err
	case errors.Is(err, io.ErrUnexpectedEOF) && int64(got) == n:
		return b[:n:n], nil
	case errors.Is(err, io.EOF) && n == 0:
		return b[:0:0], nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("the body ended after %d of its %d bytes", got, n)
	}
	return nil, err
}

// leaseRoute is the work of a lease route, after keyed: the request is
// decoded once into the kernel's command (the body, or for wait the query
// when one is given; acquire's ?waitUpToMs joins it), which run takes to
// the workspace. A held grant whose answer cannot be written (the client
// went away) is released.
func (s *Server) leaseRoute(rt api.Route) func(w http.ResponseWriter, r *http.Request, k store.Key, q api.Query, body []byte) {
	return func(w http.ResponseWriter, r *http.Request, k store.Key, q api.Query, body []byte) {
		start := time.Now()
		rep, g := s.leaseReply(r, k, rt, q, body)
		if g != nil {
			// Flushed before the handler returns, the answer would go
			// chunked, its end in a second write; with its length it is
			// one write, and the flush's error still says the client went.
			w.Header()["Content-Length"] = []string{strconv.Itoa(len(rep.answer))}
		}
		writeReply(w, rep)
		if g != nil && (r.Context().Err() != nil || http.NewResponseController(w).Flush() != nil) {
			s.releaseUndelivered(g)
		}
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rep.status,
				"remote", r.RemoteAddr, "us", time.Since(start).Microseconds())
		}
	}
}

// leaseReply decodes a lease route's request into its command and runs it.
func (s *Server) leaseReply(r *http.Request, k store.Key, rt api.Route, q api.Query, body []byte) (reply, *heldGrant) {
	if rt.Op == kernel.OpWait && r.URL.RawQuery != "" { // else the body, as the kernel reads it
		b, err := api.WaitBody(q)
		if err != nil {
			return fromAPI(api.BadQuery(err)), nil
		}
		body = b
	}
	c := kernel.DecodeCommand(rt.Op, 0, body)
	if rt.Op == kernel.OpAcquire {
		_, given, err := api.WaitUpTo(q, &c)
		if err != nil {
			return fromAPI(api.BadQuery(err)), nil
		}
		if given && c.Invalid == "" {
			body = nil // the log keeps the command as decoded, query included
		}
	}
	return s.run(r.Context(), k, c, body)
}

// open runs f while the server is open (s.life held for reading), or
// answers 503 once Shutdown has closed it.
func (s *Server) open(f func() reply) reply {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return unavailable(errShutdown)
	}
	return f()
}

// writeEarly answers before the body was read (or after reading it
// failed) and closes the connection, so that the server does not go on
// reading what is left of the body.
func writeEarly(w http.ResponseWriter, r reply) {
	w.Header().Set("Connection", "close")
	writeReply(w, r)
}

// refuseKey answers the refusal of a key (401 with WWW-Authenticate, or
// 503 when the look-up failed) before the body is read.
func refuseKey(w http.ResponseWriter, rep reply) {
	if rep.status == 401 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaseplane"`)
	}
	writeEarly(w, rep)
}

var (
	noSniff = []string{"nosniff"}
	noStore = []string{"no-store"}
)

// writeReply writes r with the headers of every reply (api.SetHeaders, the
// Workers front's too).
func writeReply(w http.ResponseWriter, r reply) {
	api.SetHeaders(w.Header(), r.contentType, r.retryAfter, r.status)
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
				writeReply(w, fromAPI(api.Internal()))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
