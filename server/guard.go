package server

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of the limits that keep slow or many clients from holding the
// server (Config.BodyTimeout, Config.MaxConns).
const (
	DefaultBodyTimeout = 5 * time.Second
	DefaultMaxConns    = 1024
)

// bodyGuard bounds how long a request body may take to arrive: the
// connection's read deadline is set to BodyTimeout when the handler
// starts and cleared once the body is read (a held request, such as a
// long wait, is then not cut short). While the body is unread, Shutdown
// can expire it at once, so a stalled body never holds a shutdown.
type bodyGuard struct {
	mu       sync.Mutex
	reading  map[*guardedBody]struct{}
	stopping bool
}

// guardedBody is a request body under a read deadline.
type guardedBody struct {
	io.ReadCloser
	g    *bodyGuard
	rc   *http.ResponseController
	done bool // the deadline is cleared
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func (b *guardedBody) Close() error {
	b.release()
	return b.ReadCloser.Close()
}

// release clears the read deadline and forgets the body, once.
func (b *guardedBody) release() {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	delete(b.g.reading, b)
	if !b.g.stopping {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// wrap puts r's body under the guard; a request without a body is left as
// it is.
func (s *Server) guardBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		g := &s.bodies
		rc := http.NewResponseController(w)
		b := &guardedBody{ReadCloser: r.Body, g: g, rc: rc}
		g.mu.Lock()
		deadline := time.Now().Add(s.cfg.BodyTimeout)
		if g.stopping {
			deadline = time.Now()
		}
		// An error means a writer without deadlines (a test recorder).
		if err := rc.SetReadDeadline(deadline); err == nil {
			g.reading[b] = struct{}{}
		} else {
			b.done = true
		}
		g.mu.Unlock()
		r.Body = b
		defer b.release()
		next.ServeHTTP(w, r)
	})
}

// expireBodies makes every body still being read fail at once, and every
// later one from its start: Shutdown calls it so that a stalled body
// cannot hold the shutdown.
func (g *bodyGuard) expireBodies() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopping = true
	now := time.Now()
	for b := range g.reading {
		_ = b.rc.SetReadDeadline(now)
	}
}

// limitListener accepts at most n connections at a time; Accept waits
// while n are open, and the operating system queues further ones.
type limitListener struct {
	net.Listener
	sem    chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), closed: make(chan struct{})}
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
