package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
)

// The command log in runs: since schema 2, a group commit writes each
// workspace's commands of the group as one row of log_runs, the commands
// packed one after another (packRun), instead of one row per command in
// log. A row costs the same B-tree work whatever its size, so a group of
// 25 commands takes one insert instead of 25 (BenchmarkCommitPairs:
// about a third less CPU per command). Rows of log written before stay
// and are read first: a workspace's commands there all come before its
// runs. Trimming deletes whole runs, so the log may keep a few commands
// more than it must, never fewer.

// maxRun bounds the commands of one run; it also bounds how far before a
// seq a run holding it can start (readLog).
const maxRun = 256

// runVersion is the first byte of a packed run.
const runVersion = 1

// packRun appends recs (one workspace's, seqs consecutive) packed: the
// version, then per command its time, op, body, status, events (0 for
// NULL, else length + 1), semantics and rules (0 for NULL, else length +
// 1), each length a uvarint before its bytes.
func packRun(b []byte, recs []Record) []byte {
	b = append(b, runVersion)
	for i := range recs {
		r := &recs[i]
		b = binary.AppendVarint(b, r.NowMs)
		b = appendBytes(b, []byte(r.Op))
		b = appendBytes(b, r.Body)
		b = binary.AppendVarint(b, int64(r.Status))
		events := r.Events
		if events == nil || string(events) == "[]" {
			events = []byte{} // no events; NULL means "not known"
		}
		b = binary.AppendUvarint(b, uint64(len(events))+1)
		b = append(b, events...)
		sem := r.Semantics
		if sem == 0 {
			sem = 1
		}
		b = binary.AppendVarint(b, int64(sem))
		if r.Rules == nil {
			b = append(b, 0)
		} else {
			b = binary.AppendUvarint(b, uint64(len(r.Rules))+1)
			b = append(b, r.Rules...)
		}
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// logged is one command read back from the log, with whether its events
// are known (false for a row of log written before the log kept events).
type logged struct {
	Record
	known bool
}

var errBadRun = errors.New("a packed run of the log is malformed")

// unpackRun calls fn for each command of the run packed in b whose first
// command is seq first, n commands in all, until fn returns false.
func unpackRun(ws, first int64, n int64, b []byte, fn func(logged) bool) error {
	if len(b) == 0 || b[0] != runVersion {
		return errBadRun
	}
	b = b[1:]
	varint := func() int64 {
		v, k := binary.Varint(b)
		if k <= 0 {
			b = nil
			return 0
		}
		b = b[k:]
		return v
	}
	// bytesN reads a uvarint length (less off) and that many bytes; nil
	// with null when the length is 0 and off is 1.
	bytesN := func(off uint64) (v []byte, null, ok bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, false, false
		}
		if off == 1 && l == 0 {
			b = b[k:]
			return nil, true, true
		}
		if l < off || l-off > uint64(len(b)-k) {
			return nil, false, false
		}
		b = b[k:]
		l -= off
		v, b = b[:l:l], b[l:]
		return v, false, true
	}
	for i := range n {
		x := logged{Record: Record{Workspace: ws, Seq: first + i}}
		x.NowMs = varint()
		op, _, ok1 := bytesN(0)
		body, _, ok2 := bytesN(0)
		x.Status = int(varint())
		events, nullEv, ok3 := bytesN(1)
		x.Semantics = int(varint())
		rules, _, ok4 := bytesN(1)
		if b == nil || !ok1 || !ok2 || !ok3 || !ok4 {
			return errBadRun
		}
		x.Op, x.Body, x.known = string(op), body, !nullEv
		if x.known {
			x.Events = events
			if x.Events == nil {
				x.Events = []byte{}
			}
		}
		x.Rules = rules
		if !fn(x) {
			return nil
		}
	}
	if len(b) != 0 {
		return errBadRun
	}
	return nil
}

// runs splits recs into runs: each workspace's commands in their order,
// cut where a seq does not follow the one before and at maxRun.
func runs(recs []Record) [][]Record {
	if len(recs) == 0 {
		return nil
	}
	one := true
	for i := range recs {
		if recs[i].Workspace != recs[0].Workspace {
			one = false
			break
		}
	}
	var byWs [][]Record
	if one {
		byWs = [][]Record{recs}
	} else {
		at := map[int64]int{}
		for _, r := range recs {
			i, ok := at[r.Workspace]
			if !ok {
				i = len(byWs)
				at[r.Workspace] = i
				byWs = append(byWs, nil)
			}
			byWs[i] = append(byWs[i], r)
		}
	}
	var out [][]Record
	for _, rs := range byWs {
		start := 0
		for i := 1; i <= len(rs); i++ {
			if i == len(rs) || rs[i].Seq != rs[i-1].Seq+1 || i-start == maxRun {
				out = append(out, rs[start:i])
				start = i
			}
		}
	}
	return out
}

// readLog calls fn for each logged command of workspace ws with seq
// above after, in order, until fn returns false: the rows of log, then
// the runs.
func (s *Store) readLog(ctx context.Context, ws, after int64, fn func(logged) bool) error {
	what := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("store: read log of workspace %d: %w", ws, err)
	}
	more := true
	err := func() error {
		rows, err := s.db.QueryContext(ctx, `SELECT seq, now_ms, op, body, status, events, semantics, rules FROM log
			WHERE workspace_id = ? AND seq > ? ORDER BY seq`, ws, after)
		if err != nil {
			return err
		}
		defer rows.Close()
		for more && rows.Next() {
			x := logged{Record: Record{Workspace: ws}}
			var rules sql.NullString
			if err := rows.Scan(&x.Seq, &x.NowMs, &x.Op, &x.Body, &x.Status, &x.Events, &x.Semantics, &rules); err != nil {
				return err
			}
			x.known = x.Events != nil
			if rules.Valid {
				x.Rules = []byte(rules.String)
			}
			more = fn(x)
		}
		return rows.Err()
	}()
	if err != nil || !more {
		return what(err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT seq, last_seq, cmds FROM log_runs
		WHERE workspace_id = ? AND seq > ? AND last_seq > ? ORDER BY seq`, ws, after-maxRun, after)
	if err != nil {
		return what(err)
	}
	defer rows.Close()
	for more && rows.Next() {
		var first, last int64
		var cmds []byte
		if err := rows.Scan(&first, &last, &cmds); err != nil {
			return what(err)
		}
		if last < first || last-first >= maxRun {
			return what(fmt.Errorf("%w (commands %d to %d)", errBadRun, first, last))
		}
		err := unpackRun(ws, first, last-first+1, cmds, func(x logged) bool {
			if x.Seq <= after {
				return true
			}
			more = fn(x)
			return more
		})
		if err != nil {
			return what(fmt.Errorf("%w (commands %d to %d)", err, first, last))
		}
	}
	return what(rows.Err())
}
