package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// conns is a Client's own HTTP/1.1 connections to its plane, for the lease
// routes (acquire, release, wait), used when New is given no http.Client:
// each request is written and its answer read on the caller's goroutine,
// over a kept-alive connection from a pool, with no goroutine of its own
// per connection. net/http's client hands each request between three
// goroutines and copies it on the way; for the plane's small JSON
// exchanges that was most of a client's CPU (docs/BENCHMARKS.md, "The Go
// client's own connections").
//
// It speaks the part of HTTP/1.1 the plane's answers use and reads any
// answer a server may give: a body of Content-Length, chunked, or up to
// the connection's end; interim 1xx answers; HTTP/1.0 and Connection:
// close. A connection goes back to the pool only after its answer has been
// read whole.
type conns struct {
	addr   string      // host:port to dial
	host   string      // the Host header
	tls    *tls.Config // nil for http://
	dialer net.Dialer
	// dialTCP, when set (tests), dials instead of dialer; peekAfter is the
	// idle time after which a connection is checked before reuse
	// (peekAfterIdle; tests set 0: at each reuse).
	dialTCP   func(ctx context.Context, network, addr string) (net.Conn, error)
	peekAfter time.Duration

	mu   sync.Mutex
	idle []*conn // most recently used last
}

// maxIdleConns bounds the connections a Client keeps open while unused;
// more than that are closed as their requests end.
const maxIdleConns = 256

// peekAfterIdle is how long a connection may have been idle before it is
// checked for a close by the server (its idle timeout, a restart) before
// it is used again. The plane closes keep-alive connections after 60 s
// idle (server.DefaultIdleTimeout), proxies often after 5-60 s.
const peekAfterIdle = 500 * time.Millisecond

// tlsHandshakeTimeout bounds a TLS handshake, as http.DefaultTransport's.
const tlsHandshakeTimeout = 10 * time.Second

type conn struct {
	nc       net.Conn // the connection (a *tls.Conn for https)
	raw      net.Conn // the TCP connection under it
	br       *bufio.Reader
	wbuf     []byte    // the request being written
	idleAt   time.Time // when it went back to the pool
	deadline bool      // a deadline is set on nc
}

// newConns returns the connections for the plane at u (http or https).
func newConns(u *url.URL) *conns {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p := &conns{
		addr:      net.JoinHostPort(u.Hostname(), port),
		host:      u.Host,
		dialer:    net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		peekAfter: peekAfterIdle,
	}
	if u.Scheme == "https" {
		p.tls = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	}
	return p
}

// closeIdle closes the connections in the pool.
func (p *conns) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// get takes a live connection from the pool, or dials one; reused reports
// the first.
func (p *conns) get(ctx context.Context) (c *conn, reused bool, err error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if time.Since(c.idleAt) < p.peekAfter || c.alive() {
			return c, true, nil
		}
		c.nc.Close()
	}
	c, err = p.dial(ctx)
	return c, false, err
}

func (p *conns) dial(ctx context.Context) (*conn, error) {
	dial := p.dialTCP
	if dial == nil {
		dial = p.dialer.DialContext
	}
	raw, err := dial(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	nc := raw
	if p.tls != nil {
		tc := tls.Client(raw, p.tls)
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			raw.Close()
			return nil, err
		}
		nc = tc
	}
	return &conn{nc: nc, raw: raw, br: bufio.NewReaderSize(nc, 4096)}, nil
}

