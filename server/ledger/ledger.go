// Package ledger keeps the lease plane's signed ledgers: per workspace, an
// append-only log of its events under RFC 6962 tree hashes, with signed
// checkpoints, and the /api/v1/ledger/ routes. The pure part (hashes,
// notes, proofs, receipts, bundles, verification) is kernel/ledger; this
// package stores it in SQLite through server/store (ledger.db) and keeps
// the signing keys in the data folder (ledger-keys/, mode 0600).
//
// # Best effort and complete
//
// A command's events are written with the command itself into the durable
// command log (the log row keeps the kernel's event array). After the
// commit, the server hands them to Notify, which queues them without ever
// blocking; one writer goroutine turns queued events into entries and
// hashes and appends them, with the workspace's new position (the last
// command whose events are in), in one transaction of ledger.db. A full
// queue, a failed write or a crash leaves the position behind: the writer
// then reads the missing commands' events back from the log and appends
// them, in order, before anything newer. An append moves the position only
// from where the writer last saw it, in the same transaction as its
// entries, so an event is never written twice.
//
// ledger.db is not synced on each write (the log it is derived from is):
// a power cut may lose its newest transactions, position and entries
// together, and the writer then appends them again from the log. Once a
// second the writer makes ledger.db durable (store.SyncLedger) and records
// the positions that were on disk before it; the log is trimmed only
// behind that durable position (store.Options.LogKeepAfter), so none is
// missing. Ledger failures are logged and retried; they never reach a lease.
//
// # Checkpoints
//
// A checkpoint of each grown tree is signed once a second, and on demand
// when a route needs one that covers more (a receipt of a new entry, a
// request for the checkpoint). Every signed checkpoint is kept.
//
// # Retention
//
// With Config.Retention, entry bodies older than it are dropped once an
// export has covered them (MarkExported through the exported route, which
// checks the exporter's root); tree hashes, the grants' look-up and
// checkpoints stay, and the entries and receipt routes answer 410 gone for
// what went.
package ledger

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// Config configures a Ledger.
type Config struct {
	Store   *store.Store
	DataDir string
	// Host, when set, is the public host name put in front of the origins of
	// workspaces whose keys are made from now on.
	Host   string
	Logger *slog.Logger
	// Rand is where new signing keys come from; nil means crypto/rand.
	Rand io.Reader
	// Queue is how many commands' events wait for the writer before further
	// ones are left to be caught up from the log; 0 means 16384.
	Queue int
	// SignEvery is the cadence of checkpoints under load; 0 means 1 s.
	SignEvery time.Duration
	// ReceiptWait bounds how long a receipt request waits for its entry
	// and checkpoint; 0 means 2 s.
	ReceiptWait time.Duration
	// Now is the clock appends are stamped with (retention counts from
	// it); nil means time.Now.
	Now func() time.Time
	// Retention, when above 0, is how long entry bodies are kept once
	// they have been exported (MarkExported); 0 keeps them forever. Tree
	// hashes and checkpoints are always kept.
	Retention time.Duration
	// RetainEvery is how often bodies past Retention are looked for; 0
	// means a minute.
	RetainEvery time.Duration
	// SyncEvery is how often the writer makes ledger.db durable (and so
	// lets the log be trimmed behind what it wrote); 0 means a second.
	SyncEvery time.Duration
}

// Ledger is every workspace's ledger. Create it with New, Start it, Stop it.
type Ledger struct {
	cfg   Config
	st    *store.Store
	log   *slog.Logger
	queue chan item
	wake  chan struct{}
	stop  chan struct{}
	done  sync.WaitGroup

	mu  sync.RWMutex
	wss map[int64]*wsLedger

	appended, failures, caughtUp, signed atomic.Int64
}

type item struct {
	ws     *wsLedger
	seq    int64
	events []kernel.Event
}

