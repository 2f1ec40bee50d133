package main

// Availability attacks against the real binary: an attacker from
// 127.0.0.2 (and the addresses after it) that needs no key, a tenant from
// 127.0.0.1 that must still be served. The tests count what was answered;
// their only clocks are generous watchdogs against a hang.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/cmd/internal/keyless"
	"github.com/leaseplane/leaseplane/server/servertest"
)

// watchdog bounds every wait of these tests: far above what any answer
// takes on a loaded machine, so that only a hang trips it.
const watchdog = 60 * time.Second

// startHolding runs the binary on a new data folder with the extra serve
// flags args, and returns it, the folder and a workspace key whose agent
// didRelease holds lock:r.
func startHolding(t *testing.T, args ...string) (c *child, data, ws string) {
	t.Helper()
	data = t.TempDir()
	c = startChildArgs(t, data, args...)
	ws = keysCLI(t, "create", "--data", data, "--workspace", "default")
	if a := e2eDo(t, "POST", c.url+"/api/v1/acp/coordination/lease", ws, `{"resource":"lock:r","actorDid":"`+didRelease+`"}`); a.status != 200 {
		t.Fatalf("holder: %d %s", a.status, a.raw)
	}
	return c, data, ws
}

// dialFrom opens a TCP connection to the server at url from the local
// address ip (127.0.0.2 for the attacker).
func dialFrom(ip, url string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: timeout}
	return d.Dial("tcp", strings.TrimPrefix(url, "http://"))
}

// tenantClient is an HTTP client from 127.0.0.1; keepAlive false opens a
// fresh connection for every request.
func tenantClient(keepAlive bool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: watchdog}
	return &http.Client{Timeout: watchdog, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: !keepAlive}}
}

// answerAndClose reads one response from c and then waits for the
// server to close c; it says what went wrong, or "".
func answerAndClose(c net.Conn) (status int, problem string) {
	c.SetReadDeadline(time.Now().Add(watchdog))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, "no answer: " + err.Error()
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); err == nil {
		return resp.StatusCode, "more bytes after the answer"
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return resp.StatusCode, "answered, but the connection is still open"
	}
	return resp.StatusCode, ""
}

// TestStalledBodies sends, on every route, headers that announce a body of
// 100 bytes and then only its first byte, without a key, with a made-up
// key and with a valid one: each must be answered and its connection
// closed by the server (a refusal before the body is read is never
// followed by a read of the rest).
func TestStalledBodies(t *testing.T) {
	data := t.TempDir()
	c := startChildArgs(t, data)
	op := keysCLI(t, "create", "--data", data, "--workspace", "default", "--operator")
	routes := []string{
		"POST /api/v1/acp/coordination/lease", "POST /api/v1/acp/coordination/release", "GET /api/v1/acp/coordination/wait",
		"POST /api/v1/acp/operator/suspend", "POST /api/v1/acp/operator/resume", "POST /api/v1/acp/operator/forget",
		"POST /mcp", "POST /api/v1/drills/run", "PUT /api/v1/drills/cadence", "POST /api/v1/detection/run",
		"POST /api/v1/ledger/exported", "GET /api/v1/ledger/entries", "POST /api/v1/nope", "GET /api/v1/whoami",
		"POST /healthz", "GET /metrics", "POST /playground",
	}
	keys := map[string]string{"no key": "", "a made-up key": "lp_bogus", "a valid key": op}
	type probe struct {
		what string
		conn net.Conn
	}
	var probes []probe
	for _, r := range routes {
		for kind, key := range keys {
			// A few from each address: one address may hold only its share.
			conn, err := dialFrom(fmt.Sprintf("127.0.0.%d", 2+len(probes)/4), c.url, watchdog)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			method, path, _ := strings.Cut(r, " ")
			auth := ""
			if key != "" {
				auth = "Authorization: Bearer " + key + "\r\n"
			}
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", method, path, auth)
			probes = append(probes, probe{r + " with " + kind, conn})
		}
	}
	var wg sync.WaitGroup
	problems := make([]string, len(probes))
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, pr := answerAndClose(p.conn); pr != "" {
				problems[i] = fmt.Sprintf("%s: %d %s", p.what, st, pr)
			}
		}()
	}
	wg.Wait()
	failed := 0
	for _, p := range problems {
		if p != "" {
			failed++
			t.Error(p)
		}
	}
	t.Logf("%d stalled bodies, %d answered and closed", len(probes), len(probes)-failed)
}

