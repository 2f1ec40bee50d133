//go:build unix

package server

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// keepAliveOn reads SO_KEEPALIVE of c's socket.
func keepAliveOn(t *testing.T, c net.Conn) bool {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v != 0
}

// TestListenKeepAliveOnlyAdmitted: a connection accepted from Listen's
// listener has no TCP keep-alive (so one the guard refuses costs no socket
// options); one the guard admits has it.
func TestListenKeepAliveOnlyAdmitted(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, guarded := range []bool{false, true} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var got net.Conn
		if guarded {
			gl := &guardListener{Listener: ln, g: newConnGuard(8, 4, 4, time.Minute, time.Minute), closed: make(chan struct{})}
			gc, err := gl.Accept()
			if err != nil {
				t.Fatal(err)
			}
			got = gc.(*guardConn).Conn
		} else if got, err = ln.Accept(); err != nil {
			t.Fatal(err)
		}
		defer got.Close()
		if on := keepAliveOn(t, got); on != guarded {
			t.Errorf("admitted by the guard %v: keep-alive %v, want %v", guarded, on, guarded)
		}
	}
}