// wsLedger is one workspace's ledger state.
type wsLedger struct {
	id       int64
	name     string
	signer   string // never logged
	verifier string
	origin   string

	notified atomic.Int64 // the last command handed to Notify
	behind   atomic.Bool  // the writer must catch up from the log

	mu         sync.Mutex
	pos        store.LedgerPos // on disk
	durable    store.LedgerPos // on disk and synced (SyncLedger)
	loaded     bool
	cache      [][32]byte // recent stored hashes, from index cacheStart on
	cacheStart int64
	grew       chan struct{} // closed when pos or the checkpoint moves
	cpSize     int64
	cpNote     []byte

	signMu sync.Mutex
}

// cacheMax bounds a workspace's cache of recent stored hashes: past twice
// this many, the older half goes (a frontier hash older than that is read
// from disk). 8,192 hashes are 256 KB at most.
const cacheMax = 1 << 13

// New makes the ledger; Start begins writing.
func New(cfg Config) (*Ledger, error) {
	if cfg.Store == nil || cfg.DataDir == "" {
		return nil, errors.New("ledger: Config.Store and Config.DataDir are required")
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 16384
	}
	if cfg.SignEvery <= 0 {
		cfg.SignEvery = time.Second
	}
	if cfg.ReceiptWait <= 0 {
		cfg.ReceiptWait = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetainEvery <= 0 {
		cfg.RetainEvery = time.Minute
	}
	if cfg.SyncEvery <= 0 {
		cfg.SyncEvery = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Ledger{cfg: cfg, st: cfg.Store, log: log, queue: make(chan item, cfg.Queue),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), wss: map[int64]*wsLedger{}}, nil
}

// Start runs the writer and the signer.
func (l *Ledger) Start() {
	l.done.Add(2)
	go l.writer()
	go l.signer()
}

// Stop writes what is queued (what it cannot write stays in the log for
// the next start), signs a last checkpoint and ends the goroutines.
func (l *Ledger) Stop() {
	close(l.stop)
	l.done.Wait()
}

// Workspace opens a workspace's ledger, making its signing key when it has
// none, and has the writer catch up with its log.
func (l *Ledger) Workspace(id int64, name string) error {
	l.mu.RLock()
	w := l.wss[id]
	l.mu.RUnlock()
	if w != nil {
		return nil
	}
	signer, created, err := EnsureKey(l.cfg.DataDir, l.cfg.Host, name, l.cfg.Rand)
	if err != nil {
		return err
	}
	verifier, err := kledger.VerifierOf(signer)
	if err != nil {
		return err
	}
	v := verifier[:len(verifier)]
	origin := v[:indexByte(v, '+')]
	if created {
		l.log.Info("ledger signing key made", "workspace", name, "verifier", verifier)
	}
	w = &wsLedger{id: id, name: name, signer: signer, verifier: verifier, origin: origin,
		grew: make(chan struct{})}
	w.behind.Store(true)
	l.mu.Lock()
	if l.wss[id] == nil {
		l.wss[id] = w
	}
	l.mu.Unlock()
	l.poke()
	return nil
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return len(s)
}

func (l *Ledger) get(id int64) *wsLedger {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.wss[id]
}

func (l *Ledger) all() []*wsLedger {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]*wsLedger, 0, len(l.wss))
	for _, w := range l.wss {
		out = append(out, w)
	}
	return out
}

func (l *Ledger) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Notify hands the ledger the events of a committed command, as the kernel
// gave them (the same events its log row keeps). It never blocks: when the
// queue is full the writer reads them back from the log later.
func (l *Ledger) Notify(ws, seq int64, events []kernel.Event) {
	w := l.get(ws)
	if w == nil {
		return // not opened: its first Workspace call catches up from the log
	}
	for {
		n := w.notified.Load()
		if seq <= n || w.notified.CompareAndSwap(n, seq) {
			break
		}
	}
	// Commands without events are queued too: they move the position, so
	// the writer sees an unbroken run of commands and reads the log only
	// when something was really left out.
	select {
	case l.queue <- item{ws: w, seq: seq, events: events}:
	default:
		w.behind.Store(true)
	}
}

