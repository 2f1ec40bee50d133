package kernel

// Op names a command.
type Op string

// The operations (docs/SEMANTICS.md).
const (
	OpAcquire Op = "acquire"
	OpRelease Op = "release"
	OpWait    Op = "wait"
	OpTick    Op = "tick"
	OpSuspend Op = "suspend"
	OpResume  Op = "resume"
	OpForget  Op = "forget"
	OpCancel  Op = "cancel" // semantics 3
)

// Fixed numbers of the semantics (docs/SEMANTICS.md).
const (
	LeaseTTLMs     = 30000 // lease lifetime from grant or last renewal
	WaiterTTLMs    = 30000 // a waiter lapses this long after its last request
	DeadlockKeepMs = 30000 // deadlock pairs are shown by wait this long
	MaxAdmitted    = 8     // waiters admitted to one resource's queue
	MaxWaitMs      = 800   // cap of stampede.waitMs
	BaseWaitMs     = 25    // stampede.waitMs = min(800, 25 × 2^n)
	MaxResourceLen = 256
	MinActorLen    = 5
	MaxActorLen    = 256
	MaxLeaseIDLen  = 256
	ClaimGraceMs   = 2000 // a claim lasts waitMs + ClaimGraceMs after a lease_held answer (semantics 3)
	ClaimGraceMs2  = 1000 // the same under semantics 1 and 2
	MaxWaitLimit   = 1000 // default and largest page of wait
	MaxWaitUpToMs  = 30000
	// MaxNowMs is the largest time a command may carry: 2^53 − 1 − 60000, so
	// every expiry and every held ask's lapse (untilMs + 30000) stays an
	// integer that JavaScript holds exactly.
	MaxNowMs = 1<<53 - 1 - LeaseTTLMs - MaxWaitUpToMs
	// MaxMembers and MaxDepth bound a request object: members, and nesting
	// (the request object is depth 1).
	MaxMembers = 16
	MaxDepth   = 8
	// Default workspace limits (Rules.Limits).
	DefaultMaxLeases  = 100000
	DefaultMaxWaiters = 100000
	DefaultMaxAgents  = 1000000
	DefaultMaxAsks    = 1000
	DefaultMaxAsksPer = 16
	releaseTrust2     = 1   // +0.5, in half points
	expireTrust2      = -10 // −5, in half points
)

// Reasons of refusals, as they appear in answers.
const (
	ReasonInvalid    = "invalid_request"
	ReasonSuspended  = "suspended"
	ReasonLeaseHeld  = "lease_held"
	ReasonDeadlock   = "deadlock"
	ReasonStaleLease = "stale_lease"
	ReasonLimit      = "limit_exceeded"
	ReasonAgentBusy  = "agent_busy"
	ReasonCancelled  = "cancelled"
)

// Command is one decoded request. NowMs is the host's time in Unix
// milliseconds. Fields an operation does not take are empty. Mode is empty
// when absent (write for a new lease, the held mode for a renewal).
// HasLeaseID tells an absent leaseId from an empty one. Prefix, After and
// Limit page wait (Limit 0 means the default, MaxWaitLimit).
type Command struct {
	Op         Op
	NowMs      int64
	Resource   string
	ActorDid   string
	Mode       string
	LeaseID    string
	HasLeaseID bool
	Prefix     string
	After      string
	Limit      int
	// WaitUpToMs is an acquire's waitUpToMs (semantics 3): 0 when absent,
	// null or 0; HasWaitUpTo tells a present field from an absent one.
	WaitUpToMs  int64
	HasWaitUpTo bool
	// AskID is cancel's askId; HasAskID tells it from an absent one.
	AskID    string
	HasAskID bool
	// Invalid, when not empty, is why the command did not decode (the edge
	// that decoded it sets it: DecodeCommand, DecodeStepCommand): Step
	// answers it invalid_request, with that message, and changes nothing.
	Invalid string
}

// Ready is what one Step gives its host, after go.etcd.io/raft's Ready:
// everything the host must write, send or arm, so that it decides nothing
// itself.
type Ready struct {
	// Status is the HTTP status of the command's own answer;
	// RetryAfterSec, when above zero, its Retry-After header.
	Status        int
	RetryAfterSec int
	// Answer is the command's own answer, canonical JSON; nil when the
	// command made a held ask (AskID), which is answered later.
	Answer []byte
	// AskID is the held ask this command made ("" when none).
	AskID string
	// Events are the events the step emitted, in order, typed.
	Events []Event
	// Answers are the held asks that ended during this step, in the order
	// they ended, each with its answer: a host writes each to the request
	// held under its AskID (once the step is durable, when Log is set).
	Answers []AskAnswer
	// Log reports whether the command changed durable state: a host that
	// keeps a log writes it there when set, and need not otherwise (a
	// wait or tick that only moved the clock is not logged).
	Log bool
	// Changed reports whether anything changed, the clock included
	// (Result.Changed).
	Changed bool
	// NextAlarm is when the host must send the next tick, if AlarmOK.
	NextAlarm int64
	AlarmOK   bool
	// SnapshotDue reports that SnapshotEvery logged commands have passed
	// since the machine's last Snapshot (or its start): a durable host
	// snapshots now.
	SnapshotDue bool
}

