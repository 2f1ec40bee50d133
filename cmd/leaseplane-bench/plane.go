package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/client"
	"github.com/leaseplane/leaseplane/wasm/wazero"
)

// engine makes the kernel factory an engine name stands for.
func engine(name string) (kernel.Factory, error) {
	switch name {
	case "native":
		return kernel.Native, nil
	case "wasm":
		dir := ""
		if d, err := os.UserCacheDir(); err == nil {
			dir = d + "/leaseplane/wazero"
		}
		return wazero.NewFactory(context.Background(), wazero.Options{CacheDir: dir})
	}
	return nil, fmt.Errorf("unknown engine %q", name)
}

// planeConn is the client side of a leaseplane target, whichever process
// serves it: the plane's URL and key, one shared client, and how its
// workers wait.
type planeConn struct {
	url string
	key string
	// lc is the workers' shared server/client, on its own connections
	// (client.New with no http.Client, as users make it); nil with
	// --net-http, where each worker's client sends through hc.
	lc *client.Client
	hc *http.Client // HTTP/1.1 over net/http, one connection per client
	// h2 are the HTTP/2 clients (--h2c) the workers share, client i on
	// h2[i%len(h2)]; none: each worker on hc.
	h2  []*http.Client
	raw bool // drive it with rawHTTP instead of server/client
	// jitter makes polling clients sleep a random part of waitMs more.
	jitter bool
	batch  int // each worker an orchestrator for this many agents (prototype)
}

// planeOpts are the flags that shape a leaseplane target.
type planeOpts struct {
	clients  int
	raw      bool
	netHTTP  bool // server/client over net/http (--net-http)
	jitter   bool
	noLedger bool
	h2c      int // HTTP/2 connections without TLS the clients share; 0: HTTP/1.1
	batch    int // agents per orchestrator on the prototype batch route; 0: none
}

// heldCaps are serve's flags that let every client hold a request at
// once: the bench's clients share one key, where a user's agents would
// each have their own, so the per-key cap (and, past 512 clients, the
// plane-wide one and the connection cap) is raised to the client count.
func (o planeOpts) heldCaps() []string {
	if o.clients <= server.DefaultMaxHeldPerKey {
		return nil
	}
	args := []string{"--max-held-per-key", strconv.Itoa(o.clients)}
	if 2*o.clients >= server.DefaultMaxConns {
		args = append(args, "--max-conns", strconv.Itoa(4*o.clients), "--max-held", strconv.Itoa(2*o.clients))
	}
	return args
}

// conn is the client side of a plane at url with key.
func (o planeOpts) conn(url, key string) planeConn {
	c := planeConn{url: url, key: key, hc: newHTTPClient(o.clients), raw: o.raw, jitter: o.jitter, batch: o.batch}
	if !o.netHTTP && o.h2c == 0 {
		c.lc = client.New(url, key, nil)
	}
	for range o.h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		c.h2 = append(c.h2, &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 60 * time.Second})
	}
	return c
}

// closeIdle drops the clients' idle connections.
func (t *planeConn) closeIdle() {
	t.hc.CloseIdleConnections()
	if t.lc != nil {
		t.lc.CloseIdleConnections()
	}
	for _, c := range t.h2 {
		c.CloseIdleConnections()
	}
}

// inProcessPlane is the real server (server.New) in the tool's own
// process, on a loopback port (--in-process): the server and the load
// generator share one process and its CPU accounting.
type inProcessPlane struct {
	planeConn
	label string
	srv   *server.Server
	dir   string
}

func openInProcessPlane(engineName string, o planeOpts) (*inProcessPlane, error) {
	f, err := engine(engineName)
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", engineName, err)
	}
	dir, err := os.MkdirTemp("", "leaseplane-bench-")
	if err != nil {
		return nil, err
	}
	cfg := server.Config{DataDir: dir, Engine: f, Clock: time.Now, NoLedger: o.noLedger}
	if o.clients > server.DefaultMaxHeldPerKey {
		cfg.MaxHeldPerKey = o.clients // as heldCaps does for serve
		if 2*o.clients >= server.DefaultMaxConns {
			cfg.MaxConns, cfg.MaxHeld = 4*o.clients, 2*o.clients
		}
	}
	s, err := server.New(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	key, _, err := s.Bootstrap("bench")
	if err != nil {
		s.Shutdown(context.Background())
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Shutdown(context.Background())
		os.RemoveAll(dir)
		return nil, err
	}
	go s.Serve(ln)
	return &inProcessPlane{
		planeConn: o.conn("http://"+ln.Addr().String(), key),
		label:     planeLabel(engineName, o.noLedger, true), srv: s, dir: dir,
	}, nil
}

// planeLabel names a leaseplane target in the tables: leaseplane/ENGINE,
// then /no-ledger without the ledger, then /in-process when the server
// runs inside the tool.
func planeLabel(engineName string, noLedger, inProcess bool) string {
	l := "leaseplane/" + engineName
	if noLedger {
		l += "/no-ledger"
	}
	if inProcess {
		l += "/in-process"
	}
	return l
}

