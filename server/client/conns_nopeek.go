//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package client

// alive reports false where a socket cannot be peeked at without
// blocking: a connection idle for more than peekAfterIdle is dialed again.
func (c *conn) alive() bool { return false }