// put returns c to the pool, or closes it when the pool is full.
func (p *conns) put(c *conn) {
	c.idleAt = time.Now()
	p.mu.Lock()
	if len(p.idle) < maxIdleConns {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// errClosedBeforeAnswer is a kept-alive connection that the server closed
// before any byte of the answer came: the request may or may not have
// reached the plane, so it is not sent again.
var errClosedBeforeAnswer = errors.New("the connection was closed before any answer came (the plane may or may not have acted on the request)")

// aLongTimeAgo is a deadline in the past: it wakes a blocked read or write.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip sends one request (method, target: the path and query) with
// auth (an Authorization value, or "") and body (nil: none) and reads its
// answer. A request on a reused connection that could not be written at
// all is sent once more on a new one.
func (p *conns) roundTrip(ctx context.Context, method, target, auth string, body []byte, limit int64) (response, error) {
	if err := ctx.Err(); err != nil {
		return response{}, err
	}
	for {
		c, reused, err := p.get(ctx)
		if err != nil {
			return response{}, err
		}
		r, keep, written, err := c.exchange(ctx, p.host, method, target, auth, body, limit)
		if err == nil && keep {
			p.put(c)
		} else {
			c.nc.Close()
		}
		if err != nil && reused && !written && ctx.Err() == nil {
			continue // nothing of it reached the plane
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				err = cerr
			} else if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
				err = context.DeadlineExceeded // (the connection's deadline came first)
			}
		}
		return r, err
	}
}

// exchange writes the request on c and reads its answer; keep reports
// whether c may carry another request, written whether any byte of the
// request was written.
func (c *conn) exchange(ctx context.Context, host, method, target, auth string, body []byte, limit int64) (r response, keep, written bool, err error) {
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
		c.deadline = true
	} else if c.deadline {
		c.nc.SetDeadline(time.Time{})
		c.deadline = false
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
		defer func() {
			if !stop() {
				keep = false // the deadline may be in the past now
			}
		}()
	}
	c.wbuf = appendRequest(c.wbuf[:0], host, method, target, auth, body)
	n, err := c.nc.Write(c.wbuf)
	if err != nil {
		return response{}, false, n > 0, err
	}
	r, keep, err = readResponse(c.br, method, limit)
	if err == io.EOF { // (readResponse's io.EOF: not a byte of the answer came)
		err = errClosedBeforeAnswer
	}
	return r, keep, true, err
}

// appendRequest appends the request's bytes to b.
func appendRequest(b []byte, host, method, target, auth string, body []byte) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: "+userAgent+"\r\nAccept: application/json\r\n"...)
	if auth != "" {
		b = append(b, "Authorization: "...)
		b = append(b, auth...)
		b = append(b, "\r\n"...)
	}
	if body != nil {
		b = append(b, "Content-Type: application/json\r\n"...)
	}
	if body != nil || method == "POST" || method == "PUT" || method == "PATCH" {
		// (net/http too says a POST without a body is of length 0.)
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}

// userAgent names the client in its own connections' requests.
const userAgent = "leaseplane-go-client/1"

// maxHeaderBytes bounds an answer's status line and headers.
const maxHeaderBytes = 64 << 10

// errHeaderTooLong is an answer whose status line and headers pass
// maxHeaderBytes.
var errHeaderTooLong = fmt.Errorf("the answer's headers are over %d bytes", maxHeaderBytes)

