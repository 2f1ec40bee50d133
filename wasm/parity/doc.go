// Package parity holds the cross-host parity test: every corpus scenario
// (kernel/testdata/scenarios) and at least 10,000 seeded random scenarios
// (kernel/scenario.Random) replayed natively, in the wasip1 build under
// wazero and in the GOOS=js build under Node, compared byte for byte. There
// is no list of exceptions.
//
// Each run draws a new seed and logs it; LEASEPLANE_PARITY_SEED=N replays
// that run and LEASEPLANE_PARITY_N=N changes how many random scenarios it
// draws. Transcripts must match byte for byte, and a scenario refused by
// one host must be refused by all with the same message. A mismatch fails with the run's seed, the scenario's seed and a
// scenario shrunk by kernel/scenario.Shrink that still differs.
//
// The Node host needs web/static/leaseplane.wasm and wasm_exec.js: run
// `make parity`, which builds them first.
package parity