// newHTTPClient keeps one idle connection per bench client. It does not
// ask for gzip (DisableCompression): the plane does not compress its
// answers, and the header costs each request an extra map on both sides.
// A server that stops answering fails a request through the transport's
// timeouts (dial, and the answer's headers within 60 s: a held acquire
// waits at most 30 s), not http.Client.Timeout, which costs each request
// a deadline context and a timer (BenchmarkPair in server/client).
func newHTTPClient(clients int) *http.Client {
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext, ResponseHeaderTimeout: 60 * time.Second}
	return &http.Client{Transport: tr}
}

func (t *inProcessPlane) name() string { return t.label }

func (t *inProcessPlane) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.srv.Shutdown(ctx)
	t.closeIdle()
	os.RemoveAll(t.dir)
	return err
}

// commitStats reads the commit counters from the server's /metrics; zero
// when they cannot be read.
func (t *planeConn) commitStats() commitStats {
	m := t.metrics()
	return commitStats{
		commits:        m["leaseplane_commit_batch_commands_count"],
		commands:       m["leaseplane_commit_batch_commands_sum"],
		seconds:        m["leaseplane_commit_duration_seconds_sum"],
		releases:       m[`leaseplane_request_duration_seconds_count{op="release"}`],
		releaseSeconds: m[`leaseplane_request_duration_seconds_sum{op="release"}`],
	}
}

