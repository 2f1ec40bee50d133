package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/leaseplane/leaseplane/server/client"
)

// The baselines of `leaseplane bench`: Redis and etcd, each started by the
// bench on a loopback port and driven the way their users take a lock.

// redisTarget is a redis-server without persistence.
type redisTarget struct {
	d    *daemon
	addr string
	sha  string
}

// redisRelease deletes the lock only when it still holds the caller's token.
const redisRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

func openRedisTarget() (benchTarget, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	d, err := startDaemon("redis-server", []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes", "--maxclients", "10000"},
		func() error {
			c, err := dialRESP(addr)
			if err != nil {
				return err
			}
			defer c.close()
			r, err := c.do("PING")
			if err != nil {
				return err
			}
			if r != "+PONG" {
				return fmt.Errorf("PING answered %q", r)
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	c, err := dialRESP(addr)
	if err != nil {
		d.stop()
		return nil, err
	}
	defer c.close()
	sha, err := c.do("SCRIPT", "LOAD", redisRelease)
	if err != nil || len(sha) < 2 || sha[0] != '$' {
		d.stop()
		return nil, fmt.Errorf("redis SCRIPT LOAD: %q %v", sha, err)
	}
	return &redisTarget{d: d, addr: addr, sha: sha[1:]}, nil
}

func (t *redisTarget) name() string   { return "redis" }
func (t *redisTarget) daemonPID() int { return t.d.cmd.Process.Pid }
func (t *redisTarget) close()         { t.d.stop() }

func (t *redisTarget) worker(i int) (benchWorker, error) {
	c, err := dialRESP(t.addr)
	if err != nil {
		return nil, err
	}
	return &redisWorker{c: c, sha: t.sha, token: "client-" + strconv.Itoa(i)}, nil
}

type redisWorker struct {
	c     *respConn
	sha   string
	token string
}

func (w *redisWorker) acquire(res string) (bool, int, error) {
	r, err := w.c.do("SET", res, w.token, "NX", "PX", "30000")
	switch {
	case err != nil:
		return false, 1, err
	case r == "+OK":
		return true, 1, nil
	case r == "$nil":
		return false, 1, nil
	}
	return false, 1, fmt.Errorf("redis SET NX: %q", r)
}

func (w *redisWorker) release(res string) (int, error) {
	r, err := w.c.do("EVALSHA", w.sha, "1", res, w.token)
	if err != nil {
		return 1, err
	}
	if r != ":1" {
		return 1, fmt.Errorf("redis release of %s: %q, want :1", res, r)
	}
	return 1, nil
}

func (w *redisWorker) close() { w.c.close() }

// respConn is a minimal RESP2 client: commands out as arrays of bulk
// strings, one simple reply in (status, error, integer, bulk string).
type respConn struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func dialRESP(addr string) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &respConn{conn: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (c *respConn) close() { c.conn.Close() }

// do sends one command and returns its reply as "+STATUS", ":INT",
// "$BULK", "$nil" for a null bulk string; an error reply is an error.
func (c *respConn) do(args ...string) (string, error) {
	c.w.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		c.w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if err := c.w.Flush(); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 {
		return "", fmt.Errorf("redis: short reply %q", line)
	}
	line = line[:len(line)-2]
	switch line[0] {
	case '+', ':':
		return line, nil
	case '-':
		return "", errors.New("redis: " + line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("redis: bad bulk length %q", line)
		}
		if n < 0 {
			return "$nil", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return "$" + string(buf[:n]), nil
	}
	return "", fmt.Errorf("redis: unexpected reply %q", line)
}

// etcdTarget is a single-node etcd with its data on disk (fsync on), driven
// through its HTTP/JSON gateway.
type etcdTarget struct {
	d   *daemon
	dir string
	url string
	hc  *http.Client
}

func openEtcdTarget(clients int) (benchTarget, error) {
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "leaseplane-bench-etcd-")
	if err != nil {
		return nil, err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(cport)
	purl := "http://127.0.0.1:" + strconv.Itoa(pport)
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	d, err := startDaemon("etcd", []string{"--name", "bench", "--data-dir", dir,
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "bench=" + purl, "--log-level", "error", "--logger", "zap"},
		func() error {
			resp, err := hc.Get(curl + "/health")
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Contains(b, []byte(`"health":"true"`)) {
				return fmt.Errorf("etcd /health: %s", b)
			}
			return nil
		})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &etcdTarget{d: d, dir: dir, url: curl, hc: hc}, nil
}

func (t *etcdTarget) name() string   { return "etcd" }
func (t *etcdTarget) daemonPID() int { return t.d.cmd.Process.Pid }

func (t *etcdTarget) close() {
	t.d.stop()
	t.hc.CloseIdleConnections()
	os.RemoveAll(t.dir)
}

// post sends one gateway request on the shared net/http client (or on
// raw, when given) and decodes the answer into out.
func (t *etcdTarget) post(raw *rawHTTP, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	var status int
	var body []byte
	if raw != nil {
		status, body, err = raw.do("POST", path, b)
		if err != nil {
			return err
		}
	} else {
		resp, err := t.hc.Post(t.url+path, "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		status = resp.StatusCode
	}
	if status != 200 {
		return fmt.Errorf("etcd %s: HTTP %d %s", path, status, body)
	}
	return json.Unmarshal(body, out)
}

// worker is one etcd client session: a lease of its own (as
// concurrency.NewSession grants), under which it puts its lock keys.
func (t *etcdTarget) worker(i int) (benchWorker, error) {
	var g struct {
		ID string `json:"ID"`
	}
	if err := t.post(nil, "/v3/lease/grant", map[string]any{"TTL": 600}, &g); err != nil {
		return nil, err
	}
	if g.ID == "" {
		return nil, errors.New("etcd lease grant: no ID")
	}
	id, err := strconv.ParseInt(g.ID, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("etcd lease grant: ID %q: %w", g.ID, err)
	}
	w := &etcdWorker{t: t, lease: g.ID, suffix: "/" + strconv.FormatInt(id, 16), queued: map[string]string{}}
	if !benchStdClient {
		if w.raw, err = newRawHTTP(t.url, ""); err != nil {
			return nil, err
		}
	}
	return w, nil
}

type etcdWorker struct {
	t      *etcdTarget
	lease  string
	suffix string
	// queued maps a resource to my key's create revision while I wait.
	queued map[string]string
	raw    *rawHTTP // nil: the shared net/http client
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is the end of the range of keys under prefix p (p ends in '/').
func prefixEnd(p string) string { return p[:len(p)-1] + string(rune(p[len(p)-1]+1)) }

type etcdKV struct {
	Key            string `json:"key"`
	CreateRevision string `json:"create_revision"`
}

type etcdTxnResp struct {
	Header struct {
		Revision string `json:"revision"`
	} `json:"header"`
	Succeeded bool `json:"succeeded"`
	Responses []struct {
		ResponseRange *struct {
			Kvs []etcdKV `json:"kvs"`
		} `json:"response_range"`
	} `json:"responses"`
}

// acquire is concurrency.Mutex.Lock: put my key if it is not there, and
// read the prefix's first-created key; I own the lock when that is mine.
// A client that does not own keeps its key (its place in the queue) and,
// on its next try, only reads the owner again: Lock waits for the earlier
// keys' deletion through a watch; the bench polls instead.
func (w *etcdWorker) acquire(res string) (bool, int, error) {
	pfx := "/lock/" + res + "/"
	my := b64(pfx + w.suffix[1:])
	ownerRange := map[string]any{
		"key": b64(pfx), "range_end": b64(prefixEnd(pfx)),
		"sort_order": "ASCEND", "sort_target": "CREATE", "limit": "1"}
	if rev, ok := w.queued[res]; ok {
		var r struct {
			Kvs []etcdKV `json:"kvs"`
		}
		if err := w.t.post(w.raw, "/v3/kv/range", ownerRange, &r); err != nil {
			return false, 1, err
		}
		if len(r.Kvs) > 0 && r.Kvs[0].CreateRevision == rev {
			delete(w.queued, res)
			return true, 1, nil
		}
		return false, 1, nil
	}
	owner := map[string]any{"request_range": ownerRange}
	txn := map[string]any{
		"compare": []any{map[string]any{"target": "CREATE", "key": my, "create_revision": "0", "result": "EQUAL"}},
		"success": []any{map[string]any{"request_put": map[string]any{"key": my, "value": "", "lease": w.lease}}, owner},
		"failure": []any{map[string]any{"request_range": map[string]any{"key": my}}, owner},
	}
	var r etcdTxnResp
	if err := w.t.post(w.raw, "/v3/kv/txn", txn, &r); err != nil {
		return false, 1, err
	}
	myRev := r.Header.Revision
	if !r.Succeeded {
		if len(r.Responses) < 1 || r.Responses[0].ResponseRange == nil || len(r.Responses[0].ResponseRange.Kvs) == 0 {
			return false, 1, errors.New("etcd txn: my key is gone")
		}
		myRev = r.Responses[0].ResponseRange.Kvs[0].CreateRevision
	}
	if len(r.Responses) < 2 || r.Responses[1].ResponseRange == nil {
		return false, 1, errors.New("etcd txn: no owner range in the answer")
	}
	kvs := r.Responses[1].ResponseRange.Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision == myRev {
		return true, 1, nil
	}
	w.queued[res] = myRev
	return false, 1, nil
}

func (w *etcdWorker) del(res string) error {
	var out map[string]any
	return w.t.post(w.raw, "/v3/kv/deleterange", map[string]any{"key": b64("/lock/" + res + w.suffix)}, &out)
}

func (w *etcdWorker) release(res string) (int, error) { return 1, w.del(res) }

func (w *etcdWorker) close() {
	// Leave the queues this client still waits in.
	for res := range w.queued {
		w.del(res)
	}
	if w.raw != nil {
		w.raw.close()
	}
}

// bareTarget is the lease routes on a Go map behind net/http: no kernel, no
// disk, no keys. It shares the plane's client path, so it shows what the
// HTTP stack and the load generator cost by themselves.
type bareTarget struct {
	planeTarget
	hs *http.Server
	mu sync.Mutex
	m  map[string]string // resource → holder
}

func openBareTarget(clients int) (benchTarget, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &bareTarget{m: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+client.PathLease, func(w http.ResponseWriter, r *http.Request) {
		var req client.AcquireRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"ok":false,"reason":"invalid_request"}`, 400)
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
			io.WriteString(w, `{"ok":false,"reason":"lease_held","holder":"`+h+`"}`)
			return
		}
		io.WriteString(w, `{"ok":true,"lease":{"resource":"`+req.Resource+`","holder":"`+req.ActorDid+`"}}`)
	})
	mux.HandleFunc("POST "+client.PathRelease, func(w http.ResponseWriter, r *http.Request) {
		var req client.ReleaseRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"ok":false,"reason":"invalid_request"}`, 400)
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
	tr := &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, IdleConnTimeout: time.Minute}
	t.planeTarget = planeTarget{label: "bare-map", url: "http://" + ln.Addr().String(),
		hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	return t, nil
}

func (t *bareTarget) close() {
	t.hs.Close()
	t.hc.CloseIdleConnections()
}

// commitStats: the map commits nothing.
func (t *bareTarget) commitStats() commitStats { return commitStats{} }