// KeepAfter is the seq after which a workspace's log must be kept: its
// ledger's durable position (0 before the ledger has synced what it read).
func (l *Ledger) KeepAfter(ws int64) int64 {
	w := l.get(ws)
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.durable.Seq
}

// Sync makes what the writer wrote durable and moves each workspace's
// durable position (KeepAfter) to where it was before; the writer calls it
// every Config.SyncEvery, and once more when it stops. It may run beside
// the writer: a position is read only once its append has committed, so
// the sync that follows covers it.
func (l *Ledger) Sync() error {
	ws := l.all()
	pos := make([]store.LedgerPos, len(ws))
	ok := make([]bool, len(ws))
	for i, w := range ws {
		w.mu.Lock()
		pos[i], ok[i] = w.pos, w.loaded
		w.mu.Unlock()
	}
	done, err := l.st.SyncLedger(context.Background())
	if err != nil || !done {
		return err
	}
	for i, w := range ws {
		if !ok[i] {
			continue
		}
		w.mu.Lock()
		if pos[i].Seq > w.durable.Seq {
			w.durable = pos[i]
		}
		w.mu.Unlock()
	}
	return nil
}

// Stats are the ledger's counters.
type Stats struct {
	Appended, Failures, CaughtUp, Signed int64
}

// Stats reads the counters.
func (l *Ledger) Stats() Stats {
	return Stats{l.appended.Load(), l.failures.Load(), l.caughtUp.Load(), l.signed.Load()}
}

// catchUpRows bounds the log rows one catch-up step reads.
const catchUpRows = 4096

// gatherDelay is how long the writer collects committed commands before
// it writes them: under load, one ledger transaction per gatherDelay
// instead of one per commit. A larger batch costs less per entry (fewer
// transactions, partial rows repacked and pages written again):
// BenchmarkWriteBatches gives about 25 µs of CPU an entry at 50 commands a
// write, 15 at 250 and 10 at 1,000. A receipt or checkpoint request that
// waits wakes the writer at once.
const gatherDelay = 100 * time.Millisecond

func (l *Ledger) writer() {
	defer l.done.Done()
	retry := time.NewTicker(200 * time.Millisecond)
	defer retry.Stop()
	syncT := time.NewTicker(l.cfg.SyncEvery)
	defer syncT.Stop()
	var batch []item
	for {
		batch = batch[:0]
		stopping := false
		select {
		case it := <-l.queue:
			batch = append(batch, it)
			// Gather what the next commits bring for a moment: one
			// transaction (and fsync) of ledger.db for many commits, not
			// one each. The ledger is off the answer's path, so the delay
			// costs no request anything.
			gather := time.NewTimer(gatherDelay)
		gather:
			for len(batch) < 8192 {
				select {
				case it := <-l.queue:
					batch = append(batch, it)
				case <-gather.C:
					break gather
				case <-l.wake:
					// Someone waits for the ledger (a receipt, a
					// checkpoint): write now.
					break gather
				case <-l.stop:
					stopping = true
					break gather
				}
			}
			gather.Stop()
		case <-l.wake:
		case <-retry.C:
		case <-syncT.C:
			if err := l.Sync(); err != nil {
				l.log.Warn("ledger sync failed: the log is kept until one succeeds", "err", err)
			}
		case <-l.stop:
			stopping = true
		}
	fill:
		for len(batch) < 8192 {
			select {
			case it := <-l.queue:
				batch = append(batch, it)
			default:
				break fill
			}
		}
		l.write(batch)
		if stopping {
			// One more pass for what the last one left behind.
			l.write(nil)
			if err := l.Sync(); err != nil {
				l.log.Warn("ledger sync failed at stop: the log is kept", "err", err)
			}
			return
		}
	}
}

