package api

import (
	"strconv"
	"strings"
)

// ReasonGone refuses what retention dropped: a ledger entry's body, or a
// resume of the events stream from before the bodies kept.
const ReasonGone = "gone"

// EventsRequest is what a request of the events stream (Events) asks:
// the events of one agent (ActorDid, "" for all) on resources under
// Prefix, from the one after After (a ledger index; -1: from now).
type EventsRequest struct {
	ActorDid, Prefix string
	After            int64
}

// ParseEvents reads an events stream's request for key k: q (its query,
// by ParseQuery(Events, ...)) and its Last-Event-ID header. An agent key
// sees its own agent's events only: it may name no other (403
// actor_mismatch) and its ActorDid is its agent's. Anything else wrong is
// 400 invalid_request naming it.
func ParseEvents(k Key, q Query, lastEventID string) (EventsRequest, *Reply) {
	e := EventsRequest{After: -1}
	e.ActorDid, _ = q.Get("actorDid")
	e.Prefix, _ = q.Get("prefix")
	if _, given := q.Get("actorDid"); given && (!strings.HasPrefix(e.ActorDid, "did:") || len(e.ActorDid) > 256 || strings.ContainsAny(e.ActorDid, " \t\r\n")) {
		no := Invalid("actorDid must be a DID (did:..., at most 256 bytes, no white space)")
		return e, &no
	}
	if k.Role == RoleAgent {
		if e.ActorDid != "" {
			if no := AuthorizeActor(k, e.ActorDid); no != nil {
				return e, no
			}
		}
		e.ActorDid = k.AgentDID
	}
	if lastEventID != "" {
		n, err := strconv.ParseInt(lastEventID, 10, 64)
		if err != nil || n < 0 {
			no := Invalid("Last-Event-ID must be an event id this stream sent (a ledger index, 0 or more)")
			return e, &no
		}
		e.After = n
	}
	return e, nil
}