// tenantRounds has a tenant do n lease-and-release pairs on fresh
// connections and n on one kept-alive connection, and counts the answers
// it got (any status below 500).
func tenantRounds(t *testing.T, url, key string, n int) (answered int) {
	t.Helper()
	for _, keep := range []bool{false, true} {
		hc := tenantClient(keep)
		for i := range n {
			for _, path := range []string{"/api/v1/acp/coordination/lease", "/api/v1/acp/coordination/release"} {
				req, _ := http.NewRequest("POST", url+path, strings.NewReader(fmt.Sprintf(`{"resource":"lock:tenant/%d","actorDid":"did:example:tenant"}`, i)))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := hc.Do(req)
				if err != nil {
					t.Logf("tenant %s (keep-alive %v): %v", path, keep, err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 500 {
					answered++
				}
			}
		}
		hc.CloseIdleConnections()
	}
	return answered
}

// TestConnectionsWithoutKey fills the plane with sockets that present no
// valid key (idle, silent, stalled bodies, idle keep-alive), from ten
// addresses, ten times the budget the plane gives such connections (a
// quarter of its 1024): a tenant of another workspace must still get
// every answer.
func TestConnectionsWithoutKey(t *testing.T) {
	data := t.TempDir()
	c := startChildArgs(t, data)
	tenant := keysCLI(t, "create", "--data", data, "--workspace", "tenant", "--new-workspace")
	const budget = 1024 / 4
	a := &keyless.Attacker{URL: c.url, Addrs: 10, Pace: 500 * time.Millisecond}
	a.Start(10 * budget)
	defer a.Stop()
	// Let the attacker take what it can before the tenant asks.
	for a.Opened.Load() < 10*budget {
		time.Sleep(100 * time.Millisecond)
	}
	const n = 20
	answered := tenantRounds(t, c.url, tenant, n)
	resp, err := tenantClient(false).Get(c.url + "/healthz")
	if err == nil {
		resp.Body.Close()
	}
	t.Logf("attacker: %d sockets opened, %d open at most at once (its side); tenant: %d of %d answered; /healthz: %v",
		a.Opened.Load(), a.MaxOpen.Load(), answered, 4*n, errors.Join(err))
	if answered != 4*n || err != nil {
		t.Fatalf("the tenant got %d answers of %d while the attacker held sockets without a key (healthz: %v)", answered, 4*n, err)
	}
}

// heldOutcome is what a held request came to.
type heldOutcome struct {
	status int
	body   string
	err    error
}

// heldAsk sends a held lease request (?waitUpToMs=30000) for actor on
// resource with key; its outcome goes to out once answered (or failed).
func heldAsk(hc *http.Client, url, key, resource, actor string, out chan<- heldOutcome) {
	req, _ := http.NewRequest("POST", url+"/api/v1/acp/coordination/lease?waitUpToMs=30000",
		strings.NewReader(`{"resource":"`+resource+`","actorDid":"`+actor+`"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		out <- heldOutcome{err: err}
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	out <- heldOutcome{status: resp.StatusCode, body: string(b), err: err}
}

// TestHeldRequestFlood: one key asks 1,300 held requests on a resource
// another agent holds, each for an agent of its own (an agent's new held
// acquire of a resource cancels its ask there, SPEC "Held asks"). Past its
// cap (32 a key) they are refused 429 limit_exceeded heldRequests; those
// within it stay held; a tenant of another workspace is served meanwhile.
func TestHeldRequestFlood(t *testing.T) {
	data := t.TempDir()
	c := startChildArgs(t, data)
	holder := keysCLI(t, "create", "--data", data, "--workspace", "default")
	flood := keysCLI(t, "create", "--data", data, "--workspace", "default")
	tenant := keysCLI(t, "create", "--data", data, "--workspace", "tenant", "--new-workspace")
	if a := e2eDo(t, "POST", c.url+"/api/v1/acp/coordination/lease", holder, `{"resource":"lock:flood","actorDid":"`+didRelease+`"}`); a.status != 200 {
		t.Fatalf("holder: %d %s", a.status, a.raw)
	}
	const n, perKey = 1300, 32
	out := make(chan heldOutcome, n)
	// The flood comes from 127.0.0.2 over at most 48 connections at a
	// time (under the 64 an address may open before presenting its key):
	// its 429s come back on the connections that are not held.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: watchdog}
	hc := &http.Client{Timeout: 2 * watchdog, Transport: &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: 48, MaxIdleConnsPerHost: 48}}
	defer hc.CloseIdleConnections()
	for i := range n {
		go heldAsk(hc, c.url, flood, "lock:flood", fmt.Sprintf("did:example:flood-%d", i), out)
	}
	// Every request past the cap is refused at once; the rest wait.
	refused, granted, other := 0, 0, 0
	for refused+granted+other < n-perKey {
		select {
		case o := <-out:
			switch {
			case o.status == 429 && strings.Contains(o.body, `"limit":"heldRequests"`):
				refused++
			case o.status == 200:
				granted++
			default:
				other++
				t.Logf("held request: %d %s %v", o.status, o.body, o.err)
			}
		case <-time.After(watchdog):
			t.Fatalf("after %d refused, %d answered, %d failed, no more answers: the rest are all held (cap %d a key)", refused, granted, other, perKey)
		}
	}
	answered := tenantRounds(t, c.url, tenant, 5)
	t.Logf("held requests: %d refused 429 heldRequests, %d answered otherwise, %d failed; tenant: %d of %d answered", refused, granted, other, answered, 20)
	if answered != 20 || refused != n-perKey {
		t.Fatalf("tenant answered %d of 20; %d refused heldRequests (want %d)", answered, refused, n-perKey)
	}
}

// untilWaiter polls wait until actor waits on some resource (a watchdog
// bounds it).
func untilWaiter(t *testing.T, url, key, actor string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < watchdog; time.Sleep(20 * time.Millisecond) {
		if a := e2eDo(t, "GET", url+"/api/v1/acp/coordination/wait", key, ""); strings.Contains(string(a.raw), `"actorDid":"`+actor+`"`) {
			return
		}
	}
	t.Fatalf("%s never became a waiter", actor)
}

// TestHeldAcrossRevocation: an agent's held request ends 401 as soon as
// its key is revoked, and is not granted when the resource frees after.
func TestHeldAcrossRevocation(t *testing.T) {
	data := t.TempDir()
	c := startChildArgs(t, data)
	ws := keysCLI(t, "create", "--data", data, "--workspace", "default")
	agent := keysCLI(t, "create", "--data", data, "--workspace", "default", "--agent", didCost)
	lease := c.url + "/api/v1/acp/coordination/lease"
	if a := e2eDo(t, "POST", lease, ws, `{"resource":"lock:r","actorDid":"`+didRelease+`"}`); a.status != 200 {
		t.Fatalf("holder: %d %s", a.status, a.raw)
	}
	out := make(chan heldOutcome, 1)
	go heldAsk(tenantClient(false), c.url, agent, "lock:r", didCost, out)
	untilWaiter(t, c.url, ws, didCost)
	keysCLI(t, "revoke", "--data", data, agent)
	// Free the resource: a request still held would be granted now.
	if a := e2eDo(t, "POST", c.url+"/api/v1/acp/coordination/release", ws, `{"resource":"lock:r","actorDid":"`+didRelease+`"}`); a.status != 200 {
		t.Fatalf("release: %d %s", a.status, a.raw)
	}
	var o heldOutcome
	select {
	case o = <-out:
	case <-time.After(watchdog):
		t.Fatal("the held request of a revoked key was never answered")
	}
	w := e2eDo(t, "GET", c.url+"/api/v1/acp/coordination/wait", ws, "")
	t.Logf("held request after its key's revocation: %d %s; wait: %s", o.status, o.body, w.raw)
	if o.status != 401 || !strings.Contains(o.body, `"unauthorized"`) {
		t.Fatalf("held request after its key's revocation: %d %s %v; want 401 unauthorized", o.status, o.body, o.err)
	}
	if strings.Contains(string(w.raw), `"holder":"`+didCost+`"`) {
		t.Fatalf("the revoked key's agent holds the lease: %s", w.raw)
	}
}

// TestShutdownWithHeldAndStalled: SIGTERM with held requests and 200
// stalled sockets (half-sent headers, stalled bodies with a valid key,
// idle keep-alive connections, a client that reads no answer) answers
// every held client 503, and the process exits well before its drain
// timeout (10 minutes here) would have let it.
func TestShutdownWithHeldAndStalled(t *testing.T) {
	c, _, ws := startHolding(t, "--drain-timeout", "10m")
	const held = 20
	out := make(chan heldOutcome, held)
	hc := tenantClient(true)
	for i := range held {
		go heldAsk(hc, c.url, ws, "lock:r", fmt.Sprintf("did:example:w%d", i), out)
	}
	for i := range held {
		untilWaiter(t, c.url, ws, fmt.Sprintf("did:example:w%d", i))
	}
	for i := range 200 {
		conn, err := dialFrom(fmt.Sprintf("127.0.0.%d", 2+i/40), c.url, watchdog)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		switch i % 4 {
		case 0:
			io.WriteString(conn, "GET /api/v1/acp/coordination/wait HTTP/1.1\r\nHost: x\r\nAuthor")
		case 1:
			fmt.Fprintf(conn, "POST /api/v1/acp/coordination/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{", ws)
		case 2:
			fmt.Fprintf(conn, "GET /api/v1/acp/coordination/wait HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", ws)
			http.ReadResponse(bufio.NewReader(conn), nil)
		case 3:
			// Many requests, no answer read: the server's writes stall.
			for range 200 {
				fmt.Fprintf(conn, "GET /api/v1/acp/coordination/wait HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", ws)
			}
		}
	}
	if err := c.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	var unavailable, otherwise int
	for range held {
		select {
		case o := <-out:
			if o.status == 503 && strings.Contains(o.body, `"unavailable"`) {
				unavailable++
			} else {
				otherwise++
				t.Logf("held client at shutdown: %d %s %v", o.status, o.body, o.err)
			}
		case <-time.After(2 * watchdog):
			t.Fatalf("held clients: %d answered 503, %d otherwise, the rest never", unavailable, otherwise)
		}
	}
	select {
	case err := <-exited:
		t.Logf("held clients: %d answered 503, %d otherwise; the process exited (%v)", unavailable, otherwise, err)
		if err != nil {
			t.Errorf("serve exited: %v", err)
		}
	case <-time.After(2 * watchdog):
		t.Fatal("serve is still draining stalled sockets")
	}
	if unavailable != held {
		t.Fatalf("%d of %d held clients answered 503", unavailable, held)
	}
}

// TestExportMarkNeedsOperator: a workspace key cannot set the export mark
// (the root it needs is in every public checkpoint), so retention cannot
// be made to drop what nobody exported; an operator key can.
func TestExportMarkNeedsOperator(t *testing.T) {
	c, data, ws := startHolding(t, "--ledger-retention", "1ms")
	var size, root string
	for start := time.Now(); size == "" || size == "0"; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > watchdog {
			t.Fatal("the ledger never signed the grant")
		}
		cp := e2eDo(t, "GET", c.url+"/api/v1/ledger/checkpoint", ws, "")
		if lines := strings.Split(string(cp.raw), "\n"); len(lines) > 2 {
			size, root = lines[1], lines[2]
		}
	}
	mark := c.url + "/api/v1/ledger/exported?size=" + size + "&root=" + strings.NewReplacer("+", "%2B", "/", "%2F", "=", "%3D").Replace(root)
	a := e2eDo(t, "POST", mark, ws, "")
	t.Logf("the export mark with a workspace key, from the public checkpoint: %d %s", a.status, a.raw)
	if a.status != 403 || a.str("reason") != "forbidden" {
		t.Fatalf("the export mark with a workspace key: %d %s; want 403 forbidden", a.status, a.raw)
	}
	op := keysCLI(t, "create", "--data", data, "--workspace", "default", "--operator")
	if a := e2eDo(t, "POST", mark, op, ""); a.status != 200 {
		t.Fatalf("the export mark with an operator key: %d %s", a.status, a.raw)
	}
}

// TestMCPStdioMalformedLines feeds `leaseplane mcp` (the real binary, on
// stdio, forwarding to a running plane) lines that are not JSON-RPC
// messages among real calls: each is answered with its JSON-RPC error, the
// session goes on, and every call is answered, the one sent before the
// bad lines included.
func TestMCPStdioMalformedLines(t *testing.T) {
	data := t.TempDir()
	c := startChildArgs(t, data)
	cmd := exec.Command(servertest.Binary(t), "mcp")
	cmd.Env = append(os.Environ(), "LEASEPLANE_URL="+c.url, "LEASEPLANE_KEY="+c.key)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	call := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"coordination.lease.acquire","arguments":{"resource":"lock:mcp/%d","actorDid":"did:example:mcp"}}}`, id, id)
	}
	bad := []struct {
		name, line string
		code       int
	}{
		{"not JSON", "this is not json", -32700},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":90,\"method\":\"tools/list\",\"x\":\"\xff\xfe\"}", -32700},
		{"an empty batch", "[]", -32600},
		{"5,000 deep", strings.Repeat("[", 5000) + strings.Repeat("]", 5000), -32600},
		{"2 MiB", `{"jsonrpc":"2.0","id":91,"method":"tools/list","params":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`, -32600},
		{"a number", "42", -32600},
		{"no jsonrpc member", `{"id":92,"method":"tools/list"}`, -32600},
	}
	go func() {
		io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`+"\n")
		io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
		io.WriteString(stdin, call(2)+"\n")
		for i, b := range bad {
			io.WriteString(stdin, b.line+"\n")
			io.WriteString(stdin, call(10+i)+"\n")
		}
		stdin.Close()
	}()
	answered := map[int]bool{}
	var codes []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m struct {
				ID     *int            `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("an answer that is not JSON: %v: %s", err, sc.Bytes())
				continue
			}
			switch {
			case m.Error != nil && (m.ID == nil || *m.ID >= 90):
				codes = append(codes, m.Error.Code)
			case m.ID != nil && m.Result != nil:
				answered[*m.ID] = true
			default:
				t.Errorf("unexpected answer: %s", sc.Bytes())
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * watchdog):
		t.Fatal("leaseplane mcp never finished its answers")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("leaseplane mcp exited: %v", err)
	}
	t.Logf("error codes answered: %v; calls answered: %d of %d", codes, len(answered), 2+len(bad))
	for i, b := range bad {
		if i >= len(codes) || codes[i] != b.code {
			t.Errorf("%s: want error %d, got the codes %v", b.name, b.code, codes)
		}
	}
	for _, id := range append([]int{1, 2}, func() (ids []int) {
		for i := range bad {
			ids = append(ids, 10+i)
		}
		return ids
	}()...) {
		if !answered[id] {
			t.Errorf("call %d was not answered", id)
		}
	}
}

