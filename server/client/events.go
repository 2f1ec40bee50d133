package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// PathEvents is the events stream's route.
const PathEvents = "/api/v1/acp/coordination/events"

// Event is one event of the events stream (GET PathEvents): a lease
// event as the kernel emitted it, committed.
type Event struct {
	// ID is the event's ledger index; Type its kind, such as
	// "coordination.revoke"; Data its JSON, the bytes of its ledger entry.
	ID   int64
	Type string
	Data []byte

	// The event's fields (resource, lease and mode are empty for the
	// operator's events).
	AtMs        int64  `json:"atMs"`
	Resource    string `json:"resource"`
	ActorDid    string `json:"actorDid"`
	LeaseID     string `json:"leaseId"`
	Fence       int64  `json:"fence"`
	Mode        string `json:"mode"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
}

// Ends reports whether the event ends its lease: a release, an expiry or
// a revocation.
func (e *Event) Ends() bool {
	switch e.Type {
	case "coordination.release", "coordination.expire", "coordination.revoke":
		return true
	}
	return false
}

// EventsRequest says which events a stream shows.
type EventsRequest struct {
	// ActorDid, when set, shows only that agent's events (an agent key
	// sees only its own, whatever it asks).
	ActorDid string
	// Prefix, when set, shows only events on resources whose name starts
	// with it.
	Prefix string
	// After, when 0 or more, resumes after that event id (Last-Event-ID):
	// the events after it come first. Below 0, the stream starts now.
	After int64
}

// StreamError is a stream the plane refused (an HTTP status and its
// answer) or ended (an "end" event; Status is 0).
type StreamError struct {
	Status int
	Answer *Answer
}

func (e *StreamError) Error() string {
	if e.Status == 0 {
		return "leaseplane client: the plane ended the events stream: " + e.Answer.Refusal()
	}
	return "leaseplane client: events stream refused: " + e.Answer.Refusal()
}

// Events opens the events stream and calls ready once it is live (next
// is the id the next new event will have), then on for each event, in
// order, until ctx ends (it returns ctx's error), on returns an error
// (returned), the plane refuses or ends the stream (*StreamError) or the
// connection fails (a transport error). ready may be nil.
func (c *Client) Events(ctx context.Context, req EventsRequest, ready func(next int64), on func(Event) error) error {
	q := url.Values{}
	if req.ActorDid != "" {
		q.Set("actorDid", req.ActorDid)
	}
	if req.Prefix != "" {
		q.Set("prefix", req.Prefix)
	}
	path := PathEvents
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("leaseplane client: GET %s: %w", path, err)
	}
	hr.Header.Set("Accept", "text/event-stream")
	if req.After >= 0 {
		hr.Header.Set("Last-Event-ID", strconv.FormatInt(req.After, 10))
	}
	resp, err := c.transport(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		a, err := answerOf("events", response{status: resp.StatusCode, body: b})
		if err != nil {
			return err
		}
		return &StreamError{Status: resp.StatusCode, Answer: a}
	}
	return readSSE(resp.Body, func(id, typ string, data []byte) error {
		switch typ {
		case "ready":
			var r struct{ Next int64 }
			if err := json.Unmarshal(data, &r); err != nil {
				return fmt.Errorf("leaseplane client: the stream's ready event %q is not JSON: %w", data, err)
			}
			if ready != nil {
				ready(r.Next)
			}
			return nil
		case "end":
			a, err := answerOf("events", response{status: 200, body: data})
			if err != nil {
				return err
			}
			return &StreamError{Answer: a}
		}
		e := Event{Type: typ, Data: data}
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return fmt.Errorf("leaseplane client: the stream sent an event without a numeric id (%q)", id)
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("leaseplane client: event %d is not JSON: %w", n, err)
		}
		e.ID, e.Type, e.Data = n, typ, data
		return on(e)
	})
}

// readSSE reads Server-Sent Events from r and calls on for each.
func readSSE(r io.Reader, on func(id, typ string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var id, typ string
	var data []byte
	have := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if have {
				if typ == "" {
					typ = "message"
				}
				if err := on(id, typ, data); err != nil {
					return err
				}
			}
			id, typ, data, have = "", "", nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			id = value
		case "event":
			typ = value
		case "data":
			if have && data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
			have = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("leaseplane client: reading the events stream: %w", err)
	}
	return errors.New("leaseplane client: the events stream ended")
}
