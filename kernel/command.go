package kernel

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// fieldSet lists the body fields an operation takes.
var fieldSet = map[Op][]string{
	OpAcquire: {"resource", "actorDid", "mode", "ttlMs"},
	OpRelease: {"resource", "actorDid", "leaseId"},
	OpWait:    nil,
	OpTick:    nil,
	OpSuspend: {"actorDid"},
	OpResume:  {"actorDid"},
}

// ParseOp checks an operation name.
func ParseOp(s string) (Op, error) {
	op := Op(s)
	if _, ok := fieldSet[op]; !ok {
		return "", errors.New("op must be one of acquire, release, wait, tick, suspend, resume")
	}
	return op, nil
}

func takes(op Op, field string) bool {
	for _, f := range fieldSet[op] {
		if f == field {
			return true
		}
	}
	return false
}

// DecodeRequest reads a REST body for op. An empty body is an empty object.
// The error names the field at fault; the host answers it with
// InvalidAnswer (Machine.ApplyJSON does).
func DecodeRequest(op Op, nowMs int64, body []byte) (Command, error) {
	if _, ok := fieldSet[op]; !ok {
		return Command{}, errors.New("op must be one of acquire, release, wait, tick, suspend, resume")
	}
	c := Command{Op: op, NowMs: nowMs}
	if len(body) == 0 {
		return c, c.Validate()
	}
	err := decodeFields(body, false, &c)
	if err != nil {
		return Command{}, err
	}
	return c, c.Validate()
}

// DecodeStep reads one scenario step: an object with atMs, op and the
// command's own fields.
func DecodeStep(step []byte) (Command, error) {
	var c Command
	if err := decodeFields(step, true, &c); err != nil {
		return Command{}, err
	}
	return c, c.Validate()
}

func decodeFields(body []byte, step bool, c *Command) error {
	r := reader{b: body}
	var seen [8]string
	nseen := 0
	var hasOp, hasAt bool
	var later []struct {
		key string
		v   jsonValue
	}
	err := r.object(func(key string, v jsonValue) error {
		for _, s := range seen[:nseen] {
			if s == key {
				return errors.New("duplicate field " + key)
			}
		}
		if nseen < len(seen) {
			seen[nseen] = key
			nseen++
		}
		if step && key == "op" {
			if v.kind != kindString {
				return errors.New("op must be a string")
			}
			op, err := ParseOp(v.str)
			if err != nil {
				return err
			}
			c.Op, hasOp = op, true
			return nil
		}
		if step && key == "atMs" {
			n, ok := intValue(v.raw)
			if v.kind != kindNumber || !ok || n < 0 {
				return errors.New("atMs must be a non-negative integer of milliseconds")
			}
			c.NowMs, hasAt = n, true
			return nil
		}
		// Fields depend on op, which a step may give after them.
		later = append(later, struct {
			key string
			v   jsonValue
		}{key, v})
		return nil
	})
	if err != nil {
		return err
	}
	if step {
		if !hasOp {
			return errors.New("op is required")
		}
		if !hasAt {
			return errors.New("atMs is required")
		}
	}
	for _, f := range later {
		if err := setField(c, f.key, f.v); err != nil {
			return err
		}
	}
	return nil
}

func setField(c *Command, key string, v jsonValue) error {
	if !takes(c.Op, key) {
		switch key {
		case "resource", "actorDid", "mode", "ttlMs", "leaseId":
			return errors.New(string(c.Op) + " does not take " + key)
		}
		return errors.New("unknown field " + quoteField(key))
	}
	if v.kind == kindNull {
		return nil // null is the same as absent
	}
	switch key {
	case "ttlMs":
		if v.kind != kindNumber {
			return errors.New("ttlMs must be a number (it is accepted and ignored: every lease runs 30000 ms)")
		}
		return nil
	case "resource", "actorDid", "mode", "leaseId":
		if v.kind != kindString {
			return errors.New(key + " must be a string, not " + v.kind.String())
		}
	}
	switch key {
	case "resource":
		c.Resource = v.str
	case "actorDid":
		c.ActorDid = v.str
	case "mode":
		if v.str == "" {
			// Absent or null means write; an empty string is a mistake.
			return errors.New("mode must be read, write or delete")
		}
		c.Mode = v.str
	case "leaseId":
		c.LeaseID, c.HasLeaseID = v.str, true
	}
	return nil
}

