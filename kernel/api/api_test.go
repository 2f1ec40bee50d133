package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

func TestBearerKey(t *testing.T) {
	for _, c := range []struct {
		header, key string
		ok          bool
	}{
		{"", "", true},
		{"Bearer lp_a_b", "lp_a_b", true},
		{"bearer  lp_a_b ", "lp_a_b", true},
		{"Basic Zm9v", "", false},
		{"Bearer", "", false},
		{"Bearer   ", "", false},
	} {
		key, ok := BearerKey(c.header)
		if key != c.key || ok != c.ok {
			t.Errorf("BearerKey(%q) = %q, %v; want %q, %v", c.header, key, ok, c.key, c.ok)
		}
	}
}

// TestParseQuery: every route takes only its own parameters, each once;
// the error names the one at fault.
func TestParseQuery(t *testing.T) {
	for _, c := range []struct {
		route Route
		query string
		err   string
	}{
		{Lease, "", ""},
		{Lease, "waitUpToMs=3000", ""},
		{Lease, "waitUpTo=3000", `unknown query parameter "waitUpTo" (acquire takes only waitUpToMs)`},
		{Lease, "waitUpToMs=1&waitUpToMs=2", "query parameter waitUpToMs is given more than once"},
		{Release, "leaseId=x", `unknown query parameter "leaseId" (release takes none)`},
		{Wait, "prefix=a&after=b&limit=3", ""},
		{Wait, "after=%ff", "query parameter after is not valid UTF-8"},
		{Wait, "prefix=%ff", "query parameter prefix is not valid UTF-8"},
		{Wait, "page=2", `unknown query parameter "page" (wait takes prefix, after and limit)`},
		{Wait, "a=%zz", "malformed query string"},
		{Wait, "a=1;b=2", "malformed query string"},
		{LedgerRoutes[2], "start=0&count=5&extra=1", `unknown query parameter "extra"`},
	} {
		_, err := ParseQuery(c.route, c.query)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ParseQuery(%s, %q) = %v; want error %q", c.route.Path, c.query, err, c.err)
		}
	}
}

func TestWaitBody(t *testing.T) {
	for _, c := range []struct {
		query, body, err string
	}{
		{"", `{}`, ""},
		{"prefix=lock:&limit=10", `{"prefix":"lock:","limit":10}`, ""},
		{"after=a%22b&prefix=x", `{"prefix":"x","after":"a\"b"}`, ""},
		{"limit=0", "", "limit must be an integer from 1 to 1000"},
		{"limit=1001", "", "limit must be an integer from 1 to 1000"},
		{"limit=%2B5", "", "limit must be an integer from 1 to 1000"},
	} {
		q, err := ParseQuery(Wait, c.query)
		if err != nil {
			t.Fatal(err)
		}
		body, err := WaitBody(q)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("WaitBody(%s) = %s, %v; want error %q", c.query, body, err, c.err)
			}
			continue
		}
		if err != nil || string(body) != c.body {
			t.Errorf("WaitBody(%s) = %s, %v; want %s", c.query, body, err, c.body)
		}
	}
}

// TestWaitUpTo: "0" or [1-9][0-9]* up to 30000, in the query; in the body
// too is refused naming it.
func TestWaitUpTo(t *testing.T) {
	type waitCase struct {
		query, body string
		ms          int
		held        bool
		err         string
	}
	cases := []waitCase{
		{"", `{}`, 0, false, ""},
		{"waitUpToMs=0", `{}`, 0, true, ""},
		{"waitUpToMs=1500", `{}`, 1500, true, ""},
		{"waitUpToMs=30000", `{}`, 30000, true, ""},
		{"waitUpToMs=30001", `{}`, 0, false, "waitUpToMs must be a whole number of milliseconds from 0 to 30000"},
		{"waitUpToMs=100", `{"resource":"r","actorDid":"did:example:a","waitUpToMs":100}`, 0, false, "waitUpToMs is given both in the query and in the body"},
		{"", `{"resource":"r","actorDid":"did:example:a","waitUpToMs":100}`, 0, false, ""}, // the kernel reads the body's
		{"waitUpToMs=100", `not json`, 100, true, ""},                                      // the kernel refuses the body
	}
	for _, bad := range []string{"%2B5", "-1", "05", "1.5", "1e3", "", "99999999999999999999"} {
		cases = append(cases, waitCase{"waitUpToMs=" + bad, `{}`, 0, false, "waitUpToMs must be"})
	}
	for _, c := range cases {
		q, err := ParseQuery(Lease, c.query)
		if err != nil {
			t.Fatal(err)
		}
		cmd := kernel.DecodeCommand(kernel.OpAcquire, 0, []byte(c.body))
		ms, held, err := WaitUpTo(q, &cmd)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("WaitUpTo(%q, %s) = %d, %v, %v; want error %q", c.query, c.body, ms, held, err, c.err)
			}
			continue
		}
		if err != nil || ms != c.ms || held != c.held {
			t.Errorf("WaitUpTo(%q, %s) = %d, %v, %v; want %d, %v", c.query, c.body, ms, held, err, c.ms, c.held)
		}
		if held && cmd.Invalid == "" && (!cmd.HasWaitUpTo || cmd.WaitUpToMs != int64(c.ms)) {
			t.Errorf("WaitUpTo(%q, %s) left the command waiting %v %d; want %d", c.query, c.body, cmd.HasWaitUpTo, cmd.WaitUpToMs, c.ms)
		}
	}
}

