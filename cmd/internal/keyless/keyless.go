// Package keyless holds sockets without a key against a plane, as an
// attacker would: the sockets of `leaseplane-measure attack` and of the
// availability tests of cmd/leaseplane.
package keyless

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kinds are what a socket does once connected: nothing; half a request
// line; a lease's headers with a made-up key and one byte of its body; a
// POST to an unknown route without a key and one byte of body; a /healthz
// answered, then the connection kept open idle.
var Kinds = []string{"idle", "silent", "stalled-bogus-key", "stalled-no-key", "keep-alive-idle"}

// opening is what a socket of each kind writes once connected.
var opening = map[string]string{
	"silent":            "GET /api/v1/acp/coordination/wait HT",
	"stalled-bogus-key": "POST /api/v1/acp/coordination/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer lp_bogus\r\nContent-Length: 100\r\n\r\n{",
	"stalled-no-key":    "POST /api/v1/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
	"keep-alive-idle":   "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
}

// Attacker holds sockets against URL from the addresses 127.0.0.2 and on
// (Addrs of them), each slot reopening its socket Pace after the server
// closed it, until Stop.
type Attacker struct {
	URL   string
	Addrs int
	Pace  time.Duration

	Opened  atomic.Int64 // connections the server accepted (dial succeeded)
	Open    atomic.Int64 // open now, from the attacker's side
	MaxOpen atomic.Int64 // the most open at once (a racy maximum: good enough for a figure)

	stopped atomic.Bool
	quit    chan struct{}
	wg      sync.WaitGroup
}

// Start starts slots sockets, slot i from address 127.0.0.(2+i%Addrs),
// their kinds in turn.
func (a *Attacker) Start(slots int) {
	a.quit = make(chan struct{})
	for i := range slots {
		a.wg.Add(1)
		go a.slot(i)
	}
}

func (a *Attacker) slot(i int) {
	defer a.wg.Done()
	ip := net.ParseIP(fmt.Sprintf("127.0.0.%d", 2+i%a.Addrs))
	kind := Kinds[(i/a.Addrs)%len(Kinds)]
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 10 * time.Second}
	for !a.stopped.Load() {
		c, err := d.Dial("tcp", strings.TrimPrefix(a.URL, "http://"))
		if err != nil {
			a.pause(time.Second)
			continue
		}
		a.Opened.Add(1)
		if n := a.Open.Add(1); n > a.MaxOpen.Load() {
			a.MaxOpen.Store(n)
		}
		io.WriteString(c, opening[kind])
		// Read until the server closes it (or Stop closes it here).
		done := make(chan struct{})
		go func() { io.Copy(io.Discard, c); close(done) }()
		select {
		case <-done:
		case <-a.quit:
		}
		c.Close()
		<-done
		a.Open.Add(-1)
		a.pause(a.Pace) // then a new socket
	}
}

// pause waits d, or less when Stop is called.
func (a *Attacker) pause(d time.Duration) {
	select {
	case <-time.After(d):
	case <-a.quit:
	}
}

// Stop closes every socket and waits for the slots to end.
func (a *Attacker) Stop() {
	a.stopped.Store(true)
	close(a.quit)
	a.wg.Wait()
}
