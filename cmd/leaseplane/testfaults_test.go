package main

import "github.com/leaseplane/leaseplane/cmd/leaseplane/internal/testfaults"

// This package's tests run serve in-process with --test-fault and
// --test-drills.
func init() { testFaults = testfaults.Register }