// write appends batch, and catches up every workspace that is behind.
func (l *Ledger) write(batch []item) {
	byWS := map[*wsLedger][]item{}
	var order []*wsLedger
	for _, it := range batch {
		if _, ok := byWS[it.ws]; !ok {
			order = append(order, it.ws)
		}
		byWS[it.ws] = append(byWS[it.ws], it)
	}
	for _, w := range l.all() {
		if _, ok := byWS[w]; !ok && w.behind.Load() {
			order = append(order, w)
			byWS[w] = nil
		}
	}
	if len(order) == 0 {
		return
	}
	var appends []store.LedgerAppend
	var plans []*plan
	for _, w := range order {
		p, err := l.plan(w, byWS[w])
		if err != nil {
			l.failures.Add(1)
			w.behind.Store(true)
			l.log.Warn("ledger append planned for nothing: will catch up from the log", "workspace", w.name, "err", err)
			continue
		}
		if p == nil {
			continue
		}
		plans = append(plans, p)
		appends = append(appends, p.app)
	}
	if len(appends) == 0 {
		return
	}
	if err := l.st.AppendLedger(appends); err != nil {
		l.failures.Add(1)
		l.log.Warn("ledger write failed: leases go on; the ledger catches up from the log", "err", err)
		for _, p := range plans {
			p.w.behind.Store(true)
			p.w.mu.Lock()
			p.w.loaded = false // read the position again: it is what the disk says
			p.w.mu.Unlock()
		}
		return
	}
	for _, p := range plans {
		w := p.w
		w.mu.Lock()
		w.pos = p.app.To
		w.remember(p.app.HashStart, p.app.Hashes)
		close(w.grew)
		w.grew = make(chan struct{})
		w.mu.Unlock()
		if p.caughtUp {
			w.behind.Store(false)
		}
		l.appended.Add(int64(len(p.app.Entries)))
	}
}

// plan is one workspace's part of a write.
type plan struct {
	w        *wsLedger
	app      store.LedgerAppend
	caughtUp bool // the log has nothing newer than this append
}

// plan turns a workspace's queued items, and what it must catch up from the
// log first, into one append; nil when there is nothing to write.
func (l *Ledger) plan(w *wsLedger, items []item) (*plan, error) {
	ctx := context.Background()
	w.mu.Lock()
	if !w.loaded {
		pos, _, err := l.st.LedgerPos(ctx, w.id)
		if err != nil {
			w.mu.Unlock()
			return nil, err
		}
		w.pos, w.loaded = pos, true
		w.cache, w.cacheStart = nil, 0
	}
	from := w.pos
	w.mu.Unlock()
	p := &plan{w: w, app: store.LedgerAppend{Workspace: w.id, From: from, To: from,
		HashStart: kledger.StoredHashCount(from.Size), WrittenMs: l.cfg.Now().UnixMilli()}}
	reader := l.reader(w, &p.app)
	entry := func(seq int64, ev []byte) error {
		n := p.app.To.Size
		hs, err := kledger.StoredHashes(n, ev, reader)
		if err != nil {
			return err
		}
		for _, h := range hs {
			p.app.Hashes = append(p.app.Hashes, h)
		}
		p.app.Entries = append(p.app.Entries, store.LedgerEntry{Index: n, Seq: seq, LeaseID: grantID(ev), Data: ev})
		p.app.To.Size++
		return nil
	}
	// add appends a command's events, from the kernel (events) or read
	// back from the log (raw, the kernel's JSON array).
	add := func(seq int64, events []kernel.Event, raw []byte) error {
		var err error
		for _, ev := range events {
			if err = entry(seq, ev.JSON); err != nil {
				break
			}
		}
		if err == nil && len(raw) > 0 && string(raw) != "[]" {
			err = kernel.ScanArray(raw, func(ev []byte) error { return entry(seq, ev) })
		}
		if err != nil {
			return errors.New("events of command " + strconv.FormatInt(seq, 10) + ": " + err.Error())
		}
		p.app.To.Seq = seq
		return nil
	}
	caughtUpTo := int64(-1)
	if w.behind.Load() || (len(items) > 0 && items[0].seq > from.Seq+1) {
		rows, err := l.st.LogEvents(ctx, w.id, from.Seq, catchUpRows)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			if r.Seq != p.app.To.Seq+1 && from != (store.LedgerPos{}) {
				l.log.Error("ledger: the log was trimmed past the ledger's position; events are missing",
					"workspace", w.name, "position", p.app.To.Seq, "next", r.Seq)
			}
			if !r.Known {
				p.app.To.Seq = r.Seq // logged before the ledger existed
				continue
			}
			if err := add(r.Seq, nil, r.Events); err != nil {
				return nil, err
			}
		}
		if len(rows) < catchUpRows {
			caughtUpTo = p.app.To.Seq
		}
		if len(rows) > 0 {
			l.caughtUp.Add(int64(len(rows)))
		}
	}
	for _, it := range items {
		if it.seq <= p.app.To.Seq {
			continue // written already, or read from the log just now
		}
		if it.seq != p.app.To.Seq+1 && caughtUpTo < 0 {
			// A command between is not here (its events were dropped from
			// the queue, or it had none): read the log next time.
			w.behind.Store(true)
			break
		}
		if err := add(it.seq, it.events, nil); err != nil {
			return nil, err
		}
	}
	p.caughtUp = caughtUpTo >= 0
	if p.app.To == from {
		if p.caughtUp {
			w.behind.Store(false)
		}
		return nil, nil
	}
	return p, nil
}

