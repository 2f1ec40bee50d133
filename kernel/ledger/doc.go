// Package ledger is the pure part of a workspace's signed ledger: leaf and
// tree hashes, C2SP tlog-checkpoint notes signed with Ed25519, inclusion and
// consistency proofs, receipts in the C2SP tlog-proof@v1 text form, bundles,
// and their verification. It does no I/O and draws no randomness (keys and
// random sources come from its callers), so the server, the command line
// and the browser builds all check a ledger with the same code.
//
// The Merkle math is golang.org/x/mod/sumdb/tlog's (RFC 6962 hashes, stored
// as tlog.StoredHashes lays them out); notes are golang.org/x/mod/sumdb/note's.
// On top of them this package adds one rule: verification accepts only the
// canonical encoding of everything it reads. Every base64 field is decoded
// and encoded again and must come out the same (note.Open and the base64
// decoders accept more than one spelling of the same bytes), a checkpoint has
// exactly its three lines and one signature, a receipt or bundle must be
// byte for byte what this package writes for its content, and a bundle
// entry's parsed "event" must be exactly its "data". So no two different
// receipts or bundles verify as the same thing.
//
// The package imports x/mod's tlog and note (rule 1 of docs/ARCHITECTURE.md
// allows them here) and, for reading bundles, the kernel's own strict JSON
// reader: no encoding/json, no fmt, so that the browser build stays small.
package ledger
