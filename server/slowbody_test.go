package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// listening starts a server on 127.0.0.1:0 with cfg's limits and returns
// it, its address and its workspace key.
func listening(t *testing.T, cfg Config) (*Server, string, string) {
	t.Helper()
	clock := servertest.NewClock()
	cfg.DataDir = t.TempDir()
	cfg.Engine = kernel.Native
	cfg.Clock = clock.Now
	cfg.AfterFunc = clock.AfterFunc
	s := mustNew(t, cfg)
	key := mustBootstrap(t, s, "default")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s, ln.Addr().String(), key
}

// halfSent opens a connection and sends a lease request's headers with
// Content-Length cl but only the first byte of its body.
func halfSent(t *testing.T, addr, key string, cl int64) net.Conn {
	t.Helper()
	return halfSentFrom(t, "127.0.0.1", addr, key, cl)
}

// halfSentFrom is halfSent from the local address ip.
func halfSentFrom(t *testing.T, ip, addr, key string, cl int64) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", api.PathLease, key, cl)
	return c
}

// answer reads one HTTP response from c, failing the test when none comes
// within limit (a guard against a hang, not a measurement).
func answer(t *testing.T, c net.Conn, limit time.Duration) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return resp, b.String()
}

// TestSlowBodies: a half-sent body never holds a connection for long, nor
// a shutdown, and a bogus key or an oversized Content-Length is answered
// before the body is read at all.
func TestSlowBodies(t *testing.T) {
	t.Run("bogus key answered before the body", func(t *testing.T) {
		_, addr, _ := listening(t, Config{BodyTimeout: time.Hour})
		c := halfSent(t, addr, "lp_bogus", 100)
		resp, body := answer(t, c, 20*time.Second)
		if resp.StatusCode != 401 || !strings.Contains(body, `"unauthorized"`) || !resp.Close {
			t.Fatalf("got %d close=%v %s; want 401 unauthorized and the connection closed", resp.StatusCode, resp.Close, body)
		}
	})
	t.Run("huge Content-Length answered before the body", func(t *testing.T) {
		_, addr, key := listening(t, Config{BodyTimeout: time.Hour})
		c := halfSent(t, addr, key, 99999999999)
		resp, body := answer(t, c, 20*time.Second)
		if resp.StatusCode != 413 || !strings.Contains(body, `"body_too_large"`) {
			t.Fatalf("got %d %s; want 413 body_too_large", resp.StatusCode, body)
		}
	})
	t.Run("a body that stalls times out", func(t *testing.T) {
		_, addr, key := listening(t, Config{BodyTimeout: 200 * time.Millisecond})
		c := halfSent(t, addr, key, 100)
		resp, body := answer(t, c, 20*time.Second)
		if resp.StatusCode != 408 || !strings.Contains(body, `"request_timeout"`) {
			t.Fatalf("got %d %s; want 408 request_timeout", resp.StatusCode, body)
		}
	})
	t.Run("shutdown does not wait for a stalled body", func(t *testing.T) {
		s, addr, key := listening(t, Config{BodyTimeout: time.Hour})
		c := halfSent(t, addr, key, 100)
		for s.bodies.unread() == 0 {
			time.Sleep(time.Millisecond)
		}
		done := make(chan error, 1)
		go func() { done <- s.Shutdown(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("shutdown is still waiting for a stalled body")
		}
		resp, body := answer(t, c, 20*time.Second)
		if resp.StatusCode != 503 {
			t.Fatalf("the stalled request was answered %d %s; want 503", resp.StatusCode, body)
		}
	})
	t.Run("300 half-sent bodies with a bogus key do not stop a real lease", func(t *testing.T) {
		_, addr, key := listening(t, Config{BodyTimeout: time.Hour})
		for range 300 { // from another address: one address holds only its share
			halfSentFrom(t, "127.0.0.2", addr, "lp_bogus", 100)
		}
		c := halfSent(t, addr, key, 0) // an empty body: refused 400, but decided
		resp, body := answer(t, c, 20*time.Second)
		if resp.StatusCode != 400 {
			t.Fatalf("got %d %s", resp.StatusCode, body)
		}
		req := `{"resource":"lock:r","actorDid":"did:example:a"}`
		c2, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		fmt.Fprintf(c2, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", api.PathLease, key, len(req), req)
		if resp, body := answer(t, c2, 20*time.Second); resp.StatusCode != 200 {
			t.Fatalf("a real lease among 300 stalled bogus requests: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("connections are capped", func(t *testing.T) {
		s, addr, key := listening(t, Config{MaxConns: 2, BodyTimeout: time.Hour})
		// One at a time: a connection without a key yet is in a budget of
		// one here (half the cap), until its key is checked.
		var held []net.Conn
		for i := range 2 {
			held = append(held, halfSent(t, addr, key, 100))
			// Until the guard counts it authenticated (its key checked),
			// the next one could take its place in the budget of one.
			for s.conns.authed.Load() < int64(i+1) || s.conns.unauthenticated() > 0 {
				time.Sleep(time.Millisecond)
			}
		}
		third, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer third.Close()
		fmt.Fprintf(third, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", api.PathWait, key)
		third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := third.Read(make([]byte, 1)); n > 0 || err == nil {
			t.Fatal("a third connection was served while the cap of 2 was held")
		}
		held[0].Close()
		if resp, body := answer(t, third, 20*time.Second); resp.StatusCode != 200 {
			t.Fatalf("third connection after one closed: %d %s", resp.StatusCode, body)
		}
	})
}

// unread counts the bodies being read now.
func (g *bodyGuard) unread() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.reading)
}
