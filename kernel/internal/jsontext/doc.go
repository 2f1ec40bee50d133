// Package jsontext is the kernel's one JSON codec: a strict reader (one
// object reader with a policy for duplicate names and bounds on members
// and nesting, an array reader, typed kinds) and a writer of canonical
// bytes (no insignificant space; strings escaped one way). The kernel, its
// snapshots, scenarios, the ledger and, through the kernel's exports, the
// server read and write JSON with it and nothing else.
//
// It is written by hand, with the standard library only, so that no
// reflection runs per command (which matters most inside WebAssembly) and
// every build of the kernel reads and writes the same bytes.
package jsontext
