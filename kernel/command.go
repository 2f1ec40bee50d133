package kernel

import (
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/leaseplane/leaseplane/kernel/internal/jsontext"
)

// fieldBits is a set of body fields.
type fieldBits uint16

const (
	fResource fieldBits = 1 << iota
	fActorDid
	fMode
	fTTLMs
	fLeaseID
	fPrefix
	fAfter
	fLimit
	fWaitUpTo
	fAskID
)

// opFields is the set of body fields op takes; ok is false for an unknown op.
func opFields(op Op) (f fieldBits, ok bool) {
	switch op {
	case OpAcquire:
		return fResource | fActorDid | fMode | fTTLMs | fWaitUpTo, true
	case OpRelease:
		return fResource | fActorDid | fLeaseID, true
	case OpWait:
		return fPrefix | fAfter | fLimit, true
	case OpTick:
		return 0, true
	case OpSuspend, OpResume, OpForget:
		return fActorDid, true
	case OpCancel:
		return fAskID, true
	}
	return 0, false
}

// fieldBit names a body field; 0 for a name that is no field.
func fieldBit(key string) fieldBits {
	switch key {
	case "resource":
		return fResource
	case "actorDid":
		return fActorDid
	case "mode":
		return fMode
	case "ttlMs":
		return fTTLMs
	case "leaseId":
		return fLeaseID
	case "prefix":
		return fPrefix
	case "after":
		return fAfter
	case "limit":
		return fLimit
	case "waitUpToMs":
		return fWaitUpTo
	case "askId":
		return fAskID
	}
	return 0
}

const errOp = "op must be one of acquire, release, wait, tick, suspend, resume, forget, cancel"

// ParseOp checks an operation name.
func ParseOp(s string) (Op, error) {
	op := Op(s)
	if _, ok := opFields(op); !ok {
		return "", errors.New(errOp)
	}
	return op, nil
}

func takes(op Op, field fieldBits) bool {
	f, _ := opFields(op)
	return f&field != 0
}

