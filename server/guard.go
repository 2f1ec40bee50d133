package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the limits that keep slow or many clients from holding the
// server (the Config fields of the same names). docs/SERVER.md,
// "Connections", explains them for operators.
const (
	DefaultBodyTimeout    = 5 * time.Second
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultIdleTimeout    = 60 * time.Second
	DefaultUnauthTimeout  = 10 * time.Second
	DefaultWriteTimeout   = 10 * time.Second
	DefaultMaxConns       = 1024
	DefaultUnauthPerAddr  = 64
	defaultUnauthFraction = 4 // UnauthConns is MaxConns / 4 by default
)

// bodyGuard bounds how long a request body may take to arrive: the
// connection's read deadline is set to BodyTimeout when the handler
// starts. Once the body has been read to its end the deadline is lifted
// (a held request, such as a long wait, is then not cut short: nothing of
// the request is left to read). A handler that returns before the body's
// end closes the connection at once: the rest of the body is never read
// (no drain), whatever the handler answered. While a body is unread,
// Shutdown can expire it at once, so a stalled body never holds a
// shutdown.
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
	done bool // read to its end: the deadline is lifted
	off  bool // not under the guard any more (read to its end, or cut)
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// finish takes b out of the guard, once: read to its end (eof), its
// deadline is lifted; otherwise the connection's reads end now, so that
// nothing more of the body is read after the handler.
func (b *guardedBody) finish(eof bool) {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	if b.off {
		return
	}
	b.off, b.done = true, eof
	delete(b.g.reading, b)
	if eof && !b.g.stopping {
		_ = b.rc.SetReadDeadline(time.Time{})
	} else if !eof {
		_ = b.rc.SetReadDeadline(pastDeadline)
	}
}

// pastDeadline is a read deadline already passed: a read fails at once.
var pastDeadline = time.Unix(1, 0)

// guardBody puts r's body under the guard; a request without a body is
// left as it is.
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
			b.off, b.done = true, true
		}
		g.mu.Unlock()
		r.Body = b
		defer func() {
			g.mu.Lock()
			done := b.done
			g.mu.Unlock()
			if !done {
				// The handler did not read the body to its end: answer
				// without reading the rest, and close the connection
				// (net/http would otherwise read up to 256 KB more of
				// it first, before the answer leaves).
				w.Header().Set("Connection", "close")
				b.finish(false)
			}
		}()
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

// connGuard admits connections: at most maxConns at once (Accept waits
// while they are open, and the operating system queues further ones), of
// which at most maxUnauth have not yet presented a valid key, and at most
// perAddr of those from one source address. A connection counts as
// authenticated from the moment a request on it presented a valid key
// (authenticate marks it); until then every read on it has a deadline at
// most unauthTimeout away, whatever net/http asks (an idle keep-alive
// connection without a key is closed after it). When the unauthenticated
// budget is full, a new connection whose address holds less than its fair
// share of the budget takes the place of the oldest unauthenticated one of
// the address that holds the most; one whose address holds its share is
// closed at once: an attacker holding the budget from a few addresses
// cannot keep a tenant from connecting, and its reconnecting costs the
// plane an accept and a close.
// A connection past its address's share is closed at once. Every write has
// a deadline writeTimeout away, so a client that stops reading its answers
// cannot hold a connection either.
type connGuard struct {
	mu        sync.Mutex
	sem       chan struct{}
	maxUnauth int
	perAddr   int
	unauth    int
	byAddr    map[netip.Addr][]*guardConn // unauthenticated, oldest first

	unauthTimeout time.Duration
	writeTimeout  time.Duration

	refusedAddr atomic.Int64 // closed at once: its address held its share
	refusedFull atomic.Int64 // closed at once: budget full, its address held the most
	evicted     atomic.Int64 // closed to make room for a newcomer
	authed      atomic.Int64 // authenticated connections open now
}

func newConnGuard(maxConns, maxUnauth, perAddr int, unauthTimeout, writeTimeout time.Duration) *connGuard {
	return &connGuard{
		sem: make(chan struct{}, maxConns), maxUnauth: maxUnauth, perAddr: perAddr,
		byAddr: map[netip.Addr][]*guardConn{}, unauthTimeout: unauthTimeout, writeTimeout: writeTimeout,
	}
}

// unauthenticated counts the unauthenticated connections open now.
func (g *connGuard) unauthenticated() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unauth
}

