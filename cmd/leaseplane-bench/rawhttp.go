package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// rawHTTP is the tool's minimal HTTP/1.1 client (--raw-client, and the
// bare map): one kept-alive connection, one request at a time, answers with
// Content-Length only. It costs the load generator a fraction of net/http's
// client, so a profile shows the server's share more clearly; the
// comparison with the peers uses server/client, as users do.
type rawHTTP struct {
	addr string // host:port
	auth string // "Bearer KEY" or ""
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	buf  []byte
}

func newRawHTTP(baseURL, key string) (*rawHTTP, error) {
	addr, ok := strings.CutPrefix(baseURL, "http://")
	if !ok {
		return nil, fmt.Errorf("raw HTTP client: %q is not an http:// URL", baseURL)
	}
	c := &rawHTTP{addr: strings.TrimRight(addr, "/")}
	if key != "" {
		c.auth = "Bearer " + key
	}
	return c, nil
}

func (c *rawHTTP) dial() error {
	conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
	if err != nil {
		return err
	}
	c.conn, c.r, c.w = conn, bufio.NewReaderSize(conn, 8192), bufio.NewWriterSize(conn, 4096)
	return nil
}

func (c *rawHTTP) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// do sends one request and reads its answer. On a broken connection it
// redials once, for requests the server may have closed idle.
func (c *rawHTTP) do(method, path string, body []byte) (int, []byte, error) {
	fresh := false
	if c.conn == nil {
		if err := c.dial(); err != nil {
			return 0, nil, err
		}
		fresh = true
	}
	status, ans, err := c.roundTrip(method, path, body)
	if err != nil && !fresh {
		c.close()
		if err := c.dial(); err != nil {
			return 0, nil, err
		}
		status, ans, err = c.roundTrip(method, path, body)
	}
	if err != nil {
		c.close()
	}
	return status, ans, err
}

func (c *rawHTTP) roundTrip(method, path string, body []byte) (int, []byte, error) {
	w := c.w
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(c.addr)
	w.WriteString("\r\n")
	if c.auth != "" {
		w.WriteString("Authorization: ")
		w.WriteString(c.auth)
		w.WriteString("\r\n")
	}
	if body != nil {
		w.WriteString("Content-Type: application/json\r\nContent-Length: ")
		w.WriteString(strconv.Itoa(len(body)))
		w.WriteString("\r\n\r\n")
		w.Write(body)
	} else {
		w.WriteString("\r\n")
	}
	if err := w.Flush(); err != nil {
		return 0, nil, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, fmt.Errorf("raw HTTP client: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("raw HTTP client: bad status line %q", line)
	}
	length, closeAfter := -1, false
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, val, _ := bytes.Cut(h, []byte(":"))
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(val)); err != nil {
				return 0, nil, fmt.Errorf("raw HTTP client: bad Content-Length %q", val)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, fmt.Errorf("raw HTTP client: %s %s answered Transfer-Encoding %s; want Content-Length", method, path, val)
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(val, []byte("close")):
			closeAfter = true
		}
	}
	if length < 0 {
		return 0, nil, fmt.Errorf("raw HTTP client: %s %s answered without Content-Length", method, path)
	}
	if cap(c.buf) < length {
		c.buf = make([]byte, length)
	}
	ans := c.buf[:length]
	if _, err := io.ReadFull(c.r, ans); err != nil {
		return 0, nil, err
	}
	if closeAfter {
		c.close()
	}
	return status, ans, nil
}