// TestMetricsAndModes: /metrics without the metrics token names no
// workspace (with it, the per-workspace series are there); the data
// folder is 0700 and every file in it 0600, even in a folder made 0755
// with a database file 0644 before the plane first ran.
func TestMetricsAndModes(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "leaseplane.db"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("a-metrics-token-of-some-length\n"), 0o600)
	c := startChildArgs(t, data, "--metrics-token-file", tokenFile)
	secret := keysCLI(t, "create", "--data", data, "--workspace", "secret-tenant-name", "--new-workspace")
	if a := e2eDo(t, "POST", c.url+"/api/v1/acp/coordination/lease", secret, `{"resource":"lock:r","actorDid":"`+didRelease+`"}`); a.status != 200 {
		t.Fatalf("lease: %d %s", a.status, a.raw)
	}
	for _, key := range []string{"", secret, "a-metrics-token-of-some-lengtx"} {
		m := e2eDo(t, "GET", c.url+"/metrics", key, "")
		if m.status != 200 || bytes.Contains(m.raw, []byte("secret-tenant-name")) || bytes.Contains(m.raw, []byte(`workspace="default"`)) {
			t.Errorf("/metrics with key %q: %d, names a workspace", key, m.status)
		}
	}
	m := e2eDo(t, "GET", c.url+"/metrics", "a-metrics-token-of-some-length", "")
	if !bytes.Contains(m.raw, []byte(`leaseplane_workspace_leases{workspace="secret-tenant-name"} 1`)) {
		t.Errorf("/metrics with the metrics token lacks the workspace's series: %.3000s", m.raw)
	}
	var modes []string
	filepath.WalkDir(data, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone meanwhile (a -shm or -journal file)
		}
		allowed := os.FileMode(0o600)
		if d.IsDir() {
			allowed = 0o700
		}
		if fi.Mode().Perm()&^allowed != 0 {
			modes = append(modes, fmt.Sprintf("%s %v", p, fi.Mode().Perm()))
		}
		return nil
	})
	if len(modes) > 0 {
		t.Fatalf("readable by others in the data folder: %v", modes)
	}
}

