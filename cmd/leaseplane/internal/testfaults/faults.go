//go:build leaseplane_testfaults

// Package testfaults holds the faults serve takes for tests only
// (--test-fault, --test-drills): they are only in a binary built with the
// build tag leaseplane_testfaults (servertest.TestBinary; the
// linearizability check and the drill tests run one), never in the product
// binary: without the tag this package, and server.SetTestFaults, do not
// exist.
package testfaults

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/leaseplane/leaseplane/kernel"
	"github.com/leaseplane/leaseplane/server"
)

// Register adds --test-fault and --test-drills to serve's flags fs and
// returns the function that applies them to cfg once the flags are
// parsed (false after writing why to stderr, when a value is bad).
func Register(fs *flag.FlagSet) func(cfg *server.Config, stderr io.Writer) bool {
	testFault := fs.String("test-fault", "", "for tests only: no-alarms (arm no alarm), wrong-deadlock (answer deadlock refusals as lease_held), fail-commits (fail about one commit in 20) or grant-twice (answer lease_held refusals as grants)")
	drillSet := fs.String("test-drills", "", "for tests only: comma-separated drills a run runs (default all six)")
	return func(cfg *server.Config, stderr io.Writer) bool {
		var f server.TestFaults
		switch *testFault {
		case "":
		case "no-alarms":
			f.DisableAlarms = true
		case "wrong-deadlock":
			cfg.Engine = faulty(cfg.Engine, wrongDeadlock)
		case "fail-commits":
			f.CommitFault = failSomeCommits
		case "grant-twice":
			cfg.Engine = faulty(cfg.Engine, grantTwice)
		default:
			fmt.Fprintf(stderr, "leaseplane serve: --test-fault %q: want no-alarms, wrong-deadlock, fail-commits or grant-twice\n", *testFault)
			return false
		}
		if *drillSet != "" {
			f.DrillNames = strings.Split(*drillSet, ",")
			for _, n := range f.DrillNames {
				if !slices.Contains(server.DrillNames, n) {
					fmt.Fprintf(stderr, "leaseplane serve: --test-drills: no drill %q (have %s)\n", n, strings.Join(server.DrillNames, ", "))
					return false
				}
			}
		}
		cfg.SetTestFaults(f)
		return true
	}
}

// The faults: one a real disk can show (failed commits), ones a correct
// plane never may (wrong verdicts), for the linearizability check
// (server/lincheck) and the drills' tests.

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

// faulty is factory's engines with the Ready of each step rewritten by
// fault: serve's test-only faults of one wrong verdict. The server steps
// every command (Engine.Step), replays included.
func faulty(factory kernel.Factory, fault func(c kernel.Command, r kernel.Ready) kernel.Ready) kernel.Factory {
	return kernel.WrapFactory(factory, "", func(e kernel.Engine) kernel.Engine { return faultyEngine{e, fault} })
}

type faultyEngine struct {
	kernel.Engine
	fault func(c kernel.Command, r kernel.Ready) kernel.Ready
}

func (e faultyEngine) Step(c kernel.Command) (kernel.Ready, error) {
	r, err := e.Engine.Step(c)
	if err != nil {
		return r, err
	}
	return e.fault(c, r), nil
}

// wrongDeadlock is --test-fault wrong-deadlock: every deadlock refusal,
// a command's own or a held ask's, is answered as lease_held (one verdict
// wrong), so the deadlock drill must fail.
func wrongDeadlock(_ kernel.Command, r kernel.Ready) kernel.Ready {
	const from, to = `"reason":"deadlock"`, `"reason":"lease_held"`
	r.Answer = bytes.Replace(r.Answer, []byte(from), []byte(to), 1)
	for i := range r.Answers {
		r.Answers[i].Answer = bytes.Replace(r.Answers[i].Answer, []byte(from), []byte(to), 1)
	}
	return r
}

// grantTwice is --test-fault grant-twice: every acquire refused lease_held,
// or held (its ask left in the kernel, answered to no one), is answered as
// a grant to the asker (its state unchanged), so that two agents hold the
// same resource at once. The linearizability check must report it.
func grantTwice(c kernel.Command, r kernel.Ready) kernel.Ready {
	if c.Op != kernel.OpAcquire || c.Invalid != "" || (r.Status != 409 && r.AskID == "") {
		return r
	}
	b := []byte(`{"ok":true,"lease":{"id":"lease_fault","resource":`)
	b = strconv.AppendQuote(b, c.Resource)
	b = append(b, `,"holder":`...)
	b = strconv.AppendQuote(b, c.ActorDid)
	b = append(b, `,"mode":"write","fence":1099511627776,"grantedAtMs":`...)
	b = strconv.AppendInt(b, c.NowMs, 10)
	b = append(b, `,"expiresAtMs":`...)
	b = strconv.AppendInt(b, c.NowMs+kernel.LeaseTTLMs, 10)
	b = append(b, "}}"...)
	r.Status, r.Answer, r.RetryAfterSec, r.AskID = 200, b, 0, ""
	return r
}
