// Package client is a small typed Go client of the lease plane's REST API:
// acquire, release and wait, authenticated with a
// workspace or agent key sent as a Bearer token.
//
// Call is the raw seam (the MCP server wraps it): it sends one operation's
// JSON body and gives back the HTTP status and the answer body. A transport
// failure (no connection, a cut response, a cancelled context) is an error;
// an HTTP refusal (409 lease_held, 401 unauthorized, 503 unavailable, ...)
// is an answer, not an error. Acquire, Release and Wait decode answers into
// Go types.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
)

// Route paths of the REST API (the contract's, package kernel/api).
const (
	PathLease   = api.PathLease
	PathRelease = api.PathRelease
	PathWait    = api.PathWait
)

// MaxAnswerBytes bounds an answer body; a longer one is a transport error.
const MaxAnswerBytes = 16 << 20

// Client talks to one lease plane with one key. It is safe for concurrent
// use when its http.Client is.
type Client struct {
	base string
	key  string
	hc   *http.Client
	// url is base parsed, for the lease routes' requests, when it is a
	// plain http(s) URL that parses back to itself; nil otherwise (each
	// request then parses base and its path, as Request does).
	url *url.URL
	// auth is the Authorization header's value, nil without a key.
	auth []string
	// own are the client's own connections for the lease routes (conns.go),
	// when New was given no http.Client and no proxy applies to base; nil
	// otherwise. prefix is base's path, escaped, for their requests.
	own     *conns
	prefix  string
	ownAuth string
}

// New returns a client of the plane at baseURL (such as
// "http://127.0.0.1:8080") that sends key as its Bearer token (none when
// key is empty).
//
// With a nil hc the client keeps its own HTTP/1.1 connections to the plane
// for the lease routes (Acquire, Release, Wait, Call and the held asks):
// each request is written and answered on the caller's goroutine, at about
// a third of net/http's CPU (docs/BENCHMARKS.md). The other routes, and
// the lease routes too when a proxy from the environment (HTTP_PROXY,
// HTTPS_PROXY) applies to baseURL or baseURL is not a plain http(s) URL,
// go through http.DefaultClient. Pass an http.Client (http.DefaultClient
// included) to send every request through it: its transport, proxy,
// timeouts and TLS settings then apply. A context's deadline and
// cancellation apply either way. CloseIdleConnections closes what the
// client keeps open.
func New(baseURL, key string, hc *http.Client) *Client {
	own := hc == nil
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), key: key, hc: hc}
	if key != "" {
		c.auth = []string{"Bearer " + key}
	}
	if u, err := url.Parse(c.base); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		!strings.HasSuffix(u.Host, ":") && u.User == nil && u.Opaque == "" && u.RawPath == "" && u.RawQuery == "" &&
		!u.ForceQuery && u.Fragment == "" && u.String() == c.base {
		c.url = u
		if own {
			if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err == nil && proxy == nil {
				c.own, c.prefix = newConns(u), u.EscapedPath()
				if c.auth != nil {
					c.ownAuth = c.auth[0]
				}
			}
		}
	}
	return c
}

// CloseIdleConnections closes the connections the client keeps open and
// is not using (its own, and its http.Client's). A later request opens
// new ones.
func (c *Client) CloseIdleConnections() {
	if c.own != nil {
		c.own.closeIdle()
	}
	c.hc.CloseIdleConnections()
}

// BaseURL is the plane's address as given to New, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// response is one HTTP exchange's outcome.
type response struct {
	status     int
	retryAfter time.Duration
	body       []byte
}

// Call sends op with body (the operation's JSON; ignored for wait) and
// returns the HTTP status and the answer body. Only acquire, release and
// wait have REST routes; any other op is an error, as is a transport
// failure. A refusal is an answer: err is nil and status says what it was.
func (c *Client) Call(ctx context.Context, op kernel.Op, body []byte) (status int, answer []byte, err error) {
	r, err := c.do(ctx, op, body)
	if err != nil {
		return 0, nil, err
	}
	return r.status, r.body, nil
}

// MaxWaitUpTo is the longest the plane holds a lease request
// (waitUpToMs ≤ api.MaxWaitUpToMs).
const MaxWaitUpTo = api.MaxWaitUpToMs * time.Millisecond