// admit registers c as a new unauthenticated connection, or closes it (and
// returns nil) when its address holds its share; it may close another to
// make room.
func (g *connGuard) admit(c net.Conn) *guardConn {
	addr := remoteAddr(c)
	gc := &guardConn{Conn: c, g: g, addr: addr}
	var evict *guardConn
	g.mu.Lock()
	own := len(g.byAddr[addr])
	switch {
	case own >= g.perAddr:
		g.mu.Unlock()
		g.refusedAddr.Add(1)
		gc.refuse()
		return nil
	case g.unauth >= g.maxUnauth:
		// The budget is full: a newcomer whose address already holds its
		// fair share (the budget over the addresses holding some, its own
		// counted) is closed at once, before any goroutine or buffer is
		// spent on it. Only one below its share takes a place, that of the
		// oldest connection of the address holding the most. Addresses
		// that hold their shares so never evict each other: a reconnect
		// flood costs an accept and a close per attempt, not a connection
		// served and another evicted.
		addrs := len(g.byAddr)
		if own == 0 {
			addrs++
		}
		if own >= max(1, g.maxUnauth/addrs) {
			g.mu.Unlock()
			g.refusedFull.Add(1)
			gc.refuse()
			return nil
		}
		var most netip.Addr
		n := 0
		for a, l := range g.byAddr {
			if len(l) > n || len(l) == n && a.Less(most) {
				most, n = a, len(l)
			}
		}
		evict = g.byAddr[most][0]
		g.dropLocked(evict)
	}
	gc.tracked = true
	g.byAddr[addr] = append(g.byAddr[addr], gc)
	g.unauth++
	g.mu.Unlock()
	if evict != nil {
		g.evicted.Add(1)
		evict.Close()
	}
	return gc
}

// dropLocked takes c out of the unauthenticated budget (g.mu held).
func (g *connGuard) dropLocked(c *guardConn) {
	if !c.tracked {
		return
	}
	c.tracked = false
	g.unauth--
	l := g.byAddr[c.addr]
	for i, o := range l {
		if o == c {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(g.byAddr, c.addr)
	} else {
		g.byAddr[c.addr] = l
	}
}

func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{} // not TCP (a test's pipe): one address for all
}

// guardListener is a listener whose connections connGuard admits.
type guardListener struct {
	net.Listener
	g      *connGuard
	closed chan struct{}
	once   sync.Once
}

func (l *guardListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *guardListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.g.sem <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.g.sem
			return nil, err
		}
		if gc := l.g.admit(c); gc != nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetKeepAliveConfig(keepAlive)
			}
			return gc, nil
		}
	}
}

// keepAlive is the TCP keep-alive of an admitted connection: Go's
// defaults, which a listener from Listen leaves off until admission.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// Listen listens on the TCP address addr for Serve. Its connections get
// no socket options when accepted: the guard sets TCP keep-alive on those
// it admits, so that one it closes at once (a reconnect flood's) costs an
// accept and a close, not the four system calls of keep-alive too.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}

// guardConn is an admitted connection.
type guardConn struct {
	net.Conn
	g    *connGuard
	addr netip.Addr

	// tracked: counted in the unauthenticated budget (g.mu).
	tracked bool

	mu     sync.Mutex
	authed bool
	want   time.Time // the read deadline last asked for
	once   sync.Once
}

// refuse closes a connection that was never admitted.
func (c *guardConn) refuse() {
	c.once.Do(func() {
		c.Conn.Close()
		<-c.g.sem
	})
}

func (c *guardConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.dropLocked(c)
		c.g.mu.Unlock()
		c.mu.Lock()
		if c.authed {
			c.g.authed.Add(-1)
		}
		c.mu.Unlock()
		<-c.g.sem
	})
	return err
}

// SetReadDeadline sets the read deadline asked for; on a connection that
// has not presented a valid key, at most the unauthenticated timeout away.
func (c *guardConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = t
	return c.Conn.SetReadDeadline(c.capLocked(t))
}

func (c *guardConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *guardConn) capLocked(t time.Time) time.Time {
	if c.authed {
		return t
	}
	limit := time.Now().Add(c.g.unauthTimeout)
	if t.IsZero() || t.After(limit) {
		return limit
	}
	return t
}

// Write writes p with a deadline writeTimeout away.
func (c *guardConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.g.writeTimeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// authenticate counts c as authenticated from now on: it leaves the
// unauthenticated budget and the read deadline asked for applies uncapped.
func (c *guardConn) authenticate() {
	c.mu.Lock()
	if c.authed {
		c.mu.Unlock()
		return
	}
	c.authed = true
	c.g.authed.Add(1)
	_ = c.Conn.SetReadDeadline(c.want)
	c.mu.Unlock()
	c.g.mu.Lock()
	c.g.dropLocked(c)
	c.g.mu.Unlock()
}

type connCtxKey struct{}

// withConn is the http.Server's ConnContext: each request's context
// carries its connection, so that a valid key can mark it authenticated.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if gc, ok := c.(*guardConn); ok {
		return context.WithValue(ctx, connCtxKey{}, gc)
	}
	return ctx
}

// markAuthenticated marks the connection of the request whose context is
// ctx authenticated (nothing for a call that came another way).
func markAuthenticated(ctx context.Context) {
	if gc, ok := ctx.Value(connCtxKey{}).(*guardConn); ok {
		gc.authenticate()
	}
}
