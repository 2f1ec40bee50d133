package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// drainTimeout bounds how long the end of a stdio client's input is held
// back for requests still in flight: longer than one call to the plane.
const drainTimeout = 60 * time.Second

// maxTrackedLine is the longest line drain inspects; a longer one (never a
// lease tool call) is passed through untracked.
const maxTrackedLine = 64 << 10

// drain sits between a stdio transport and its pipes and holds back the
// end of the client's input until every request read from it has been
// answered, so that a client that writes its requests and closes its end
// (printf ... | leaseplane mcp) still gets every answer. Without it the SDK
// ends the session at EOF and drops the answers in flight. It follows
// JSON-RPC ids of newline-delimited messages: a line with "method" and "id"
// is a request, a line with "id" and no "method" an answer.
type drain struct {
	r io.ReadCloser
	w io.WriteCloser

	writeMu sync.Mutex // one message a write: the SDK's and writeLine's
	mu      sync.Mutex
	pending map[string]bool
	idle    chan struct{} // closed when pending empties, if someone waits
	in, out lineBuf
}

// lineBuf collects the bytes of the current line.
type lineBuf struct {
	b    []byte
	skip bool // the line outgrew maxTrackedLine
}

// feed splits p into lines and calls f with each complete one.
func (l *lineBuf) feed(p []byte, f func([]byte)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !l.skip {
			if len(l.b)+len(chunk) > maxTrackedLine {
				l.skip, l.b = true, l.b[:0]
			} else {
				l.b = append(l.b, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !l.skip {
			f(l.b)
		}
		l.b, l.skip = l.b[:0], false
		p = p[i+1:]
	}
}

// message is the part of a JSON-RPC message drain looks at.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// messages decodes a line holding a message or a batch of them.
func messages(line []byte) []message {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	if line[0] == '[' {
		var ms []message
		if json.Unmarshal(line, &ms) != nil {
			return nil
		}
		return ms
	}
	var m message
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	return []message{m}
}

func newDrain(r io.ReadCloser, w io.WriteCloser) *drain {
	return &drain{r: r, w: w, pending: map[string]bool{}}
}

func (d *drain) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.mu.Lock()
		d.in.feed(p[:n], func(line []byte) {
			for _, m := range messages(line) {
				if m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null" {
					d.pending[string(m.ID)] = true
				}
			}
		})
		d.mu.Unlock()
	}
	if err == io.EOF {
		d.wait()
	}
	return n, err
}

// wait blocks until no request is pending or drainTimeout passes.
func (d *drain) wait() {
	d.mu.Lock()
	if len(d.pending) == 0 {
		d.mu.Unlock()
		return
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// writeLine writes one line of its own (an error answer to a line the
// SDK never saw), between the SDK's messages.
func (d *drain) writeLine(b []byte) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	d.w.Write(b)
}

func (d *drain) Write(p []byte) (int, error) {
	d.writeMu.Lock()
	n, err := d.w.Write(p)
	d.writeMu.Unlock()
	d.mu.Lock()
	d.out.feed(p[:n], func(line []byte) {
		for _, m := range messages(line) {
			if m.Method == "" {
				delete(d.pending, string(m.ID))
			}
		}
	})
	if len(d.pending) == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
	d.mu.Unlock()
	return n, err
}

// reader and writer give the transport its two ends.
func (d *drain) reader() io.ReadCloser  { return readCloser{d, d.r} }
func (d *drain) writer() io.WriteCloser { return writeCloser{d, d.w} }

type readCloser struct {
	io.Reader
	io.Closer
}

type writeCloser struct {
	io.Writer
	io.Closer
}
