package main

import (
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/leaseplane/leaseplane/kernel"
)

// Test-only faults of serve --test-fault, for the linearizability check
// (server/lincheck): one a real disk can show, one a correct plane never
// may.

// errFailpoint is the commit failure of --test-fault fail-commits.
var errFailpoint = errors.New("test failpoint: commit failed")

// failSomeCommits fails about one commit in twenty, as a disk that
// sometimes errs would: the plane must answer those commands 503 and grant
// nothing.
func failSomeCommits() error {
	if rand.IntN(20) == 0 {
		return errFailpoint
	}
	return nil
}

// grantTwiceEngine is --test-fault grant-twice: every lease_held refusal
// is answered as a grant to the asker (its state unchanged), so that two
// agents hold the same resource at once. The linearizability check must
// report it.
type grantTwiceEngine struct{ kernel.Factory }

type grantTwice struct{ kernel.Engine }

func (f grantTwiceEngine) New(rules []byte) (kernel.Engine, error) {
	e, err := f.Factory.New(rules)
	return grantTwice{e}, err
}

func (f grantTwiceEngine) Restore(snap []byte) (kernel.Engine, error) {
	e, err := f.Factory.Restore(snap)
	return grantTwice{e}, err
}

func (e grantTwice) Apply(op kernel.Op, now int64, body []byte) (kernel.Result, error) {
	r, err := e.Engine.Apply(op, now, body)
	if err != nil || op != kernel.OpAcquire || r.Status != 409 {
		return r, err
	}
	c, derr := kernel.DecodeRequest(op, now, body)
	if derr != nil {
		return r, err
	}
	b := []byte(`{"ok":true,"lease":{"id":"lease_fault","resource":`)
	b = strconv.AppendQuote(b, c.Resource)
	b = append(b, `,"holder":`...)
	b = strconv.AppendQuote(b, c.ActorDid)
	b = append(b, `,"mode":"write","fence":1099511627776,"grantedAtMs":`...)
	b = strconv.AppendInt(b, now, 10)
	b = append(b, `,"expiresAtMs":`...)
	b = strconv.AppendInt(b, now+kernel.LeaseTTLMs, 10)
	b = append(b, "}}"...)
	r.Status, r.Answer, r.RetryAfterSec = 200, b, 0
	return r, nil
}