// TestProductBinaryHasNoTestFaults: go build ./cmd/leaseplane gives a
// serve without --test-fault or --test-drills (they refuse as unknown
// flags); only a binary built with the test faults' tag has them.
// The product binary links neither the faults' package nor the server's
// setter of them (their names are in any Go binary that has them: the
// test binary must, for the check to mean anything).
func TestProductBinaryHasNoTestFaults(t *testing.T) {
	for _, b := range []struct {
		bin  string
		want bool
	}{{servertest.Binary(t), false}, {servertest.TestBinary(t), true}} {
		code, err := os.ReadFile(b.bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"cmd/leaseplane/internal/testfaults", "SetTestFaults"} {
			if bytes.Contains(code, []byte(name)) != b.want {
				t.Errorf("%s: has %s: %v, want %v", b.bin, name, !b.want, b.want)
			}
		}
	}
	_, out := help(servertest.Binary(t), "--help")
	if strings.Contains(out, "test-fault") || strings.Contains(out, "test-drills") || strings.Contains(out, "grant-twice") {
		t.Errorf("serve --help of the product binary offers test faults:\n%s", out)
	}
	if code, out := help(servertest.Binary(t), "--test-fault", "grant-twice", "--data", t.TempDir()); code != 2 || !strings.Contains(out, "flag provided but not defined: -test-fault") {
		t.Errorf("serve --test-fault grant-twice on the product binary: exit %d: %s", code, out)
	}
	if _, out := help(servertest.TestBinary(t), "--help"); !strings.Contains(out, "--test-fault") || !strings.Contains(out, "--test-drills") {
		t.Errorf("serve --help of the test binary lacks the test faults:\n%s", out)
	}
}

// help runs bin serve with args and returns its exit code and output.
func help(bin string, args ...string) (int, string) {
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}
