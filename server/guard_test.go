package server

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// fakeConn is a connection from a given address that records its close.
type fakeConn struct {
	net.Conn // nil: only the methods below are called
	from     *net.TCPAddr
	closed   bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.from }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

// TestConnGuardFairShare: with the budget without a key full, a newcomer
// from an address holding its fair share is closed at once and evicts
// nobody; one from an address below its share, a new address above all
// (a tenant's first connection), takes the place of the oldest of the
// address holding the most.
func TestConnGuardFairShare(t *testing.T) {
	const budget = 40
	g := newConnGuard(1024, budget, 64, time.Second, time.Second)
	from := func(i int) *fakeConn {
		return &fakeConn{from: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", i)), Port: 1}}
	}
	admit := func(c *fakeConn) *guardConn {
		g.sem <- struct{}{} // as Accept takes its place first
		return g.admit(c)
	}
	// Three attacker addresses fill the budget: 14, 13 and 13.
	var held []*fakeConn
	for i := range budget {
		c := from(2 + i%3)
		if admit(c) == nil {
			t.Fatalf("connection %d refused below the budget", i)
		}
		held = append(held, c)
	}
	// Each reconnects many times: every attempt is closed at once and
	// nobody is evicted (each address holds at least its share, 40/3 = 13),
	// though one holds one more than the others.
	for i := range 400 {
		c := from(2 + i%3)
		if admit(c) != nil || !c.closed {
			t.Fatalf("attempt %d from an address at its share was admitted", i)
		}
	}
	for _, c := range held {
		if c.closed {
			t.Fatalf("a held connection was evicted by attempts at their share")
		}
	}
	if n := g.evicted.Load(); n != 0 {
		t.Errorf("%d evicted, want 0", n)
	}
	if n := g.refusedFull.Load(); n != 400 {
		t.Errorf("%d refused as full, want 400", n)
	}
	// A tenant's first connection, from a new address, gets in: the
	// oldest of the address holding the most (127.0.0.2, 14) gives its
	// place.
	tenant := from(1)
	if admit(tenant) == nil || tenant.closed {
		t.Fatal("the tenant's first connection was refused")
	}
	if !held[0].closed || g.evicted.Load() != 1 {
		t.Errorf("the oldest connection of 127.0.0.2 was not evicted for the tenant (evicted %d)", g.evicted.Load())
	}
	// 127.0.0.2, now at 13, is above its share of 40/4 = 10: still
	// refused; the tenant's address, at 1, is below it: a second place.
	if c := from(2); admit(c) != nil {
		t.Error("127.0.0.2, holding 13 of a share of 10, was admitted")
	}
	if c := from(1); admit(c) == nil {
		t.Error("the tenant's second connection (its address holds 1 of a share of 10) was refused")
	}
	if g.unauthenticated() != budget {
		t.Errorf("%d without a key open, want the budget %d", g.unauthenticated(), budget)
	}
}
