package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/leaseplane/leaseplane/kernel"
)

type fakeKeys map[string]string

func (f fakeKeys) Get(name string) (string, bool, error) {
	if name == "fail" {
		return "", false, errors.New("store down")
	}
	v, ok := f[name]
	return v, ok, nil
}

func TestKeyRecordRoundTrip(t *testing.T) {
	k := keyRecord{id: "0a1b2c3d4e5f", workspace: "acme", role: roleAgent, agentDID: "did:web:a", hash: keyHash("lp_0a1b2c3d4e5f_x")}
	got, err := parseKeyRecord(k.format())
	if err != nil || got != k {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "<null>", "1\nid\nacme\nagent\ndid:web:a", "2\nid\nacme\nroot\n\nh", "2\nid\nacme"} {
		if _, err := parseKeyRecord(bad); err == nil {
			t.Errorf("parseKeyRecord(%q) accepted", bad)
		}
	}
}

func TestNewKeyHasTheServersForm(t *testing.T) {
	id, key := newKey()
	if !strings.HasPrefix(key, "lp_"+id+"_") || len(id) != 12 || len(key) != len("lp_")+12+1+43 {
		t.Fatalf("newKey() = %q, %q", id, key)
	}
	if _, again := newKey(); again == key {
		t.Fatal("two keys alike")
	}
}

func TestAuthenticate(t *testing.T) {
	id, key := newKey()
	_, other := newKey()
	store := fakeKeys{idName(id): keyRecord{id: id, workspace: "acme", role: roleWorkspace, hash: keyHash(key)}.format()}
	// A key with a known id but another secret is unknown.
	forged := key[:len("lp_")+13] + other[len("lp_")+13:]
	for _, c := range []struct {
		key    string
		status int
		errMsg string
	}{
		{"", 401, "missing key"},
		{"nope", 401, "unknown or revoked key"},
		{"lp_" + strings.Repeat("a", 300), 401, "unknown or revoked key"},
		{key + "x", 401, "unknown or revoked key"},
		{forged, 401, "unknown or revoked key"},
		{"lp_0A1B2C3D4E5F_x", 401, "unknown or revoked key"},
		{"lp_0a1b2c3d4e5_fx", 401, "unknown or revoked key"},
		{key, 0, ""},
	} {
		k, rep, ok := authenticate(store, c.key)
		if c.status == 0 {
			if !ok || k.workspace != "acme" {
				t.Errorf("authenticate(valid) = %+v, %s", k, rep.body)
			}
			continue
		}
		if ok || rep.status != c.status || !strings.Contains(string(rep.body), c.errMsg) {
			t.Errorf("authenticate(%.20q) = %d %s; want %d %q", c.key, rep.status, rep.body, c.status, c.errMsg)
		}
	}
	if _, rep, ok := authenticate(fakeKeys{idName(id): "garbage"}, key); ok || rep.status != 503 {
		t.Errorf("a malformed record gave %d %s; want 503", rep.status, rep.body)
	}
}

func TestAdmit(t *testing.T) {
	agent := keyRecord{workspace: "acme", role: roleAgent, agentDID: "did:web:me"}
	ws := keyRecord{workspace: "acme", role: roleWorkspace}
	op := keyRecord{workspace: "acme", role: roleOperator}
	for _, c := range []struct {
		name   string
		k      keyRecord
		op     kernel.Op
		body   string
		status int // 0: admitted
		reason string
	}{
		{"agent as itself", agent, kernel.OpAcquire, `{"resource":"r","actorDid":"did:web:me"}`, 0, ""},
		{"agent as another", agent, kernel.OpAcquire, `{"resource":"r","actorDid":"did:web:you"}`, 403, "actor_mismatch"},
		{"agent releasing as another", agent, kernel.OpRelease, `{"resource":"r","actorDid":"did:web:you"}`, 403, "actor_mismatch"},
		{"agent bad body", agent, kernel.OpAcquire, `{"resource":5}`, 400, "invalid_request"},
		{"agent waits", agent, kernel.OpWait, ``, 0, ""},
		{"workspace key, any agent", ws, kernel.OpAcquire, `{"resource":"r","actorDid":"did:web:you"}`, 0, ""},
		{"workspace key, bad body: the object decides", ws, kernel.OpAcquire, `{`, 0, ""},
		{"workspace key suspends", ws, kernel.OpSuspend, `{"actorDid":"did:web:you"}`, 403, "forbidden"},
		{"agent key resumes", agent, kernel.OpResume, `{"actorDid":"did:web:me"}`, 403, "forbidden"},
		{"operator suspends", op, kernel.OpSuspend, `{"actorDid":"did:web:you"}`, 0, ""},
	} {
		rep, ok := admit(c.k, kernel.DecodeCommand(c.op, 0, []byte(c.body)))
		if c.status == 0 {
			if !ok {
				t.Errorf("%s: refused %d %s", c.name, rep.status, rep.body)
			}
			continue
		}
		if ok || rep.status != c.status || !strings.Contains(string(rep.body), `"reason":"`+c.reason+`"`) {
			t.Errorf("%s: %v %d %s; want %d %s", c.name, ok, rep.status, rep.body, c.status, c.reason)
		}
	}
}

func TestValidWorkspaceNameAndAgent(t *testing.T) {
	for name, ok := range map[string]bool{"acme": true, "a-b_c.d9": true, "": false, "Acme": false, "a b": false, strings.Repeat("a", 65): false} {
		if err := validWorkspaceName(name); (err == nil) != ok {
			t.Errorf("validWorkspaceName(%q) = %v", name, err)
		}
	}
	for did, ok := range map[string]bool{"did:web:a.example": true, "": false, "nodid": false, "did:web:a b": false} {
		if err := validAgent(did); (err == nil) != ok {
			t.Errorf("validAgent(%q) = %v", did, err)
		}
	}
	if !sameSecret("s", "s") || sameSecret("s", "") || sameSecret("", "") || sameSecret("s", "t") {
		t.Error("sameSecret")
	}
}

// TestDurableObjectOnlyDoesIO: the Durable Object stays small and decides
// nothing: at most 268 lines (264, and four that hand the events streams
// their requests and the ledger's growth: events.mjs), no loop of its own that asks again for a
// held request (no timer), and no step but Ready's (no lp_apply).
func TestDurableObjectOnlyDoesIO(t *testing.T) {
	b, err := os.ReadFile("workspace.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > 268 {
		t.Errorf("workspace.mjs has %d lines; at most 268", n)
	}
	for _, s := range []string{"setTimeout", "setInterval", "lp_apply", "wake"} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("workspace.mjs uses %s", s)
		}
	}
}