// readResponse reads one answer to a request of method from br: the
// status, Retry-After and the body (up to limit+1 bytes: more than limit
// is an answer too long, and the connection is not kept). Interim 1xx
// answers are skipped. keep reports whether the connection may carry
// another request.
func readResponse(br *bufio.Reader, method string, limit int64) (r response, keep bool, err error) {
	var hdr int // bytes of status lines and headers read
	line := func() ([]byte, error) {
		l, err := br.ReadSlice('\n')
		hdr += len(l)
		if err == bufio.ErrBufferFull || hdr > maxHeaderBytes {
			return nil, errHeaderTooLong
		}
		if err == io.EOF && hdr > 0 {
			err = io.ErrUnexpectedEOF
		}
		return bytes.TrimRight(l, "\r\n"), err
	}
	for {
		l, err := line()
		if err != nil {
			return response{}, false, err
		}
		status, minor, err := parseStatusLine(l)
		if err != nil {
			return response{}, false, err
		}
		var (
			length     int64 = -1
			chunked    bool
			closeAfter = minor == 0
			retryAfter time.Duration
		)
		for {
			h, err := line()
			if err != nil {
				return response{}, false, err
			}
			if len(h) == 0 {
				break
			}
			name, val, ok := bytes.Cut(h, []byte(":"))
			if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
				return response{}, false, fmt.Errorf("malformed header line %q", clipBytes(h))
			}
			val = bytes.Trim(val, " \t")
			switch {
			case asciiEqualFold(name, "Content-Length"):
				n, err := strconv.ParseUint(string(val), 10, 63)
				if err != nil || length >= 0 && int64(n) != length {
					return response{}, false, fmt.Errorf("bad Content-Length %q", clipBytes(val))
				}
				length = int64(n)
			case asciiEqualFold(name, "Transfer-Encoding") && minor > 0: // (HTTP/1.0 has none)
				if !asciiEqualFold(val, "chunked") { // (as net/http, which takes no other coding)
					return response{}, false, fmt.Errorf("unsupported Transfer-Encoding %q", clipBytes(val))
				}
				chunked = true
			case asciiEqualFold(name, "Connection"):
				for _, tok := range bytes.Split(val, []byte(",")) {
					switch tok = bytes.Trim(tok, " \t"); {
					case asciiEqualFold(tok, "close"):
						closeAfter = true
					case asciiEqualFold(tok, "keep-alive") && minor == 0:
						closeAfter = false
					}
				}
			case asciiEqualFold(name, "Retry-After"):
				if n, err := strconv.Atoi(string(val)); err == nil && n >= 0 {
					retryAfter = time.Duration(n) * time.Second
				}
			}
		}
		if status >= 100 && status < 200 && status != 101 {
			continue // an interim answer; the real one follows
		}
		r = response{status: status, retryAfter: retryAfter}
		switch {
		case method == "HEAD" || status == 204 || status == 304 || status == 101:
			return r, !closeAfter && status != 101, nil
		case chunked:
			r.body, err = readAll(httputil.NewChunkedReader(br), 512, limit)
			if err == nil && int64(len(r.body)) <= limit {
				err = skipTrailer(line)
			}
			return r, err == nil && !closeAfter && int64(len(r.body)) <= limit, err
		case length >= 0:
			if length > limit {
				return response{}, false, errTooLong(limit)
			}
			r.body = make([]byte, length)
			if _, err := io.ReadFull(br, r.body); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return response{}, false, err
			}
			return r, !closeAfter, nil
		default: // the body ends with the connection
			r.body, err = readAll(br, 512, limit)
			return r, false, err
		}
	}
}

// errTooLong is an answer over limit bytes.
func errTooLong(limit int64) error {
	return fmt.Errorf("the answer is over %d bytes", limit)
}

// readAll reads rd to its end into a buffer that starts at size bytes, up
// to limit+1 bytes (more than limit: the caller's answer too long).
func readAll(rd io.Reader, size int, limit int64) ([]byte, error) {
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := b[len(b):cap(b)]
		if over := limit + 1 - int64(len(b)); int64(len(room)) > over {
			room = room[:over]
		}
		n, err := rd.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF || int64(len(b)) > limit {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// skipTrailer reads a chunked body's trailer up to its empty line.
func skipTrailer(line func() ([]byte, error)) error {
	for {
		l, err := line()
		if err != nil {
			return err
		}
		if len(l) == 0 {
			return nil
		}
	}
}

// parseStatusLine reads "HTTP/1.x NNN reason" into the status and x.
func parseStatusLine(l []byte) (status, minor int, err error) {
	if len(l) < 12 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[7] < '0' || l[7] > '9' || l[8] != ' ' ||
		len(l) > 12 && l[12] != ' ' {
		return 0, 0, fmt.Errorf("malformed status line %q", clipBytes(l))
	}
	for _, d := range l[9:12] {
		if d < '0' || d > '9' {
			return 0, 0, fmt.Errorf("malformed status line %q", clipBytes(l))
		}
		status = status*10 + int(d-'0')
	}
	if status < 100 {
		return 0, 0, fmt.Errorf("malformed status line %q", clipBytes(l))
	}
	return status, int(l[7] - '0'), nil
}

// asciiEqualFold reports whether b is s, ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func clipBytes(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