// TestAdmit: who may do what is a function of the key's role, the route
// and the body's actorDid.
func TestAdmit(t *testing.T) {
	const me, other = "did:example:me", "did:example:other"
	ws, op := Key{Role: RoleWorkspace}, Key{Role: RoleOperator}
	agent := Key{Role: RoleAgent, AgentDID: me}
	body := func(did string) []byte { return []byte(`{"resource":"r","actorDid":"` + did + `"}`) }
	for _, c := range []struct {
		k      Key
		r      Route
		body   []byte
		status int
		reason string
	}{
		{ws, Lease, body(other), 0, ""},
		{op, Lease, body(other), 0, ""},
		{agent, Lease, body(me), 0, ""},
		{agent, Lease, body(other), 403, ReasonActorMismatch},
		{agent, Release, body(other), 403, ReasonActorMismatch},
		{agent, Lease, []byte(`{"resource":"r"}`), 400, kernel.ReasonInvalid},
		{agent, Wait, nil, 0, ""},
		{ws, Suspend, []byte(`{"actorDid":"` + other + `"}`), 403, ReasonForbidden},
		{agent, Forget, []byte(`{"actorDid":"` + me + `"}`), 403, ReasonForbidden},
		{op, Suspend, []byte(`{"actorDid":"` + other + `"}`), 0, ""},
		{agent, DrillsRuns, nil, 403, ReasonForbidden},
		{ws, DrillsRuns, nil, 0, ""},
		{ws, DrillsRun, nil, 403, ReasonForbidden},
		{agent, LedgerRoutes[0], nil, 0, ""},
	} {
		rep := Admit(c.k, c.r, kernel.DecodeCommand(c.r.Op, 0, c.body))
		switch {
		case c.status == 0 && rep != nil:
			t.Errorf("Admit(%s, %s, %s) = %d %s; want admitted", c.k.Role, c.r.What, c.body, rep.Status, rep.Body)
		case c.status != 0 && (rep == nil || rep.Status != c.status || !strings.Contains(string(rep.Body), `"reason":"`+c.reason+`"`)):
			t.Errorf("Admit(%s, %s, %s) = %v; want %d %s", c.k.Role, c.r.What, c.body, rep, c.status, c.reason)
		}
	}
	if rep := Authorize(Key{Role: RoleAgent}, Suspend); rep == nil || !strings.Contains(string(rep.Body), "suspend needs an operator key; this is an agent key") {
		t.Errorf("the agent's refusal: %v", rep)
	}
}

// TestRoutes: the tables agree with themselves.
func TestRoutes(t *testing.T) {
	for _, r := range LeaseRoutes {
		if got, ok := LeaseRoute(r.Path); !ok || got.Op != r.Op {
			t.Errorf("LeaseRoute(%s) = %v, %v", r.Path, got, ok)
		}
		if got, ok := RouteOf(r.Op); !ok || got.Path != r.Path {
			t.Errorf("RouteOf(%s) = %v, %v", r.Op, got, ok)
		}
		if !strings.Contains(LeaseRouteList, r.Path) {
			t.Errorf("LeaseRouteList lacks %s", r.Path)
		}
	}
	if _, ok := RouteOf(kernel.OpTick); ok {
		t.Error("tick has a route")
	}
	if !Wait.Allows("HEAD") || Lease.Allows("GET") {
		t.Error("Allows")
	}
	r := LimitExceeded(LimitHeldRequests, 64, "too many")
	if r.Status != 429 || r.RetryAfter != 1 || string(r.Body) != `{"ok":false,"reason":"limit_exceeded","limit":"heldRequests","max":64,"error":"too many"}` {
		t.Errorf("LimitExceeded: %d %d %s", r.Status, r.RetryAfter, r.Body)
	}
	if u := Unavailable("x"); u.Status != 503 || u.RetryAfter != 1 {
		t.Errorf("Unavailable: %v", u)
	}
}

func TestSetHeaders(t *testing.T) {
	h := http.Header{}
	SetHeaders(h, "", 1, 429)
	if h.Get("Content-Type") != "application/json" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" ||
		h.Get("Retry-After") != "1" || h.Get("WWW-Authenticate") != "" || len(h) != 4 {
		t.Fatalf("a 429: %v", h)
	}
	h = http.Header{}
	SetHeaders(h, "text/plain", 7, 401)
	if h.Get("Content-Type") != "text/plain" || h.Get("Retry-After") != "7" || h.Get("WWW-Authenticate") != `Bearer realm="leaseplane"` || len(h) != 5 {
		t.Fatalf("a 401: %v", h)
	}
	h = http.Header{}
	SetHeaders(h, "", 0, 200)
	if _, ok := h["Retry-After"]; ok || len(h) != 3 {
		t.Fatalf("a 200: %v", h)
	}
}