// AskAnswer is the answer to a held ask that ended.
type AskAnswer struct {
	AskID         string
	Status        int
	RetryAfterSec int
	Answer        []byte
}

// SnapshotEvery is how many logged commands go between two snapshots
// (Ready.SnapshotDue): the one rule of every durable host.
const SnapshotEvery = 1000

// Result is what a command gives the host.
type Result struct {
	// Status is the HTTP status the REST route answers with.
	Status int
	// RetryAfterSec, when above zero, is the Retry-After header value.
	RetryAfterSec int
	// Answer is the response body: canonical JSON, exactly what the REST
	// route returns and what a transcript records.
	Answer []byte
	// Events are the events the command emitted, in order (none: nil).
	// AppendEvents writes them as the JSON array a transcript shows.
	Events []Event
	// Changed reports whether the machine's state changed (the clock
	// included), so a durable host knows whether to log the command.
	Changed bool
	// AskID is the held ask the command made (Answer is then null), and
	// Answers the held asks that ended during it (semantics 3; Ready).
	AskID   string
	Answers []AskAnswer
}

// Event is one event a command emitted: its type (coordination.lease,
// operator.suspend, ...), its time, and its canonical JSON, exactly the
// bytes a workspace's ledger records.
type Event struct {
	Type string
	AtMs int64
	JSON []byte
	// ActorDid is the agent; Resource, LeaseID and Fence the lease (empty
	// and 0 for operator events).
	ActorDid string
	Resource string
	LeaseID  string
	Fence    int64
}

// Engine is the seam between hosts and a kernel build: the native Machine
// (through Native) and the wasip1 build under wazero both implement it and
// pass the same tests. Errors are failures of the engine itself (a trapped
// WebAssembly instance), never a client's mistake: those are answers.
// An Engine is not safe for concurrent use.
type Engine interface {
	// Step applies one command a host decoded at its edge
	// (DecodeCommand, DecodeStepCommand) and says what the host must do.
	Step(c Command) (Ready, error)
	// Apply decodes a REST body for op and applies it at nowMs (the seam
	// before Step, kept while hosts move).
	Apply(op Op, nowMs int64, body []byte) (Result, error)
	// StepJSON applies one scenario step: a JSON object with atMs, op and
	// the command's own fields (the seam before Step, kept while hosts
	// move).
	StepJSON(step []byte) (Result, error)
	// NextAlarm is the time the host should send a tick, if any.
	NextAlarm() (ms int64, ok bool, err error)
	// Snapshot is the state as canonical JSON; Factory.Restore takes it back.
	Snapshot() ([]byte, error)
	// Trust is the trust scores as a JSON object keyed by actorDid.
	Trust() ([]byte, error)
	// Stats counts what the machine holds, for a host's gauges; it costs
	// nothing that grows with the workspace.
	Stats() (Stats, error)
	// SetSemantics makes the machine decide by semantics v from the next
	// command on (Machine.SetSemantics): a host replaying a log sets the
	// version each command was logged under.
	SetSemantics(v int) error
	// Close frees the engine's resources.
	Close() error
}

// Factory makes engines of one kind.
type Factory interface {
	// New starts an empty machine with the rules given as JSON
	// ({"readShared": [prefix...], "limits": {...}}; empty or null means
	// the defaults).
	New(rules []byte) (Engine, error)
	// Restore starts a machine from a Snapshot.
	Restore(snapshot []byte) (Engine, error)
	// Name is "native" or "wasm".
	Name() string
}

// WrapFactory is f with every engine it makes passed through wrap, named
// name (f's name when name is ""): the seam for an engine that answers
// otherwise on purpose, in hosts' tests and serve's test faults.
func WrapFactory(f Factory, name string, wrap func(Engine) Engine) Factory {
	return wrappedFactory{f, name, wrap}
}

type wrappedFactory struct {
	Factory
	name string
	wrap func(Engine) Engine
}

func (w wrappedFactory) Name() string {
	if w.name == "" {
		return w.Factory.Name()
	}
	return w.name
}

func (w wrappedFactory) New(rules []byte) (Engine, error) { return w.wrapped(w.Factory.New(rules)) }

func (w wrappedFactory) Restore(snapshot []byte) (Engine, error) {
	return w.wrapped(w.Factory.Restore(snapshot))
}

func (w wrappedFactory) wrapped(e Engine, err error) (Engine, error) {
	if err != nil {
		return nil, err
	}
	return w.wrap(e), nil
}

// Version is the kernel's semantic version; hosts show it beside their
// build hash.
const Version = "0.3.0"

// Semantics is the version of the lease semantics the kernel decides by.
// A host records it beside every logged command and snapshot, so that a
// newer kernel knows what an older one decided under (docs/SEMANTICS.md).
// 1: leaseplane 0.1; 2: claims of admitted waiters, renewals that keep
// their mode, one fence counter per workspace, forgetting, limits; 3: held
// asks (acquire with waitUpToMs, cancel), back-off by place, a claim grace
// of 2000 ms.
const Semantics = 3

// Stats is what a machine holds: live leases, waiters, live resources
// (those with a lease or a waiter) and agents remembered.
type Stats struct {
	Leases, Waiters, Resources, Agents int
}