// grantID is the lease id of a grant event, "" for any other entry.
func grantID(ev []byte) string {
	// The kernel writes every event canonically: its type first, its
	// members in a fixed order, no white space, and a lease id as hex
	// digits. A string value holds a quote only as \", so `,"leaseId":"`
	// can only be the member itself: the id is read without parsing the
	// whole entry. Anything else is parsed.
	const grant, member = `{"type":"coordination.lease",`, `,"leaseId":"`
	if bytes.HasPrefix(ev, []byte(`{"type":"`)) {
		if !bytes.HasPrefix(ev, []byte(grant)) {
			return ""
		}
		if i := bytes.Index(ev, []byte(member)); i > 0 {
			rest := ev[i+len(member):]
			if j := bytes.IndexByte(rest, '"'); j > 0 && bytes.IndexByte(rest[:j], '\\') < 0 {
				return string(rest[:j])
			}
		}
	}
	typ, id := kledger.EntryLease(ev)
	if typ != "coordination.lease" {
		return ""
	}
	return id
}

// remember adds hashes (stored hash indexes from start on) to the cache,
// which keeps the newest ones; w.mu is held.
func (w *wsLedger) remember(start int64, hashes [][32]byte) {
	if len(hashes) == 0 {
		return
	}
	if start != w.cacheStart+int64(len(w.cache)) {
		w.cache, w.cacheStart = nil, start
	}
	if len(hashes) > cacheMax {
		// Only the newest cacheMax of a large append (a catch-up).
		skip := len(hashes) - cacheMax
		w.cache, w.cacheStart = nil, start+int64(skip)
		hashes = hashes[skip:]
	}
	if len(w.cache)+len(hashes) > 2*cacheMax {
		drop := len(w.cache) + len(hashes) - cacheMax
		w.cache = append(w.cache[:0], w.cache[drop:]...)
		w.cacheStart += int64(drop)
	}
	w.cache = append(w.cache, hashes...)
}

