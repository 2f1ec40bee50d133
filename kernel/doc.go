// Package kernel is the lease state machine of one leaseplane workspace.
//
// It is the only place where lease decisions are made. Every host (the
// native server and CLI, the GOOS=js build in browsers, the GOOS=wasip1
// build under wazero) feeds it the same commands and must print the same
// bytes; docs/SEMANTICS.md says what those bytes are.
//
// The kernel imports only the standard library. It never reads a clock
// (every command carries nowMs from the host), draws no randomness, does no
// I/O, starts no goroutines, and never lets map order reach its output. Its
// JSON is read and written by one hand-written codec, kernel/internal/jsontext,
// so that the bytes are canonical and no reflection sits on the per-command
// path, which matters most inside WebAssembly. machine.go decides;
// encode.go turns the decisions into answers, events and snapshots.
//
// Callers use a Machine: Apply (or ApplyJSON / Step for raw JSON) a command,
// read the Result, ask NextAlarm for when to send the next tick, and
// Snapshot / Restore to persist. A Machine is not safe for concurrent use:
// the host applies one workspace's commands one at a time.
//
// Choices the spec leaves open, made here and documented in docs/SEMANTICS.md:
//   - invalid input changes nothing, not even the clock;
//   - request bodies are strict: unknown or duplicated fields, and fields
//     that the operation does not take, are invalid_request;
//   - holders and holder in lease_held name the other agents whose leases
//     conflict with the asked mode, in grant order;
//   - a waiter remembers the mode it asked for, and wait-for edges only run
//     to holders that conflict with that mode;
//   - an expired lease's event carries the expiry time, not the tick's time,
//     so events do not depend on when the host's alarm fired;
//   - suspend, resume and forget emit operator.suspend / operator.resume /
//     operator.forget events, each before the revocations it causes;
//   - the claims of admitted waiters (the grant rule) end at the kernel's
//     alarms like expiries and lapses, so a host can ask again for a waiter;
//   - what is idle is forgotten: resources without leases or waiters, and
//     agents with trust 0 that hold and wait on nothing and are not
//     suspended; live resources are kept in a name index (index.go), so
//     wait pages and snapshots cost what is live;
//   - Machine.SetSemantics(1) decides as leaseplane 0.1 did, for hosts that
//     replay a log 0.1 wrote (docs/SEMANTICS.md, choice 21).
package kernel
