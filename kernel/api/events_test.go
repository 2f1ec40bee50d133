package api

import (
	"strings"
	"testing"
)

// TestParseEvents: the events stream's filters and resume point, an agent
// key held to its own agent, and each refusal naming what is wrong.
func TestParseEvents(t *testing.T) {
	ws, agent := Key{Role: RoleWorkspace}, Key{Role: RoleAgent, AgentDID: "did:web:b"}
	for _, c := range []struct {
		key         Key
		query, last string
		want        EventsRequest
		status      int
		msg         string
	}{
		{key: ws, want: EventsRequest{After: -1}},
		{key: ws, query: "actorDid=did:web:a&prefix=lock:", last: "7", want: EventsRequest{ActorDid: "did:web:a", Prefix: "lock:", After: 7}},
		{key: agent, want: EventsRequest{ActorDid: "did:web:b", After: -1}},
		{key: agent, query: "actorDid=did:web:b", want: EventsRequest{ActorDid: "did:web:b", After: -1}},
		{key: agent, query: "actorDid=did:web:a", status: 403, msg: "actor_mismatch"},
		{key: ws, query: "actorDid=nodid", status: 400, msg: "actorDid must be a DID"},
		{key: ws, query: "actorDid=", status: 400, msg: "actorDid must be a DID"},
		{key: ws, last: "x", status: 400, msg: "Last-Event-ID must be"},
		{key: ws, last: "-1", status: 400, msg: "Last-Event-ID must be"},
	} {
		q, err := ParseQuery(Events, c.query)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		got, no := ParseEvents(c.key, q, c.last)
		switch {
		case c.status == 0 && no != nil:
			t.Errorf("%s %q: refused %d %s", c.query, c.last, no.Status, no.Body)
		case c.status == 0 && got != c.want:
			t.Errorf("%s %q: %+v, want %+v", c.query, c.last, got, c.want)
		case c.status != 0 && (no == nil || no.Status != c.status || !strings.Contains(string(no.Body), c.msg)):
			t.Errorf("%s %q: %+v, want %d %s", c.query, c.last, no, c.status, c.msg)
		}
	}
}