// metrics reads the server's /metrics into a map from each sample's name
// (with its labels, as printed: leaseplane_requests_total{code="200",op="release"})
// to its value; empty when they cannot be read.
func (t *planeConn) metrics() map[string]float64 {
	m := map[string]float64{}
	resp, err := t.hc.Get(t.url + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// worker makes client i: polled, it asks without waitUpToMs and sleeps
// each refusal's stampede.waitMs before asking again (the seeds' recipe);
// otherwise the plane holds its acquire until the grant.
func (t *planeConn) worker(i int, polled bool) (worker, error) {
	did := "did:bench:client:" + strconv.Itoa(i)
	if t.raw {
		raw, err := newRawHTTP(t.url, t.key)
		if err != nil {
			return nil, err
		}
		return &rawPlaneWorker{raw: raw, did: did, held: !polled, jitter: t.jitter}, nil
	}
	hc := t.hc
	if len(t.h2) > 0 {
		hc = t.h2[i%len(t.h2)]
	}
	lc := t.lc
	if lc == nil {
		lc = client.New(t.url, t.key, hc)
	}
	if t.batch > 0 {
		w := &batchWorker{c: lc}
		for j := range t.batch {
			w.dids = append(w.dids, "did:bench:client:"+strconv.Itoa(i*t.batch+j))
		}
		return w, nil
	}
	return &planeWorker{c: lc, did: did, leases: map[string]string{}, jitter: t.jitter, polled: polled}, nil
}

// planeWorker is a leaseplane user on server/client. Held (the default),
// client.Holder waits for a lease in requests the plane holds
// (?waitUpToMs) until the grant; polled, it asks without waiting and
// sleeps each refusal's stampede.waitMs before asking again. The release
// names the lease it got.
type planeWorker struct {
	c      *client.Client
	did    string
	leases map[string]string // resource → lease id held
	jitter bool
	polled bool
}

// backOff sleeps a refusal's waitMs, with jitter (jitterSleep) or exactly.
func backOff(ctx context.Context, waitMs int64, jitter bool) error {
	d := time.Duration(waitMs) * time.Millisecond
	if jitter {
		return jitterSleep(ctx, d)
	}
	return sleep(ctx, d)
}

// jitterSleep sleeps d and a random part of it more (at most half, at
// most 500 ms: within the 1 s a claim outlives its waitMs), so waiters
// refused together do not come back together.
func jitterSleep(ctx context.Context, d time.Duration) error {
	d += rand.N(min(d/2, 500*time.Millisecond) + 1)
	return sleep(ctx, d)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (w *planeWorker) acquire(ctx context.Context, res string) error {
	var l *client.Lease
	var err error
	if w.polled {
		l, err = w.poll(ctx, res)
	} else {
		h := client.Holder{Client: w.c, Req: client.AcquireRequest{Resource: res, ActorDid: w.did}}
		l, err = h.Acquire(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Leave the queue, as a user giving up would.
			w.c.Release(context.WithoutCancel(ctx), client.ReleaseRequest{Resource: res, ActorDid: w.did})
		}
		return err
	}
	w.leases[res] = l.ID
	return nil
}

// poll is the polling recipe: acquire; on lease_held sleep the refusal's
// stampede.waitMs (plus a random part with --jitter) and ask again.
func (w *planeWorker) poll(ctx context.Context, res string) (*client.Lease, error) {
	req := client.AcquireRequest{Resource: res, ActorDid: w.did}
	for {
		a, err := w.c.Acquire(ctx, req)
		if err != nil {
			return nil, err
		}
		if a.OK && a.Lease != nil {
			return a.Lease, nil
		}
		if a.Reason != kernel.ReasonLeaseHeld || a.Stampede == nil {
			return nil, fmt.Errorf("acquire refused: %s", a.Raw)
		}
		if err := backOff(ctx, a.Stampede.WaitMs, w.jitter); err != nil {
			return nil, err
		}
	}
}

func (w *planeWorker) release(ctx context.Context, res string) error {
	a, err := w.c.Release(ctx, client.ReleaseRequest{Resource: res, ActorDid: w.did, LeaseID: w.leases[res]})
	delete(w.leases, res)
	if err != nil {
		return err
	}
	if !a.OK || !a.Released {
		return fmt.Errorf("release answered %s", a.Raw)
	}
	return nil
}

func (w *planeWorker) close() {}

// rawPlaneWorker is planeWorker on the minimal HTTP client: the same
// requests and waiting, less of the load generator's CPU.
type rawPlaneWorker struct {
	raw    *rawHTTP
	did    string
	held   bool // ask with ?waitUpToMs=30000
	jitter bool
}

func (w *rawPlaneWorker) body(res string) []byte {
	return []byte(`{"resource":"` + res + `","actorDid":"` + w.did + `"}`)
}

func (w *rawPlaneWorker) acquire(ctx context.Context, res string) error {
	path := client.PathLease
	if w.held {
		path += "?waitUpToMs=30000"
	}
	for {
		status, ans, err := w.raw.do("POST", path, w.body(res))
		if err != nil {
			return err
		}
		switch status {
		case http.StatusOK:
			return nil
		case http.StatusConflict:
			var a client.Answer
			if err := json.Unmarshal(ans, &a); err != nil {
				return fmt.Errorf("decoding a refusal: %w", err)
			}
			if a.Reason != kernel.ReasonLeaseHeld || a.Stampede == nil {
				return fmt.Errorf("refused: %s", ans)
			}
			if w.held {
				continue // held to its end: ask again at once
			}
			if err := backOff(ctx, a.Stampede.WaitMs, w.jitter); err != nil {
				w.raw.do("POST", client.PathRelease, w.body(res))
				return err
			}
		default:
			return fmt.Errorf("HTTP %d %s", status, ans)
		}
	}
}

func (w *rawPlaneWorker) release(ctx context.Context, res string) error {
	status, ans, err := w.raw.do("POST", client.PathRelease, w.body(res))
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("HTTP %d %s", status, ans)
	}
	return nil
}

func (w *rawPlaneWorker) close() { w.raw.close() }

// bareTarget is the lease routes on a Go map behind net/http: no kernel, no
// disk, no keys, no queue (a refused client retries after 1 ms). It shows
// what the HTTP stack and the load generator cost by themselves.
type bareTarget struct {
	hs  *http.Server
	url string
	mu  sync.Mutex
	m   map[string]string // resource → holder
}

// decodeRequest reads r's JSON body as a T; when it does not decode, it
// answers 400 invalid_request.
func decodeRequest[T any](w http.ResponseWriter, r *http.Request) (T, bool) {
	var req T
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"ok":false,"reason":"invalid_request"}`, 400)
		return req, false
	}
	return req, true
}

func openBare(clients int) (target, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &bareTarget{m: map[string]string{}, url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+client.PathLease, func(w http.ResponseWriter, r *http.Request) {
		req, ok := decodeRequest[client.AcquireRequest](w, r)
		if !ok {
			return
		}
		t.mu.Lock()
		h, held := t.m[req.Resource]
		if !held || h == req.ActorDid {
			t.m[req.Resource] = req.ActorDid
		}
		t.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if held && h != req.ActorDid {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"ok":false,"reason":"lease_held","holder":"`+h+`","stampede":{"admitted":[],"waitMs":1}}`)
			return
		}
		io.WriteString(w, `{"ok":true,"lease":{"id":"x","resource":"`+req.Resource+`","holder":"`+req.ActorDid+`"}}`)
	})
	mux.HandleFunc("POST "+client.PathRelease, func(w http.ResponseWriter, r *http.Request) {
		req, ok := decodeRequest[client.ReleaseRequest](w, r)
		if !ok {
			return
		}
		t.mu.Lock()
		released := t.m[req.Resource] == req.ActorDid
		if released {
			delete(t.m, req.Resource)
		}
		t.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true,"released":`+strconv.FormatBool(released)+`}`)
	})
	t.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go t.hs.Serve(ln)
	return t, nil
}

func (t *bareTarget) name() string { return "bare-map" }

func (t *bareTarget) worker(i int, _ bool) (worker, error) {
	raw, err := newRawHTTP(t.url, "")
	if err != nil {
		return nil, err
	}
	return &rawPlaneWorker{raw: raw, did: "did:bench:client:" + strconv.Itoa(i)}, nil
}

func (t *bareTarget) close() error { return t.hs.Close() }
