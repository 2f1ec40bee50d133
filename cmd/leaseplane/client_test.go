package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
	"github.com/leaseplane/leaseplane/server/servertest"
	"github.com/leaseplane/leaseplane/server/store"
)

// testPlane is the real server on 127.0.0.1:0 with a temporary data
// folder, a workspace key and an operator key of the same workspace.
type testPlane struct {
	srv      *server.Server
	url      string
	key      string
	operator string
	clock    *servertest.Clock
}

func startPlane(t *testing.T) *testPlane {
	t.Helper()
	clk := servertest.NewClock()
	s, err := server.New(server.Config{DataDir: t.TempDir(), Engine: kernel.Native, Clock: clk.Now, AfterFunc: clk.AfterFunc})
	if err != nil {
		t.Fatal(err)
	}
	key, created, err := s.Bootstrap("clienttest")
	if err != nil || !created {
		t.Fatalf("bootstrap: %v (created %v)", err, created)
	}
	ws, err := s.Store().WorkspaceByName("clienttest")
	if err != nil {
		t.Fatal(err)
	}
	op, _, err := s.Store().CreateKey(ws, store.RoleOperator, "", clk.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	p := &testPlane{srv: s, url: "http://" + ln.Addr().String(), key: key, operator: op, clock: clk}
	t.Setenv("LEASEPLANE_URL", p.url)
	t.Setenv("LEASEPLANE_KEY", key)
	return p
}

// cli runs the binary's main in-process.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

func TestClientVerbs(t *testing.T) {
	p := startPlane(t)
	steps := []struct {
		args      []string
		env       map[string]string
		wantCode  int
		wantOut   string // substring of stdout
		wantErr   string // substring of stderr
		wantNoOut bool
	}{
		{args: []string{"lease", "lock:deploy", "--as", "did:web:a"}, wantCode: 0,
			wantOut: `{"ok":true,"lease":{"id":"lease_`},
		// flags before the resource work too
		{args: []string{"lease", "--as", "did:web:a", "--mode", "write", "lock:deploy"}, wantCode: 0,
			wantOut: `"holder":"did:web:a","mode":"write","fence":1`},
		{args: []string{"lease", "lock:deploy", "--as", "did:web:b"}, wantCode: 1,
			wantOut: `"reason":"lease_held"`, wantErr: "refused lease_held: held by did:web:a; retry in 50 ms"},
		{args: []string{"wait"}, wantCode: 0,
			wantOut: `"waiters":[{"actorDid":"did:web:b","mode":"write","admitted":true`},
		{args: []string{"lease", "lock:deploy", "--as", "did:web:a", "--mode", "scribble"}, wantCode: 1,
			wantOut: `"reason":"invalid_request"`, wantErr: "invalid_request (HTTP 400): "},
		{args: []string{"release", "lock:deploy", "--as", "did:web:a", "--lease", "lease_nope"}, wantCode: 1,
			wantOut: `"reason":"stale_lease"`, wantErr: "stale_lease (HTTP 409)"},
		{args: []string{"release", "lock:deploy", "--as", "did:web:a"}, wantCode: 0,
			wantOut: `{"ok":true,"released":true,"releasedIds":["lease_`},
		{args: []string{"release", "lock:deploy", "--as", "did:web:a"}, wantCode: 0,
			wantOut: `{"ok":true,"released":false,"releasedIds":[]}`},
		{args: []string{"wait"}, env: map[string]string{"LEASEPLANE_KEY": "lp_wrong"}, wantCode: 1,
			wantOut: `"reason":"unauthorized"`, wantErr: "unauthorized (HTTP 401)"},
		{args: []string{"wait"}, env: map[string]string{"LEASEPLANE_URL": "http://127.0.0.1:1"}, wantCode: exitNoPlane,
			wantNoOut: true, wantErr: "cannot reach the plane at http://127.0.0.1:1: leaseplane client: GET http://127.0.0.1:1/api/v1/acp/coordination/wait: "},
		{args: []string{"lease", "lock:x", "--as", "did:web:a"}, env: map[string]string{"LEASEPLANE_URL": "http://127.0.0.1:1"}, wantCode: exitNoPlane,
			wantNoOut: true, wantErr: "nothing listens there: is the plane running? Start it with leaseplane serve"},
		{args: []string{"lease", "lock:x", "--as", "did:web:a"}, env: map[string]string{"LEASEPLANE_KEY": ""}, wantCode: 2,
			wantNoOut: true, wantErr: "LEASEPLANE_KEY is not set: export the key leaseplane serve printed"},
		{args: []string{"wait"}, env: map[string]string{"LEASEPLANE_KEY": ""}, wantCode: 2,
			wantNoOut: true, wantErr: "LEASEPLANE_KEY is not set"},
		{args: []string{"lease", "lock:deploy"}, wantCode: 2, wantNoOut: true, wantErr: "--as DID is required: LEASEPLANE_KEY is a workspace key"},
		// An agent key names its agent: --as defaults to it.
		{args: []string{"lease", "lock:mine"}, env: map[string]string{"LEASEPLANE_KEY": "@agent"}, wantCode: 0,
			wantOut: `"holder":"did:web:keyed"`},
		{args: []string{"release", "lock:mine"}, env: map[string]string{"LEASEPLANE_KEY": "@agent"}, wantCode: 0,
			wantOut: `"released":true`},
		{args: []string{"lease", "a", "b", "--as", "did:web:a"}, wantCode: 2, wantNoOut: true, wantErr: "want exactly one RESOURCE"},
		{args: []string{"release", "--as", "did:web:a"}, wantCode: 2, wantNoOut: true, wantErr: "want exactly one RESOURCE"},
		{args: []string{"lease", "-h"}, wantCode: 0, wantOut: "usage: leaseplane lease RESOURCE --as DID"},
		{args: []string{"wait", "extra"}, wantCode: 2, wantNoOut: true, wantErr: `takes no arguments, got ["extra"]`},
		{args: []string{"lease", "r", "--as", "did:web:a", "--bogus"}, wantCode: 2, wantNoOut: true, wantErr: "flag provided but not defined: -bogus"},
	}
	ws, err := p.srv.Store().WorkspaceByName("clienttest")
	if err != nil {
		t.Fatal(err)
	}
	agentKey, _, err := p.srv.Store().CreateKey(ws, store.RoleAgent, "did:web:keyed", p.clock.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		for k, v := range st.env {
			if v == "@agent" {
				v = agentKey
			}
			t.Setenv(k, v)
		}
		code, out, errOut := cli(t, st.args...)
		if code != st.wantCode || !strings.Contains(out, st.wantOut) || !strings.Contains(errOut, st.wantErr) || (st.wantNoOut && out != "") {
			t.Errorf("step %d %q: code %d stdout %q stderr %q\nwant code %d, stdout with %q, stderr with %q",
				i, st.args, code, out, errOut, st.wantCode, st.wantOut, st.wantErr)
		}
		if code == 0 && !st.wantNoOut && !strings.HasSuffix(out, "\n") {
			t.Errorf("step %d: stdout does not end in a newline: %q", i, out)
		}
		t.Setenv("LEASEPLANE_URL", p.url)
		t.Setenv("LEASEPLANE_KEY", p.key)
	}
}

func TestClientDeadlockAndSuspendedExitCodes(t *testing.T) {
	p := startPlane(t)
	mustCLI(t, 0, "lease", "r1", "--as", "did:web:a")
	mustCLI(t, 0, "lease", "r2", "--as", "did:web:b")
	mustCLI(t, 1, "lease", "r1", "--as", "did:web:b")
	code, out, errOut := cli(t, "lease", "r2", "--as", "did:web:a")
	if code != exitDeadlock || !strings.Contains(out, `"reason":"deadlock"`) ||
		!strings.Contains(errOut, "deadlock: did:web:b holds r2 and waits on r1") {
		t.Errorf("deadlock: code %d stdout %q stderr %q", code, out, errOut)
	}
	suspend(t, p, "did:web:c")
	code, out, errOut = cli(t, "lease", "r3", "--as", "did:web:c")
	if code != exitSuspended || !strings.Contains(out, `"reason":"suspended"`) || !strings.Contains(errOut, "suspended") {
		t.Errorf("suspended: code %d stdout %q stderr %q", code, out, errOut)
	}
}

func mustCLI(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != want {
		t.Fatalf("%q: code %d, want %d; stdout %q stderr %q", args, code, want, out, errOut)
	}
	return out
}

// suspend uses the operator's lever of the real server.
func suspend(t *testing.T, p *testPlane, did string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.url+"/api/v1/acp/operator/suspend", strings.NewReader(`{"actorDid":"`+did+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.operator)
	resp, body := servertest.Send(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("suspend %s: HTTP %d %s", did, resp.StatusCode, body)
	}
}

// TestHelpEverywhere: every verb's --help (and -h) prints its usage on
// stdout, with flags spelled as the usage lines spell them (--flag), and
// exits 0.
func TestHelpEverywhere(t *testing.T) {
	verbs := [][]string{{"keys", "create"}, {"keys", "list"}, {"ledger", "key"}, {"ledger", "export"}}
	for _, c := range commands {
		verbs = append(verbs, []string{c.name})
	}
	for _, v := range verbs {
		for _, h := range []string{"--help", "-h"} {
			code, out, errOut := cli(t, append(append([]string{}, v...), h)...)
			if code != 0 || !strings.Contains(out, "usage") || errOut != "" {
				t.Errorf("%q %s: exit %d, stdout %.80q, stderr %.200q; want the usage on stdout and 0", v, h, code, out, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && len(line) > 3 && line[3] != ' ' {
					if f := strings.Fields(line)[0]; len(f) > 2 && f[1] != '-' && !strings.ContainsAny(f[1:], "0123456789") {
						t.Errorf("%q %s: flag listed as %q, want --%s", v, h, f, f[1:])
					}
				}
			}
		}
	}
}
