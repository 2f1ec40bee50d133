package main

import (
	"bytes"
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

// faulty is factory's engines with their answers rewritten by fault:
// serve's test-only faults of one wrong verdict.
func faulty(factory kernel.Factory, fault func(op kernel.Op, now int64, body []byte, r kernel.Result) kernel.Result) kernel.Factory {
	return kernel.WrapFactory(factory, "", func(e kernel.Engine) kernel.Engine { return faultyEngine{e, fault} })
}

type faultyEngine struct {
	kernel.Engine
	fault func(op kernel.Op, now int64, body []byte, r kernel.Result) kernel.Result
}

func (e faultyEngine) Apply(op kernel.Op, now int64, body []byte) (kernel.Result, error) {
	r, err := e.Engine.Apply(op, now, body)
	if err != nil {
		return r, err
	}
	return e.fault(op, now, body, r), nil
}

// wrongDeadlock is --test-fault wrong-deadlock: every deadlock refusal is
// answered as lease_held (one verdict wrong), so the deadlock drill must
// fail.
func wrongDeadlock(_ kernel.Op, _ int64, _ []byte, r kernel.Result) kernel.Result {
	const from, to = `"reason":"deadlock"`, `"reason":"lease_held"`
	r.Answer = bytes.Replace(r.Answer, []byte(from), []byte(to), 1)
	return r
}

// grantTwice is --test-fault grant-twice: every lease_held refusal is
// answered as a grant to the asker (its state unchanged), so that two
// agents hold the same resource at once. The linearizability check must
// report it.
func grantTwice(op kernel.Op, now int64, body []byte, r kernel.Result) kernel.Result {
	if op != kernel.OpAcquire || r.Status != 409 {
		return r
	}
	c, err := kernel.DecodeRequest(op, now, body)
	if err != nil {
		return r
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
	return r
}
