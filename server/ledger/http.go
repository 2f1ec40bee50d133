package ledger

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/kernel/api"
	kledger "github.com/leaseplane/leaseplane/kernel/ledger"
	"github.com/leaseplane/leaseplane/server/store"
)

// RoutePrefix starts every ledger route.
const RoutePrefix = "/api/v1/ledger/"

// RouteExported is the one ledger route that is POST: it records an export.
const RouteExported = "exported"

// MaxEntries bounds count in the entries route.
const MaxEntries = 1000

// Reply is a ledger route's answer.
type Reply struct {
	Status      int
	ContentType string // "application/json" or "text/plain; charset=utf-8"
	RetryAfter  int    // seconds, when above 0
	Body        []byte
}

func text(b []byte) Reply {
	return Reply{Status: 200, ContentType: "text/plain; charset=utf-8", Body: b}
}

func jsonReply(status int, b []byte) Reply {
	return Reply{Status: status, ContentType: "application/json", Body: b}
}

func refuse(status int, reason, msg string) Reply {
	b := append([]byte(`{"ok":false,"reason":"`), reason...)
	b = append(b, `","error":`...)
	b = kernel.AppendQuote(b, msg)
	return jsonReply(status, append(b, '}'))
}

func badParam(name, msg string) Reply {
	b := append([]byte(`{"ok":false,"reason":"invalid_request","parameter":`), kernel.AppendQuote(nil, name)...)
	b = append(b, `,"error":`...)
	b = kernel.AppendQuote(b, name+" "+msg)
	return jsonReply(400, append(b, '}'))
}

// gone answers 410 for entries whose bodies retention dropped.
func gone(err error) Reply {
	return refuse(410, api.ReasonGone, err.Error()+"; its tree hash is kept, so proofs and checkpoints still check")
}

func unavailable(err error) Reply {
	r := refuse(503, "unavailable", "the ledger cannot answer now ("+err.Error()+"); leases are not affected; retry")
	r.RetryAfter = 1
	return r
}

// Route answers the ledger route named by path (after RoutePrefix) for
// workspace ws, whose key the caller has checked.
func (l *Ledger) Route(ctx context.Context, ws int64, path string, query map[string][]string) Reply {
	w := l.get(ws)
	if w == nil {
		return unavailable(errNotOpen)
	}
	switch path {
	case "key":
		return text([]byte(w.verifier + "\n"))
	case "checkpoint":
		if err := l.ensureLoaded(w); err != nil {
			return unavailable(err)
		}
		// The checkpoint covers every command committed before the
		// request, unless the ledger is more than ReceiptWait behind.
		wctx, cancel := context.WithTimeout(ctx, l.cfg.ReceiptWait)
		_ = l.waitFor(wctx, w, w.notified.Load())
		cancel()
		if err := l.sign(w); err != nil {
			return unavailable(err)
		}
		w.mu.Lock()
		note := w.cpNote
		w.mu.Unlock()
		if note == nil {
			return unavailable(errNotOpen)
		}
		return text(note)
	case "entries":
		return l.entries(ctx, w, query)
	case "proof":
		return l.proof(ctx, w, query)
	case "consistency":
		return l.consistency(ctx, w, query)
	case "receipt":
		return l.receipt(ctx, w, query)
	case RouteExported:
		return l.exported(ctx, w, query)
	}
	return refuse(404, "not_found", "no ledger route "+RoutePrefix+path+"; the routes are key, checkpoint, entries, proof, consistency, receipt and exported")
}

type ledgerErr string

func (e ledgerErr) Error() string { return string(e) }

const errNotOpen = ledgerErr("the workspace's ledger is not open yet")

// ensureLoaded reads w's position from disk when the writer has not yet.
func (l *Ledger) ensureLoaded(w *wsLedger) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.loaded {
		return nil
	}
	pos, _, err := l.st.LedgerPos(context.Background(), w.id)
	if err != nil {
		return err
	}
	w.pos, w.loaded = pos, true
	return nil
}

func (w *wsLedger) size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pos.Size
}

