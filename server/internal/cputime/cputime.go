// Package cputime reads the CPU time the test process has used, for the
// benchmarks that report CPU per operation beside wall time.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process is the CPU time (user and system) the process has used so far;
// a failed read fails tb.
func Process(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