// CallWaiting sends an acquire that the plane may hold up to waitUpTo
// (POST lease?waitUpToMs=N, capped at MaxWaitUpTo): the plane answers the
// grant as soon as the resource is the caller's, a deadlock or any other
// refusal at once, or the last lease_held when the time is up.
func (c *Client) CallWaiting(ctx context.Context, body []byte, waitUpTo time.Duration) (status int, answer []byte, err error) {
	r, err := c.doQuery(ctx, kernel.OpAcquire, body, waitQuery(waitUpTo))
	if err != nil {
		return 0, nil, err
	}
	return r.status, r.body, nil
}

// AcquireWaiting is Acquire held by the plane up to waitUpTo (see
// CallWaiting).
func (c *Client) AcquireWaiting(ctx context.Context, req AcquireRequest, waitUpTo time.Duration) (*Answer, error) {
	r, err := c.doQuery(ctx, kernel.OpAcquire, encodeAcquire(req), waitQuery(waitUpTo))
	if err != nil {
		return nil, err
	}
	return answerOf(kernel.OpAcquire, r)
}

// maxWaitQuery is waitQuery(MaxWaitUpTo), the hold client.Holder asks for
// when it has no timeout.
var maxWaitQuery = "?" + api.ParamWaitUpToMs + "=" + strconv.FormatInt(MaxWaitUpTo.Milliseconds(), 10)

func waitQuery(d time.Duration) string {
	d = max(0, min(d, MaxWaitUpTo))
	if d == MaxWaitUpTo {
		return maxWaitQuery
	}
	return "?" + api.ParamWaitUpToMs + "=" + strconv.FormatInt(d.Milliseconds(), 10)
}

func (c *Client) do(ctx context.Context, op kernel.Op, body []byte) (response, error) {
	return c.doQuery(ctx, op, body, "")
}