// reader reads a workspace's stored hashes: those of the append being
// planned (app, when not nil), then the cache, then the disk.
func (l *Ledger) reader(w *wsLedger, app *store.LedgerAppend) kledger.HashReader {
	return kledger.HashReaderFunc(func(indexes []int64) ([]kledger.Hash, error) {
		out := make([]kledger.Hash, len(indexes))
		var miss []int64
		var missAt []int
		w.mu.Lock()
		for i, x := range indexes {
			if app != nil && x >= app.HashStart && x < app.HashStart+int64(len(app.Hashes)) {
				out[i] = app.Hashes[x-app.HashStart]
			} else if x >= w.cacheStart && x < w.cacheStart+int64(len(w.cache)) {
				out[i] = w.cache[x-w.cacheStart]
			} else {
				miss = append(miss, x)
				missAt = append(missAt, i)
			}
		}
		w.mu.Unlock()
		if len(miss) > 0 {
			hs, err := l.st.LedgerHashes(context.Background(), w.id, miss)
			if err != nil {
				return nil, err
			}
			for k, h := range hs {
				out[missAt[k]] = h
			}
		}
		return out, nil
	})
}

func (l *Ledger) signer() {
	defer l.done.Done()
	t := time.NewTicker(l.cfg.SignEvery)
	defer t.Stop()
	retain := time.NewTicker(l.cfg.RetainEvery)
	defer retain.Stop()
	for {
		select {
		case <-t.C:
		case <-retain.C:
			l.Retain()
			continue
		case <-l.stop:
			// The writer has stopped too when done.Wait returns; sign what
			// it wrote last.
			for _, w := range l.all() {
				l.sign(w)
			}
			return
		}
		for _, w := range l.all() {
			l.sign(w)
		}
	}
}

// retainSteps bounds the drops of one workspace in one Retain.
const retainSteps = 16

// Retain drops, in every workspace, the entry bodies older than
// Config.Retention that an export has covered (a no-op when Retention is
// 0); the signer runs it every Config.RetainEvery.
func (l *Ledger) Retain() {
	if l.cfg.Retention <= 0 {
		return
	}
	before := l.cfg.Now().Add(-l.cfg.Retention).UnixMilli()
	for _, w := range l.all() {
		// A drop is one transaction of at most 1,000 rows (32,000 entries);
		// a few of them a turn, so that a large first drop neither holds
		// ledger.db long nor keeps the signer from its checkpoints.
		for range retainSteps {
			prev, _ := l.st.LedgerRetentionOf(context.Background(), w.id)
			upTo, err := l.st.DropLedgerBodies(context.Background(), w.id, before)
			if err != nil {
				l.log.Warn("ledger retention: bodies not dropped; will try again", "workspace", w.name, "err", err)
				break
			}
			if upTo == prev.Dropped {
				break
			}
		}
	}
}

// sign signs a checkpoint of w's tree when it grew since the last one.
func (l *Ledger) sign(w *wsLedger) error {
	w.signMu.Lock()
	defer w.signMu.Unlock()
	ctx := context.Background()
	w.mu.Lock()
	loaded, size, cpSize := w.loaded, w.pos.Size, w.cpSize
	w.mu.Unlock()
	if !loaded {
		return nil
	}
	if cpSize == 0 && w.cpNote == nil {
		s, note, ok, err := l.st.LatestCheckpoint(ctx, w.id)
		if err != nil {
			return err
		}
		if ok {
			w.mu.Lock()
			w.cpSize, w.cpNote = s, note
			w.mu.Unlock()
			cpSize = s
		} else {
			cpSize = -1
		}
	}
	if size <= cpSize {
		return nil
	}
	root, err := kledger.TreeHash(size, l.reader(w, nil))
	if err != nil {
		return err
	}
	note, err := kledger.Sign(kledger.Checkpoint{Origin: w.origin, Size: size, Root: root}, w.signer)
	if err != nil {
		return err
	}
	if err := l.st.SaveCheckpoint(ctx, w.id, size, note); err != nil {
		l.log.Warn("ledger checkpoint not saved; will sign again", "workspace", w.name, "size", size, "err", err)
		return err
	}
	l.signed.Add(1)
	w.mu.Lock()
	w.cpSize, w.cpNote = size, note
	close(w.grew)
	w.grew = make(chan struct{})
	w.mu.Unlock()
	return nil
}