// param reads a whole number parameter; ok is false (with the reply) when
// it is absent or malformed.
func param(query map[string][]string, name string, def int64, required bool) (int64, *Reply) {
	vs := query[name]
	if len(vs) == 0 {
		if required {
			r := badParam(name, "is required")
			return 0, &r
		}
		return def, nil
	}
	if len(vs) > 1 {
		r := badParam(name, "is given more than once")
		return 0, &r
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != vs[0] {
		r := badParam(name, "must be a whole number ≥ 0 without sign or leading zeros, not "+strconv.Quote(vs[0]))
		return 0, &r
	}
	return n, nil
}

func (l *Ledger) entries(ctx context.Context, w *wsLedger, q map[string][]string) Reply {
	start, bad := param(q, "start", 0, false)
	if bad != nil {
		return *bad
	}
	count, bad := param(q, "count", 100, false)
	if bad != nil {
		return *bad
	}
	if count < 1 || count > MaxEntries {
		return badParam("count", "must be 1 to "+strconv.Itoa(MaxEntries))
	}
	if err := l.ensureLoaded(w); err != nil {
		return unavailable(err)
	}
	size := w.size()
	if start > size {
		return badParam("start", "is past the ledger's end (it has "+strconv.FormatInt(size, 10)+" entries)")
	}
	es, err := l.st.LedgerEntries(ctx, w.id, start, int(min(count, size-start)))
	if errors.Is(err, store.ErrGone) {
		return gone(err)
	}
	if err != nil {
		return unavailable(err)
	}
	b := []byte(`{"entries":[`)
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, e.Index, 10)
		b = append(b, `,"data":"`...)
		b = base64.StdEncoding.AppendEncode(b, e.Data)
		b = append(b, `","event":`...)
		b = append(b, e.Data...)
		b = append(b, '}')
	}
	return jsonReply(200, append(b, "]}"...))
}

func appendHashes(b []byte, hs []kledger.Hash) []byte {
	b = append(b, `"hashes":[`...)
	for i, h := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, h[:])
		b = append(b, '"')
	}
	return append(b, ']')
}

// proofKind is one of the two proof routes: its parameters (lo required,
// hi by default and at most the ledger's size), the order they must keep,
// and the proof of hi against lo.
type proofKind struct {
	lo, hi string
	order  string // what lo must be, when ok refuses it
	ok     func(lo, hi int64) bool
	prove  func(hi, lo int64, r kledger.HashReader) ([]kledger.Hash, error)
}

var (
	inclusionProof   = proofKind{"index", "size", "must be below size", func(lo, hi int64) bool { return lo < hi }, kledger.ProveInclusion}
	consistencyProof = proofKind{"from", "to", "must not be above to", func(lo, hi int64) bool { return lo <= hi }, kledger.ProveConsistency}
)

func (l *Ledger) proof(ctx context.Context, w *wsLedger, q map[string][]string) Reply {
	return l.prove(w, q, inclusionProof)
}

func (l *Ledger) consistency(ctx context.Context, w *wsLedger, q map[string][]string) Reply {
	return l.prove(w, q, consistencyProof)
}

// prove answers a proof of kind k: {"LO":lo,"HI":hi,"hashes":[...]}.
func (l *Ledger) prove(w *wsLedger, q map[string][]string, k proofKind) Reply {
	lo, bad := param(q, k.lo, 0, true)
	if bad != nil {
		return *bad
	}
	if err := l.ensureLoaded(w); err != nil {
		return unavailable(err)
	}
	cur := w.size()
	hi, bad := param(q, k.hi, cur, false)
	switch {
	case bad != nil:
		return *bad
	case hi > cur:
		return badParam(k.hi, "is larger than the ledger ("+strconv.FormatInt(cur, 10)+" entries)")
	case !k.ok(lo, hi):
		return badParam(k.lo, k.order+" ("+strconv.FormatInt(hi, 10)+")")
	}
	hs, err := k.prove(hi, lo, l.reader(w, nil))
	if err != nil {
		return unavailable(err)
	}
	b := append([]byte(`{"`+k.lo+`":`), strconv.FormatInt(lo, 10)...)
	b = append(b, `,"`+k.hi+`":`...)
	b = strconv.AppendInt(b, hi, 10)
	b = append(b, ',')
	b = appendHashes(b, hs)
	return jsonReply(200, append(b, '}'))
}

// receipt answers the receipt of a lease's grant, waiting up to
// ReceiptWait for its entry and a checkpoint that covers it: 202 pending
// when they are not there by then, 404 when the ledger has every committed
// command and no grant of that lease.
func (l *Ledger) receipt(ctx context.Context, w *wsLedger, q map[string][]string) Reply {
	vs := q["leaseId"]
	if len(vs) != 1 || vs[0] == "" || len(vs[0]) > kernel.MaxLeaseIDLen {
		return badParam("leaseId", "is required, once, 1-"+strconv.Itoa(kernel.MaxLeaseIDLen)+" bytes")
	}
	id := vs[0]
	deadline := time.NewTimer(l.cfg.ReceiptWait)
	defer deadline.Stop()
	for {
		if err := l.ensureLoaded(w); err != nil {
			return unavailable(err)
		}
		w.mu.Lock()
		grew := w.grew
		pos := w.pos
		w.mu.Unlock()
		e, found, err := l.st.LedgerLease(ctx, w.id, id)
		if errors.Is(err, store.ErrGone) {
			return gone(errors.New("the grant of lease " + id + " (" + err.Error() + ")"))
		}
		if err != nil {
			return unavailable(err)
		}
		if found {
			if r, ok, err := l.receiptOf(w, e); err != nil {
				return unavailable(err)
			} else if ok {
				return r
			}
		} else if !w.behind.Load() && pos.Seq >= w.notified.Load() {
			return refuse(404, "not_found", "no grant of lease "+id+" in this workspace's ledger")
		} else {
			l.poke() // the writer writes at once rather than gather more
		}
		select {
		case <-grew:
		case <-deadline.C:
			r := refuse(202, "pending", "the grant of lease "+id+" is not sealed in a signed checkpoint yet; ask again")
			r.RetryAfter = 1
			return r
		case <-ctx.Done():
			return unavailable(ctx.Err())
		}
	}
}

