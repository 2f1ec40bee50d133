package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
)

// The lease routes, as the server names them, and the op each one runs.
var routes = map[string]struct {
	method string
	op     kernel.Op
}{
	"/api/v1/acp/coordination/lease":   {"POST", kernel.OpAcquire},
	"/api/v1/acp/coordination/release": {"POST", kernel.OpRelease},
	"/api/v1/acp/coordination/wait":    {"GET", kernel.OpWait},
	"/api/v1/acp/operator/suspend":     {"POST", kernel.OpSuspend},
	"/api/v1/acp/operator/resume":      {"POST", kernel.OpResume},
	"/api/v1/acp/operator/forget":      {"POST", kernel.OpForget},
}

const routeList = "/api/v1/acp/coordination/lease, /api/v1/acp/coordination/release, " +
	"/api/v1/acp/coordination/wait, /api/v1/acp/operator/suspend, /api/v1/acp/operator/resume and " +
	"/api/v1/acp/operator/forget"

// The ledger's routes (GET /api/v1/ledger/NAME), answered by the object.
var ledgerRoutes = map[string]bool{"key": true, "checkpoint": true, "entries": true, "proof": true, "consistency": true, "receipt": true}

const ledgerRouteList = "/api/v1/ledger/key, checkpoint, entries, proof, consistency and receipt"

// maxBodyBytes is the server's default request body limit (413 above it).
const maxBodyBytes = 8192

// maxKeyLen bounds what is looked up at all, as the server does.
const maxKeyLen = 200

// keyPrefix starts every key: "lp_" ID "_" secret, as on the server.
const keyPrefix = "lp_"

// reply is a decided answer: status, Retry-After (0 for none), body and
// its type (empty for JSON).
type reply struct {
	status      int
	retryAfter  int
	body        []byte
	contentType string
}

func refusal(status int, reason, msg string) reply {
	return reply{status: status, body: kernel.RefusalAnswer(reason, msg)}
}

func refusalActor(keyDID, asked string) reply {
	return reply{status: 403, body: kernel.ActorMismatchAnswer(keyDID, asked)}
}

func tooLarge() reply {
	return refusal(413, "body_too_large", "the request body is larger than "+strconv.Itoa(maxBodyBytes)+" bytes")
}

// maxWaitUpToMs is the longest a lease request may be held
// (POST lease?waitUpToMs=N), as on the server.
const maxWaitUpToMs = 30000

// parseWaitUpTo reads waitUpToMs as the server does.
func parseWaitUpTo(v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n > maxWaitUpToMs || v[0] == '+' {
		return 0, errors.New("waitUpToMs must be a whole number of milliseconds from 0 to " +
			strconv.Itoa(maxWaitUpToMs) + ", not " + strconv.Quote(v))
	}
	return int(n), nil
}

func unavailable(what string) reply {
	r := refusal(503, "unavailable", "the lease plane cannot decide now; nothing was granted; retry ("+what+")")
	r.retryAfter = 1
	return r
}

// The roles of keys, as on the server.
const (
	roleWorkspace = "workspace"
	roleAgent     = "agent"
	roleOperator  = "operator"
)

// keyRecord is what the key store holds under a key's hash: never the key.
type keyRecord struct {
	id        string
	workspace string
	role      string
	agentDID  string
}

// The key store's names: a key's record under keyName(hash), the hash of
// a key id under idName(id) (to revoke by id), a workspace's mark under
// workspaceName(name).
func keyName(key string) string {
	h := sha256.Sum256([]byte(key))
	return "key:" + hex.EncodeToString(h[:])
}

func idName(id string) string          { return "id:" + id }
func workspaceName(name string) string { return "ws:" + name }

// format writes a record as lines: version, id, workspace, role, agent.
func (k keyRecord) format() string {
	return "1\n" + k.id + "\n" + k.workspace + "\n" + k.role + "\n" + k.agentDID
}

func parseKeyRecord(s string) (keyRecord, error) {
	f := strings.Split(s, "\n")
	if len(f) != 5 || f[0] != "1" {
		return keyRecord{}, errors.New("malformed key record")
	}
	k := keyRecord{id: f[1], workspace: f[2], role: f[3], agentDID: f[4]}
	switch k.role {
	case roleWorkspace, roleOperator, roleAgent:
	default:
		return keyRecord{}, errors.New("key record with unknown role " + strconv.Quote(k.role))
	}
	return k, nil
}

// newKey draws a key in the server's format: lp_ID_SECRET.
func newKey() (id, key string) {
	var idb [6]byte
	var secret [32]byte
	rand.Read(idb[:])
	rand.Read(secret[:])
	id = hex.EncodeToString(idb[:])
	return id, keyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
}

// validWorkspaceName: 1–64 of a-z, 0-9, '-', '_' and '.'.
func validWorkspaceName(s string) error {
	if s == "" || len(s) > 64 {
		return errors.New("name must be 1 to 64 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errors.New("name may hold only a-z, 0-9, '-', '_' and '.'")
		}
	}
	return nil
}

// sameSecret compares the admin secret in constant time.
func sameSecret(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// keyStore is the one thing the front needs from KV.
type keyStore interface {
	Get(name string) (value string, found bool, err error)
}

// authenticate finds key's record: 401 for a missing, malformed or unknown
// key, 503 when the store fails.
func authenticate(ks keyStore, key string) (keyRecord, reply, bool) {
	if key == "" {
		return keyRecord{}, refusal(401, "unauthorized", "missing key: send Authorization: Bearer KEY"), false
	}
	bad := refusal(401, "unauthorized", "unknown or revoked key")
	if len(key) > maxKeyLen || !strings.HasPrefix(key, keyPrefix) {
		return keyRecord{}, bad, false
	}
	v, found, err := ks.Get(keyName(key))
	if err != nil {
		return keyRecord{}, unavailable("key look-up failed"), false
	}
	if !found {
		return keyRecord{}, bad, false
	}
	k, err := parseKeyRecord(v)
	if err != nil {
		return keyRecord{}, unavailable("key look-up failed: " + err.Error()), false
	}
	return k, reply{}, true
}

// admit decides what the front can decide for one lease request: the key's
// role for the op, and an agent key's actorDid. ok means: send the
// command to the workspace's object.
func admit(k keyRecord, op kernel.Op, body []byte) (reply, bool) {
	switch op {
	case kernel.OpSuspend, kernel.OpResume, kernel.OpForget:
		if k.role != roleOperator {
			article := "a "
			if strings.HasPrefix(k.role, "a") {
				article = "an " // "an agent key"
			}
			return refusal(403, "forbidden", string(op)+" needs an operator key; this is "+article+k.role+" key"), false
		}
	}
	if k.role == roleAgent && op != kernel.OpWait {
		// The kernel's own decoding, so a bad body is refused with the
		// same words as by the server and by the object.
		c, err := kernel.DecodeRequest(op, 0, body)
		if err != nil {
			return reply{status: 400, body: kernel.InvalidAnswer(err.Error())}, false
		}
		if c.ActorDid != k.agentDID {
			return refusalActor(k.agentDID, c.ActorDid), false
		}
	}
	return reply{}, true
}

// validAgent checks an agent key's DID with the kernel's own rules for
// actorDid.
func validAgent(did string) error {
	if did == "" {
		return errors.New("an agent key needs agentDid")
	}
	body := kernel.AppendQuote([]byte(`{"resource":"x","actorDid":`), did)
	if _, err := kernel.DecodeRequest(kernel.OpRelease, 0, append(body, '}')); err != nil {
		return errors.New("agentDid: " + err.Error())
	}
	return nil
}