// quoteField quotes an unknown field name for an error, cut to 64 bytes.
func quoteField(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return string(appendString(nil, s))
}

// Validate checks the command's fields for its op; the error names the field.
func (c Command) Validate() error {
	if _, ok := fieldSet[c.Op]; !ok {
		return errors.New("op must be one of acquire, release, wait, tick, suspend, resume")
	}
	if c.NowMs < 0 {
		return errors.New("nowMs must not be negative")
	}
	if takes(c.Op, "resource") {
		if err := validResource(c.Resource); err != nil {
			return err
		}
	}
	if takes(c.Op, "actorDid") {
		if err := validActor(c.ActorDid); err != nil {
			return err
		}
	}
	if c.Op == OpAcquire {
		switch c.Mode {
		case "", "read", "write", "delete":
		default:
			return errors.New("mode must be read, write or delete")
		}
	}
	if c.HasLeaseID && (c.LeaseID == "" || len(c.LeaseID) > MaxLeaseIDLen) {
		return errors.New("leaseId must be 1-256 bytes when given")
	}
	return nil
}

func validResource(s string) error {
	if s == "" {
		return errors.New("resource is required")
	}
	if len(s) > MaxResourceLen {
		return errors.New("resource must be at most 256 bytes")
	}
	if !utf8.ValidString(s) {
		return errors.New("resource must be valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return errors.New("resource must not contain control characters")
		}
	}
	return nil
}

func validActor(s string) error {
	if s == "" {
		return errors.New("actorDid is required")
	}
	if !strings.HasPrefix(s, "did:") {
		return errors.New("actorDid must be a DID starting with did:")
	}
	if len(s) < MinActorLen || len(s) > MaxActorLen {
		return errors.New("actorDid must be 5-256 bytes")
	}
	if !utf8.ValidString(s) {
		return errors.New("actorDid must be valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return errors.New("actorDid must not contain white space or control characters")
		}
	}
	return nil
}

// ParseRules reads {"readShared": ["prefix", ...]}. Empty input or null
// means no rules. Prefixes must be 1-256 bytes without control characters.
func ParseRules(b []byte) (Rules, error) {
	var rules Rules
	trimmed := strings.TrimSpace(string(b))
	if trimmed == "" || trimmed == "null" {
		return rules, nil
	}
	r := reader{b: b}
	err := r.object(func(key string, v jsonValue) error {
		if key != "readShared" {
			return errors.New("rules: unknown field " + quoteField(key))
		}
		if v.kind == kindNull {
			return nil
		}
		if v.kind != kindArray {
			return errors.New("rules: readShared must be an array of strings")
		}
		ar := reader{b: v.raw}
		ar.pos = 1
		for {
			ar.skipSpace()
			if ar.b[ar.pos] == ']' {
				return nil
			}
			e, err := ar.value(0)
			if err != nil {
				return err
			}
			if e.kind != kindString {
				return errors.New("rules: readShared must be an array of strings")
			}
			if err := validResource(e.str); err != nil {
				return errors.New("rules: readShared prefix: " + strings.TrimPrefix(err.Error(), "resource "))
			}
			rules.ReadShared = append(rules.ReadShared, e.str)
			ar.skipSpace()
			if ar.b[ar.pos] == ',' {
				ar.pos++
			}
		}
	})
	if err != nil {
		return Rules{}, err
	}
	return rules, nil
}

// Rules is the configuration a machine is built with.
type Rules struct {
	// ReadShared lists name prefixes of read-shared resources.
	ReadShared []string
}

// AppendJSON appends the rules as canonical JSON.
func (r Rules) AppendJSON(b []byte) []byte {
	b = append(b, `{"readShared":`...)
	if r.ReadShared == nil {
		b = append(b, "[]"...)
	} else {
		b = appendStrings(b, r.ReadShared)
	}
	return append(b, '}')
}

// shared reports whether resource is read-shared under the rules.
func (r Rules) shared(resource string) bool {
	for _, p := range r.ReadShared {
		if strings.HasPrefix(resource, p) {
			return true
		}
	}
	return false
}