// receiptOf is the receipt of entry e under the latest checkpoint, signed
// now when none covers it; ok is false when none does yet.
func (l *Ledger) receiptOf(w *wsLedger, e store.LedgerEntry) (Reply, bool, error) {
	w.mu.Lock()
	cpSize, note := w.cpSize, w.cpNote
	w.mu.Unlock()
	if note == nil || cpSize <= e.Index {
		if err := l.sign(w); err != nil {
			return Reply{}, false, err
		}
		w.mu.Lock()
		cpSize, note = w.cpSize, w.cpNote
		w.mu.Unlock()
		if note == nil || cpSize <= e.Index {
			return Reply{}, false, nil
		}
	}
	proof, err := kledger.ProveInclusion(cpSize, e.Index, l.reader(w, nil))
	if err != nil {
		return Reply{}, false, err
	}
	r := kledger.Receipt{Index: e.Index, Proof: proof, Checkpoint: note, Entry: e.Data}
	return text(r.Marshal()), true, nil
}

// exported records an export of the first size entries (POST exported?size=N&root=R):
// root must be the root of the tree of that size, so the caller shows it
// holds what it says it exported. From then on retention may drop those
// entries' bodies once they are older than the retention period.
func (l *Ledger) exported(ctx context.Context, w *wsLedger, q map[string][]string) Reply {
	size, bad := param(q, "size", 0, true)
	if bad != nil {
		return *bad
	}
	vs := q["root"]
	if len(vs) != 1 {
		return badParam("root", "is required, once: the base64 root hash of the tree of that size")
	}
	root, err := kledger.ParseHash(vs[0])
	if err != nil {
		return badParam("root", "is not a base64 hash of 32 bytes ("+err.Error()+")")
	}
	if err := l.ensureLoaded(w); err != nil {
		return unavailable(err)
	}
	if cur := w.size(); size > cur || size == 0 {
		return badParam("size", "must be 1 to the ledger's size ("+strconv.FormatInt(cur, 10)+" entries)")
	}
	want, err := kledger.TreeHash(size, l.reader(w, nil))
	if err != nil {
		return unavailable(err)
	}
	if want != root {
		return badParam("root", "is not the root of this ledger's tree of size "+strconv.FormatInt(size, 10))
	}
	if err := l.st.MarkExported(ctx, w.id, size); err != nil {
		return unavailable(err)
	}
	r, err := l.st.LedgerRetentionOf(ctx, w.id)
	if err != nil {
		return unavailable(err)
	}
	b := append([]byte(`{"ok":true,"exported":`), strconv.FormatInt(r.Exported, 10)...)
	b = append(b, `,"dropped":`...)
	b = strconv.AppendInt(b, r.Dropped, 10)
	b = append(b, `,"retentionMs":`...)
	b = strconv.AppendInt(b, l.cfg.Retention.Milliseconds(), 10)
	return jsonReply(200, append(b, '}'))
}

// SplitRoute takes the route name out of a request path; ok is false when
// the path is not under RoutePrefix.
func SplitRoute(path string) (string, bool) {
	return strings.CutPrefix(path, RoutePrefix)
}

// Receipt is the receipt of a lease's grant, for callers inside the server
// (lease with a receipt): the same as the receipt route.
func (l *Ledger) Receipt(ctx context.Context, ws int64, leaseID string) Reply {
	return l.Route(ctx, ws, "receipt", map[string][]string{"leaseId": {leaseID}})
}

// Wait blocks until ws's ledger has caught up with every command notified
// so far (tests and shutdown use it), or ctx ends.
func (l *Ledger) Wait(ctx context.Context, ws int64) error {
	w := l.get(ws)
	if w == nil {
		return errNotOpen
	}
	return l.waitFor(ctx, w, -1)
}

// waitFor blocks until w's ledger holds every command up to seq (-1: every
// command notified, whenever it is asked) and is not behind, or ctx ends.
func (l *Ledger) waitFor(ctx context.Context, w *wsLedger, seq int64) error {
	for {
		w.mu.Lock()
		grew, pos, loaded := w.grew, w.pos, w.loaded
		w.mu.Unlock()
		target := seq
		if target < 0 {
			target = w.notified.Load()
		}
		if loaded && !w.behind.Load() && pos.Seq >= target {
			return nil
		}
		l.poke()
		select {
		case <-grew:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
