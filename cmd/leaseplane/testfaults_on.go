//go:build leaseplane_testfaults

package main

import "github.com/leaseplane/leaseplane/cmd/leaseplane/internal/testfaults"

// A binary for tests (go build -tags leaseplane_testfaults): serve takes
// --test-fault and --test-drills.
func init() { testFaults = testfaults.Register }
