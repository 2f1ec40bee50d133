// Package lincheck checks that the lease plane is linearizable, as a
// single copy of the kernel would be, while it is killed and its commits
// fail: its tests run the real leaseplane binary, drive it with concurrent
// clients over REST, SIGKILL and restart it at random moments with a
// failpoint failing some commits (serve --test-fault fail-commits, in a
// binary built with the test faults' build tag: servertest.TestBinary), and
// feed the history to github.com/anishathalye/porcupine against a model of
// one resource. It is the home of porcupine (a test-only dependency).
//
// The model, per resource (histories are partitioned by resource): the
// holder, its fence and its expiry, the highest fence granted and the
// plane's latest time, all read from the answers. A grant is legal only
// when no other agent's lease can still be live at its grantedAtMs, with a
// fence above every earlier one (a renewal keeps its fence), at a time no
// earlier than any earlier grant's; a lease_held naming a holder is legal
// only while that agent holds the resource; a lease_held without a holder
// (claims of admitted waiters stand in the way) always is; a deadlock
// never is (each client keeps to one resource, so there is no cycle). A
// release says released true only while the agent holds the resource. An
// operation whose outcome is unknown (its connection broke after the
// request was sent, or the answer did not come) forks: it took effect, or
// it did not, as etcd's robustness tests do. A 503 is an operation that
// took no effect: the plane promises that nothing was granted. A third of
// the acquires are held requests (?waitUpToMs=100..1500): a held
// request's answer, a grant or its last lease_held, takes effect at one
// moment between its call and its return like any other's, so the model
// judges it the same way; one cut by a kill forks like any other.
//
// The short run is part of `make test`; `make test-long` runs it for ten
// minutes with 32 clients. A test also runs the binary with a fault that
// grants twice (serve --test-fault grant-twice) and requires the check to
// report the violation, so a check that cannot fail would be noticed.
package lincheck
