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

// planeTarget is the real server, in this process, on a loopback port.
type planeTarget struct {
	label string
	srv   *server.Server
	dir   string
	url   string
	key   string
	hc    *http.Client
	raw   bool // drive it with rawHTTP instead of server/client
	// jitter makes waiting clients sleep a random part of waitMs more.
	jitter bool
}

func openPlane(engineName string, clients int, raw, jitter, noLedger bool) (*planeTarget, error) {
	f, err := engine(engineName)
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", engineName, err)
	}
	dir, err := os.MkdirTemp("", "leaseplane-bench-")
	if err != nil {
		return nil, err
	}
	s, err := server.New(server.Config{DataDir: dir, Engine: f, Clock: time.Now, NoLedger: noLedger})
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
	return &planeTarget{
		label: label(engineName, noLedger), srv: s, dir: dir, url: "http://" + ln.Addr().String(), key: key,
		hc: newHTTPClient(clients), raw: raw, jitter: jitter,
	}, nil
}

func label(engineName string, noLedger bool) string {
	if noLedger {
		return "leaseplane/" + engineName + "/no-ledger"
	}
	return "leaseplane/" + engineName
}

// newHTTPClient keeps one idle connection per bench client.
func newHTTPClient(clients int) *http.Client {
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

func (t *planeTarget) name() string { return t.label }

func (t *planeTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.srv.Shutdown(ctx)
	t.hc.CloseIdleConnections()
	os.RemoveAll(t.dir)
}

// commitStats reads the commit counters from the server's /metrics; zero
// when they cannot be read.
func (t *planeTarget) commitStats() commitStats {
	resp, err := t.hc.Get(t.url + "/metrics")
	if err != nil {
		return commitStats{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return commitStats{}
	}
	var c commitStats
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "leaseplane_commit_batch_commands_count":
			c.commits = v
		case "leaseplane_commit_batch_commands_sum":
			c.commands = v
		case "leaseplane_commit_duration_seconds_sum":
			c.seconds = v
		}
	}
	return c
}

func (t *planeTarget) worker(i int) (worker, error) {
	did := "did:bench:client:" + strconv.Itoa(i)
	if t.raw {
		raw, err := newRawHTTP(t.url, t.key)
		if err != nil {
			return nil, err
		}
		return &rawPlaneWorker{raw: raw, did: did}, nil
	}
	return &planeWorker{c: client.New(t.url, t.key, t.hc), did: did, leases: map[string]string{}, jitter: t.jitter}, nil
}

// planeWorker is a leaseplane user: client.Holder waits for a lease as
// the plane advises (sleeping the refusal's stampede.waitMs), and the
// release names the lease it got.
type planeWorker struct {
	c      *client.Client
	did    string
	leases map[string]string // resource → lease id held
	jitter bool
}

// jitterSleep sleeps d and a random part of it more (at most half, at
// most 500 ms: within the 1 s a claim outlives its waitMs), so waiters
// refused together do not come back together.
func jitterSleep(ctx context.Context, d time.Duration) error {
	d += rand.N(min(d/2, 500*time.Millisecond) + 1)
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
	h := client.Holder{Client: w.c, Req: client.AcquireRequest{Resource: res, ActorDid: w.did}}
	if w.jitter {
		h.Sleep = jitterSleep
	}
	l, err := h.Acquire(ctx)
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
// requests and back-off, less of the load generator's CPU.
type rawPlaneWorker struct {
	raw *rawHTTP
	did string
}

func (w *rawPlaneWorker) body(res string) []byte {
	return []byte(`{"resource":"` + res + `","actorDid":"` + w.did + `"}`)
}

func (w *rawPlaneWorker) acquire(ctx context.Context, res string) error {
	for {
		status, ans, err := w.raw.do("POST", client.PathLease, w.body(res))
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
			select {
			case <-ctx.Done():
				w.raw.do("POST", client.PathRelease, w.body(res))
				return ctx.Err()
			case <-time.After(time.Duration(a.Stampede.WaitMs) * time.Millisecond):
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

func (t *bareTarget) worker(i int) (worker, error) {
	raw, err := newRawHTTP(t.url, "")
	if err != nil {
		return nil, err
	}
	return &rawPlaneWorker{raw: raw, did: "did:bench:client:" + strconv.Itoa(i)}, nil
}

func (t *bareTarget) close() { t.hs.Close() }