func (c *Client) doQuery(ctx context.Context, op kernel.Op, body []byte, query string) (response, error) {
	rt, ok := api.RouteOf(op)
	if !ok || rt.Access == api.OperatorKey {
		return response{}, fmt.Errorf("leaseplane client: op %q has no REST route here (want acquire, release or wait)", op)
	}
	if rt.Method == http.MethodGet {
		body = nil
	}
	if c.own != nil && ctx != nil {
		r, err := c.own.roundTrip(ctx, rt.Method, c.prefix+rt.Path+query, c.ownAuth, body, MaxAnswerBytes)
		if err == nil && int64(len(r.body)) > MaxAnswerBytes {
			err = errTooLong(MaxAnswerBytes)
		}
		if err != nil {
			return response{}, fmt.Errorf("leaseplane client: %s %s: %w", rt.Method, c.base+rt.Path+query, err)
		}
		return r, nil
	}
	if c.url == nil || ctx == nil {
		// (A nil ctx gets NewRequestWithContext's error, as it always did.)
		return c.send(ctx, rt.Method, rt.Path+query, body)
	}
	// The request is built from the parsed base: the URL that parsing
	// base+path+query gives, without parsing it (query is ours, "" or
	// "?name=value" with nothing to escape), and the headers in one map.
	u := *c.url
	u.Path += rt.Path
	u.RawQuery = strings.TrimPrefix(query, "?")
	h := make(http.Header, 3)
	h["Accept"] = jsonType
	if body != nil {
		h["Content-Type"] = jsonType
	}
	if c.auth != nil {
		h["Authorization"] = c.auth
	}
	req := &http.Request{Method: rt.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Host: u.Host}
	if body != nil {
		req.ContentLength = int64(len(body))
		if len(body) == 0 {
			req.Body, req.GetBody = http.NoBody, noBody
		} else {
			// A *bytes.Reader behind io.NopCloser, as NewRequest makes:
			// the transport knows it is in memory and writes the headers
			// and the body in one write (another reader costs a second).
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
	}
	return c.exchange(req.WithContext(ctx), rt.Method, rt.Path, query)
}

// jsonType is the Accept and Content-Type headers' value. Requests share
// it: net/http does not change a header's values in place, and
// Header.Add appends to a copy (the slice is full).
var jsonType = []string{"application/json"}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// Request sends body (nil for none) to path with method and returns the
// HTTP status and the answer body, for the routes that are not lease
// commands (drills, detection, the ledger). A refusal is an answer.
func (c *Client) Request(ctx context.Context, method, path string, body []byte) (status int, answer []byte, err error) {
	r, err := c.send(ctx, method, path, body)
	if err != nil {
		return 0, nil, err
	}
	return r.status, r.body, nil
}

func (c *Client) send(ctx context.Context, method, path string, body []byte) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return response{}, fmt.Errorf("leaseplane client: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return c.exchange(req, method, path, "")
}

// exchange sends req (method, path and query name it in errors) and reads
// its answer.
func (c *Client) exchange(req *http.Request, method, path, query string) (response, error) {
	resp, err := c.doHTTP(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := readAnswer(resp, MaxAnswerBytes)
	if err != nil {
		return response{}, fmt.Errorf("leaseplane client: reading the answer of %s %s: %w", method, c.base+path+query, err)
	}
	if len(b) > MaxAnswerBytes {
		return response{}, fmt.Errorf("leaseplane client: the answer of %s %s is over %d bytes", method, c.base+path+query, MaxAnswerBytes)
	}
	r := response{status: resp.StatusCode, body: b}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n >= 0 {
			r.retryAfter = time.Duration(n) * time.Second
		}
	}
	return r, nil
}

// Lease is a granted lease.
type Lease struct {
	ID          string `json:"id"`
	Resource    string `json:"resource"`
	Holder      string `json:"holder"`
	Mode        string `json:"mode"`
	Fence       int64  `json:"fence"`
	GrantedAtMs int64  `json:"grantedAtMs"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
}

// Stampede is the back-off advice of a lease_held refusal.
type Stampede struct {
	Admitted []string `json:"admitted"`
	WaitMs   int64    `json:"waitMs"`
}

// Answer is the decoded answer of acquire or release: a grant, a release,
// or a refusal. Fields an answer does not carry are zero.
type Answer struct {
	// Status is the HTTP status; RetryAfter the Retry-After header, if any.
	Status     int           `json:"-"`
	RetryAfter time.Duration `json:"-"`
	// Raw is the answer body exactly as the plane sent it.
	Raw []byte `json:"-"`

	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`

	// acquire granted
	Lease *Lease `json:"lease,omitempty"`
	// acquire refused lease_held or deadlock
	Holder  string   `json:"holder,omitempty"`
	Holders []string `json:"holders,omitempty"`
	// Claimants are the waiters whose claims a lease_held yields to when no
	// live lease conflicts (Holder is then empty).
	Claimants []string  `json:"claimants,omitempty"`
	Stampede  *Stampede `json:"stampede,omitempty"`
	WaitingOn string    `json:"waitingOn,omitempty"`
	Cycle     []string  `json:"cycle,omitempty"`
	// release
	Released    bool     `json:"released,omitempty"`
	ReleasedIDs []string `json:"releasedIds,omitempty"`
	// stale_lease
	LeaseID string `json:"leaseId,omitempty"`
}

// Refusal describes a refused answer in one line, for people.
func (a *Answer) Refusal() string {
	if a.OK {
		return ""
	}
	reason := a.Reason
	if reason == "" {
		reason = "refused"
	}
	s := fmt.Sprintf("%s (HTTP %d)", reason, a.Status)
	if a.Error != "" {
		s += ": " + a.Error
	}
	return s
}

// WaitAnswer is the decoded answer of wait.
type WaitAnswer struct {
	Status int    `json:"-"`
	Raw    []byte `json:"-"`

	OK        bool       `json:"ok"`
	Reason    string     `json:"reason,omitempty"`
	Error     string     `json:"error,omitempty"`
	NowMs     int64      `json:"nowMs"`
	Queues    []Queue    `json:"queues"`
	Deadlocks []Deadlock `json:"deadlocks"`
}

// Queue is one resource's holders and waiters.
type Queue struct {
	Resource string   `json:"resource"`
	Class    string   `json:"class"`
	Holders  []Lease  `json:"holders"`
	Waiters  []Waiter `json:"waiters"`
}

// Waiter is an agent waiting on a resource.
type Waiter struct {
	ActorDid   string `json:"actorDid"`
	Mode       string `json:"mode"`
	Admitted   bool   `json:"admitted"`
	SinceMs    int64  `json:"sinceMs"`
	LapsesAtMs int64  `json:"lapsesAtMs"`
}

// Deadlock is a deadlock refusal of the last 30 s.
type Deadlock struct {
	ActorDid  string `json:"actorDid"`
	Resource  string `json:"resource"`
	Holder    string `json:"holder"`
	WaitingOn string `json:"waitingOn"`
	AtMs      int64  `json:"atMs"`
}

// AcquireRequest is the body of acquire. Mode is read, write or delete;
// empty means write.
type AcquireRequest struct {
	Resource string `json:"resource"`
	ActorDid string `json:"actorDid"`
	Mode     string `json:"mode,omitempty"`
}

// ReleaseRequest is the body of release. An empty LeaseID releases the
// agent's lease on the resource, whichever it is.
type ReleaseRequest struct {
	Resource string `json:"resource"`
	ActorDid string `json:"actorDid"`
	LeaseID  string `json:"leaseId,omitempty"`
}

// ErrNotJSON wraps an answer body that is not the plane's JSON (a proxy's
// HTML page, say).
var ErrNotJSON = errors.New("answer is not a JSON object")

// Acquire asks for (or renews) a lease. A refusal is an Answer with OK
// false; err is a transport failure or an answer that is not JSON.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (*Answer, error) {
	return c.answer(ctx, kernel.OpAcquire, encodeAcquire(req))
}

