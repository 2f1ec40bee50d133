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
	"github.com/leaseplane/leaseplane/kernel/api"
)

// The contract's bounds (package kernel/api), as on the server.
const (
	maxBodyBytes = api.DefaultMaxBodyBytes // 413 above it
	keyPrefix    = api.KeyPrefix           // every key is "lp_" ID "_" secret
)

// reply is a decided answer: status, Retry-After (0 for none), body and
// its type (empty for JSON).
type reply struct {
	status      int
	retryAfter  int
	body        []byte
	contentType string
}

func refusal(status int, reason, msg string) reply { return fromAPI(api.Refusal(status, reason, msg)) }

// fromAPI is the contract's reply as the front's.
func fromAPI(r api.Reply) reply {
	return reply{status: r.Status, retryAfter: r.RetryAfter, body: r.Body}
}

func tooLarge() reply { return fromAPI(api.TooLarge(maxBodyBytes)) }

func unavailable(what string) reply { return fromAPI(api.Unavailable(what)) }

// The roles of keys, as on the server.
const (
	roleWorkspace = string(api.RoleWorkspace)
	roleAgent     = string(api.RoleAgent)
	roleOperator  = string(api.RoleOperator)
)

// keyRecord is what the key store holds under a key's id: what never
// changes about a key (its workspace, role, agent and the SHA-256 of the
// key; never the key). Whether a key is still valid is the workspace
// object's to say: it keeps the live key ids, so a revocation holds at
// once everywhere, while KV may serve a record cached at the edge.
type keyRecord struct {
	id        string
	workspace string
	role      string
	agentDID  string
	hash      string // hex SHA-256 of the key
}

// The key store's names: a key's record under idName(id).
func idName(id string) string { return "id:" + id }

// keyHash is the hex SHA-256 of a key, as its record keeps it.
func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// keyID reads the id of a key of the form lp_ID_SECRET, ID 12 lower-case
// hex digits.
func keyID(key string) (string, bool) {
	if !strings.HasPrefix(key, keyPrefix) || len(key) < len(keyPrefix)+13 || key[len(keyPrefix)+12] != '_' {
		return "", false
	}
	id := key[len(keyPrefix) : len(keyPrefix)+12]
	return id, validKeyID(id)
}

// validKeyID: 12 lower-case hex digits, as newKey draws them.
func validKeyID(id string) bool {
	if len(id) != 12 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// format writes a record as lines: version, id, workspace, role, agent,
// hash.
func (k keyRecord) format() string {
	return "2\n" + k.id + "\n" + k.workspace + "\n" + k.role + "\n" + k.agentDID + "\n" + k.hash
}

func parseKeyRecord(s string) (keyRecord, error) {
	f := strings.Split(s, "\n")
	if len(f) != 6 || f[0] != "2" {
		return keyRecord{}, errors.New("malformed key record")
	}
	k := keyRecord{id: f[1], workspace: f[2], role: f[3], agentDID: f[4], hash: f[5]}
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
// key, 503 when the store fails. A key found here may still be revoked:
// the workspace's object checks its id before it does anything.
func authenticate(ks keyStore, key string) (keyRecord, reply, bool) {
	if key == "" {
		return keyRecord{}, fromAPI(api.MissingKey()), false
	}
	bad := fromAPI(api.BadKey())
	id, ok := keyID(key)
	if !api.WellFormedKey(key) || !ok {
		return keyRecord{}, bad, false
	}
	v, found, err := ks.Get(idName(id))
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
	if k.id != id || subtle.ConstantTimeCompare([]byte(k.hash), []byte(keyHash(key))) != 1 {
		return keyRecord{}, bad, false
	}
	return k, reply{}, true
}

// admit decides what the front can decide for one decoded lease command,
// by the contract's rules (api.Admit): the key's role for the op, and an
// agent key's actorDid. ok means: send the command to the workspace's
// object.
func admit(k keyRecord, c kernel.Command) (reply, bool) {
	rt, ok := api.RouteOf(c.Op)
	if !ok {
		return fromAPI(api.Invalid("op " + string(c.Op) + " has no route")), false
	}
	if no := api.Admit(api.Key{Role: api.Role(k.role), AgentDID: k.agentDID}, rt, c); no != nil {
		return fromAPI(*no), false
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