// DecodeRequest reads a REST body for op. An empty body is an empty object.
// The error names the field at fault; the host answers it with
// InvalidAnswer (Machine.ApplyJSON does).
func DecodeRequest(op Op, nowMs int64, body []byte) (Command, error) {
	if _, ok := opFields(op); !ok {
		return Command{}, errors.New(errOp)
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

var (
	errMembers = errors.New("a request has at most " + strconv.Itoa(MaxMembers) + " members")
	errDepth   = errors.New("a request is nested at most " + strconv.Itoa(MaxDepth) + " deep (the request object is depth 1)")
	// requestJSON reads request bodies and scenario steps.
	requestJSON = jsontext.Options{MaxMembers: MaxMembers, TooMany: errMembers, MaxDepth: MaxDepth, TooDeep: errDepth}
)

func decodeFields(body []byte, step bool, c *Command) error {
	type member struct {
		key []byte
		v   jsontext.Value
	}
	var buf [MaxMembers]member
	fields := buf[:0]
	var hasOp, hasAt bool
	err := jsontext.ReadObject(body, requestJSON, func(key []byte, v jsontext.Value) error {
		if step && string(key) == "op" {
			if v.Kind != jsontext.String {
				return errors.New("op must be a string")
			}
			op, err := ParseOp(v.Str)
			if err != nil {
				return err
			}
			c.Op, hasOp = op, true
		} else if step && string(key) == "atMs" {
			n, ok := jsontext.Int(v.Raw)
			if v.Kind != jsontext.Number || !ok || n < 0 || n > MaxNowMs {
				return errAtMs
			}
			c.NowMs, hasAt = n, true
		}
		// Fields depend on op, which a step may give after them.
		fields = append(fields, member{key, v})
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
	for _, f := range fields {
		if step && (string(f.key) == "op" || string(f.key) == "atMs") {
			continue
		}
		if err := setField(c, string(f.key), f.v); err != nil {
			return err
		}
	}
	return nil
}

var errAtMs = errors.New("atMs must be an integer of milliseconds from 0 to " + strconv.FormatInt(MaxNowMs, 10))

func setField(c *Command, key string, v jsontext.Value) error {
	bit := fieldBit(key)
	if bit == 0 {
		return errors.New("unknown field " + jsontext.QuoteField(key))
	}
	if !takes(c.Op, bit) {
		return errors.New(string(c.Op) + " does not take " + key)
	}
	if v.Kind == jsontext.Null {
		return nil // null is the same as absent
	}
	switch key {
	case "ttlMs":
		return nil // accepted, whatever its type, and ignored: every lease runs 30000 ms
	case "limit":
		n, ok := jsontext.Int(v.Raw)
		if v.Kind != jsontext.Number || !ok || n < 1 || n > MaxWaitLimit {
			return errors.New("limit must be an integer from 1 to " + strconv.Itoa(MaxWaitLimit))
		}
		c.Limit = int(n)
		return nil
	case "waitUpToMs":
		n, ok := jsontext.Int(v.Raw)
		if v.Kind != jsontext.Number || !ok || n < 0 || n > MaxWaitUpToMs {
			return errWaitUpTo
		}
		c.WaitUpToMs, c.HasWaitUpTo = n, true
		return nil
	case "resource", "actorDid", "mode", "leaseId", "prefix", "after", "askId":
		if v.Kind != jsontext.String {
			return errors.New(key + " must be a string, not " + v.Kind.String())
		}
	}
	switch key {
	case "resource":
		c.Resource = v.Str
	case "actorDid":
		c.ActorDid = v.Str
	case "mode":
		if v.Str == "" {
			// Absent or null means write; an empty string is a mistake.
			return errors.New("mode must be read, write or delete")
		}
		c.Mode = v.Str
	case "leaseId":
		c.LeaseID, c.HasLeaseID = v.Str, true
	case "prefix":
		c.Prefix = v.Str
	case "after":
		c.After = v.Str
	case "askId":
		c.AskID, c.HasAskID = v.Str, true
	}
	return nil
}

var (
	errWaitUpTo = errors.New("waitUpToMs must be an integer from 0 to " + strconv.Itoa(MaxWaitUpToMs))
	errAskID    = errors.New("askId must be ask_ followed by a decimal number without leading zeros")
)

// validAskID reports whether s is ask_ and a decimal without leading zeros.
func validAskID(s string) bool {
	d, ok := strings.CutPrefix(s, "ask_")
	if !ok || d == "" || len(d) > 19 || (d[0] == '0' && len(d) > 1) {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

// Validate checks the command's fields for its op; the error names the field.
func (c Command) Validate() error {
	if _, ok := opFields(c.Op); !ok {
		return errors.New(errOp)
	}
	if c.NowMs < 0 || c.NowMs > MaxNowMs {
		return errors.New("nowMs must be from 0 to " + strconv.FormatInt(MaxNowMs, 10))
	}
	if takes(c.Op, fResource) {
		if err := validResource(c.Resource); err != nil {
			return err
		}
	}
	if takes(c.Op, fActorDid) {
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
	if c.Op == OpAcquire && (c.WaitUpToMs < 0 || c.WaitUpToMs > MaxWaitUpToMs) {
		return errWaitUpTo
	}
	if c.Op == OpCancel && c.HasAskID && !validAskID(c.AskID) {
		return errAskID
	}
	if c.HasLeaseID && (c.LeaseID == "" || len(c.LeaseID) > MaxLeaseIDLen) {
		return errors.New("leaseId must be 1-256 bytes when given")
	}
	if c.Op == OpWait {
		for _, f := range [...]struct{ name, v string }{{"prefix", c.Prefix}, {"after", c.After}} {
			if f.v == "" {
				continue // no prefix, no start
			}
			// Checked like resource names.
			if err := validResource(f.v); err != nil {
				return errors.New(f.name + strings.TrimPrefix(err.Error(), "resource"))
			}
		}
		if c.Limit < 0 || c.Limit > MaxWaitLimit {
			return errors.New("limit must be an integer from 1 to " + strconv.Itoa(MaxWaitLimit))
		}
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
	if strings.TrimFunc(s, unicode.IsSpace) == "" {
		return errors.New("resource must not be white space only")
	}
	return checkText("resource", s, false)
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
	return checkText("actorDid", s, true)
}

// checkText refuses invalid UTF-8, control characters and format
// characters (Unicode category Cf: zero-width, bidi controls, BOM, which
// make look-alike names) in field's value s, and white space too when
// noSpace; the error names the field. ASCII takes a fast path: names are
// nearly always ASCII.
func checkText(field, s string, noSpace bool) error {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < ' ' || c == 0x7f || (noSpace && c == ' ') {
				return badText(field, noSpace)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return errors.New(field + " must be valid UTF-8")
		}
		if unicode.IsControl(r) || (noSpace && unicode.IsSpace(r)) {
			return badText(field, noSpace)
		}
		if unicode.Is(unicode.Cf, r) {
			return errors.New(field + " must not contain format characters (zero-width, bidi controls, BOM): " + strconv.QuoteRuneToASCII(r))
		}
		i += size
	}
	return nil
}

func badText(field string, noSpace bool) error {
	if noSpace {
		return errors.New(field + " must not contain white space or control characters")
	}
	return errors.New(field + " must not contain control characters")
}

// ParseRules reads {"readShared": ["prefix", ...], "limits": {"leases": n,
// "waiters": n, "agents": n}}, every part optional. Empty input or null
// means the defaults: no read-shared prefixes, and the default limits.
// Prefixes must be 1-256 bytes without control or format characters;
// limits integers from 1 to 2^53.
func ParseRules(b []byte) (Rules, error) {
	rules := Rules{Limits: DefaultLimits}
	trimmed := strings.TrimSpace(string(b))
	if trimmed == "" || trimmed == "null" {
		return rules, nil
	}
	err := jsontext.ReadObject(b, jsontext.Options{}, func(name []byte, v jsontext.Value) error {
		key, raw := string(name), v.Raw
		switch key {
		case "readShared":
		case "limits":
			return parseLimits(raw, &rules.Limits)
		default:
			return errors.New("unknown field " + jsontext.QuoteField(key) + " (rules have readShared and limits)")
		}
		if null, err := nullOr(raw, jsontext.Array, "readShared must be an array of strings"); null || err != nil {
			return err
		}
		return jsontext.ReadArray(raw, func(elem jsontext.Value) error {
			if elem.Kind != jsontext.String {
				return errors.New("readShared must be an array of strings")
			}
			prefix, err := jsontext.Unquote(elem.Raw)
			if err != nil {
				return err
			}
			if err := validResource(prefix); err != nil {
				return errors.New("readShared prefix: " + strings.TrimPrefix(err.Error(), "resource "))
			}
			rules.ReadShared = append(rules.ReadShared, prefix)
			return nil
		})
	})
	if err != nil {
		return Rules{}, errors.New("rules: " + err.Error())
	}
	return rules, nil
}

// nullOr reports whether raw is null; otherwise it must be of kind want,
// or the error is msg.
func nullOr(raw []byte, want jsontext.Kind, msg string) (null bool, err error) {
	switch jsontext.KindOf(raw) {
	case jsontext.Null:
		return true, nil
	case want:
		return false, nil
	}
	return false, errors.New(msg)
}

func parseLimits(raw []byte, l *Limits) error {
	if null, err := nullOr(raw, jsontext.Object, "limits must be an object with leases, waiters, agents, asks and asksPerAgent"); null || err != nil {
		return err
	}
	return jsontext.ReadObject(raw, jsontext.Options{}, func(name []byte, v jsontext.Value) error {
		key := string(name)
		var p *int64
		switch key {
		case "leases":
			p = &l.Leases
		case "waiters":
			p = &l.Waiters
		case "agents":
			p = &l.Agents
		case "asks":
			p = &l.Asks
		case "asksPerAgent":
			p = &l.AsksPerAgent
		default:
			return errors.New("unknown field " + jsontext.QuoteField(key) + " in limits (they are leases, waiters, agents, asks and asksPerAgent)")
		}
		n, ok := jsontext.Int(v.Raw)
		if !ok || n < 1 {
			return errors.New("limits." + key + " must be an integer from 1 to 2^53")
		}
		*p = n
		return nil
	})
}

// Rules is the configuration a machine is built with.
type Rules struct {
	// ReadShared lists name prefixes of read-shared resources.
	ReadShared []string
	// Limits bound what the workspace keeps; zero fields take the defaults.
	Limits Limits
}

// Limits bound a workspace: live leases, waiters, agents remembered, held
// asks, and held asks of one agent.
type Limits struct {
	Leases, Waiters, Agents, Asks, AsksPerAgent int64
}

// DefaultLimits are the limits of rules that name none.
var DefaultLimits = Limits{Leases: DefaultMaxLeases, Waiters: DefaultMaxWaiters, Agents: DefaultMaxAgents,
	Asks: DefaultMaxAsks, AsksPerAgent: DefaultMaxAsksPer}

// withDefaults fills the zero limits with the defaults.
func (l Limits) withDefaults() Limits {
	if l.Leases <= 0 {
		l.Leases = DefaultMaxLeases
	}
	if l.Waiters <= 0 {
		l.Waiters = DefaultMaxWaiters
	}
	if l.Agents <= 0 {
		l.Agents = DefaultMaxAgents
	}
	if l.Asks <= 0 {
		l.Asks = DefaultMaxAsks
	}
	if l.AsksPerAgent <= 0 {
		l.AsksPerAgent = DefaultMaxAsksPer
	}
	return l
}

// AppendJSON appends the rules as canonical JSON, limits written out.
func (r Rules) AppendJSON(b []byte) []byte {
	b = append(b, `{"readShared":`...)
	if r.ReadShared == nil {
		b = append(b, "[]"...)
	} else {
		b = jsontext.AppendStrings(b, r.ReadShared)
	}
	l := r.Limits.withDefaults()
	b = append(b, `,"limits":{"leases":`...)
	b = jsontext.AppendInt(b, l.Leases)
	b = append(b, `,"waiters":`...)
	b = jsontext.AppendInt(b, l.Waiters)
	b = append(b, `,"agents":`...)
	b = jsontext.AppendInt(b, l.Agents)
	b = append(b, `,"asks":`...)
	b = jsontext.AppendInt(b, l.Asks)
	b = append(b, `,"asksPerAgent":`...)
	b = jsontext.AppendInt(b, l.AsksPerAgent)
	return append(b, "}}"...)
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

// DecodeCommand is DecodeRequest for a host's edge: a body that does not
// decode gives a Command whose Invalid says why, which Step answers
// invalid_request, so that every answer comes from the kernel's Step.
func DecodeCommand(op Op, nowMs int64, body []byte) Command {
	c, err := DecodeRequest(op, nowMs, body)
	if err != nil {
		return Command{Op: op, NowMs: nowMs, Invalid: err.Error()}
	}
	return c
}

// DecodeStepCommand is DecodeStep for a host's edge, the same way.
func DecodeStepCommand(step []byte) Command {
	c, err := DecodeStep(step)
	if err != nil {
		return Command{Invalid: err.Error()}
	}
	return c
}

// AppendRequest appends the REST body of c, a command that decoded (its
// Invalid empty): the members its op takes, those absent left out, so that
// DecodeRequest(c.Op, c.NowMs, body) gives c back. A host whose command
// came partly from elsewhere than the body (a query parameter) logs this.
func (c Command) AppendRequest(b []byte) []byte {
	b = append(b, '{')
	n := 0
	member := func(key string) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(AppendQuote(b, key), ':')
	}
	str := func(key, v string, present bool) {
		if present {
			member(key)
			b = AppendQuote(b, v)
		}
	}
	num := func(key string, v int64, present bool) {
		if present {
			member(key)
			b = strconv.AppendInt(b, v, 10)
		}
	}
	f, _ := opFields(c.Op)
	str("resource", c.Resource, f&fResource != 0)
	str("actorDid", c.ActorDid, f&fActorDid != 0)
	str("mode", c.Mode, f&fMode != 0 && c.Mode != "")
	num("waitUpToMs", c.WaitUpToMs, f&fWaitUpTo != 0 && c.HasWaitUpTo)
	str("leaseId", c.LeaseID, f&fLeaseID != 0 && c.HasLeaseID)
	str("prefix", c.Prefix, f&fPrefix != 0 && c.Prefix != "")
	str("after", c.After, f&fAfter != 0 && c.After != "")
	num("limit", int64(c.Limit), f&fLimit != 0 && c.Limit != 0)
	str("askId", c.AskID, f&fAskID != 0 && c.HasAskID)
	return append(b, '}')
}