// Release gives a lease back. A refusal is an Answer with OK false.
func (c *Client) Release(ctx context.Context, req ReleaseRequest) (*Answer, error) {
	return c.answer(ctx, kernel.OpRelease, encodeRelease(req))
}

func (c *Client) answer(ctx context.Context, op kernel.Op, body []byte) (*Answer, error) {
	r, err := c.do(ctx, op, body)
	if err != nil {
		return nil, err
	}
	return answerOf(op, r)
}

func answerOf(op kernel.Op, r response) (*Answer, error) {
	a := &Answer{}
	if err := decode(op, r, a); err != nil {
		return nil, err
	}
	a.Status, a.RetryAfter, a.Raw = r.status, r.retryAfter, r.body
	return a, nil
}

// Wait reads the queues and recent deadlocks.
func (c *Client) Wait(ctx context.Context) (*WaitAnswer, error) {
	r, err := c.do(ctx, kernel.OpWait, nil)
	if err != nil {
		return nil, err
	}
	w := &WaitAnswer{}
	if err := decode(kernel.OpWait, r, w); err != nil {
		return nil, err
	}
	w.Status, w.Raw = r.status, r.body
	return w, nil
}

func decode(op kernel.Op, r response, v any) error {
	t := bytes.TrimSpace(r.body)
	if len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("leaseplane client: %s: HTTP %d: %w: %q", op, r.status, ErrNotJSON, clip(r.body))
	}
	if a, ok := v.(*Answer); ok {
		if decodeAnswerFast(t, a) {
			return nil
		}
		*a = Answer{}
	}
	if err := json.Unmarshal(t, v); err != nil {
		return fmt.Errorf("leaseplane client: %s: HTTP %d: decoding the answer: %w", op, r.status, err)
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

// readAnswer reads resp's body, up to limit+1 bytes: more than limit is
// an answer too long. A body of known length is read into one buffer of
// its size.
func readAnswer(resp *http.Response, limit int64) ([]byte, error) {
	size := int64(512)
	if n := resp.ContentLength; n >= 0 && n <= limit {
		size = n + 1 // room for the read that meets the end
	}
	return readAll(resp.Body, int(size), limit)
}

// transport sends req with the client's key. A transport failure names the
// request once (*url.Error repeats the method and URL; its cause is kept).
func (c *Client) transport(req *http.Request) (*http.Response, error) {
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return c.doHTTP(req)
}

// doHTTP sends req as it is.
func (c *Client) doHTTP(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("leaseplane client: %s %s: %w", req.Method, req.URL, err)
	}
	return resp, nil
}
