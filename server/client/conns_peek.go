//go:build linux || darwin || freebsd || netbsd || openbsd

package client

import "syscall"

// alive reports whether the server has not closed c while it was idle:
// nothing to read on its socket (an idle HTTP/1.1 connection gets no
// bytes but its close), found without blocking and without reading.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	live := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		live = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && live
}
