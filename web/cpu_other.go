//go:build !unix

package web

import "time"

// processCPU is 0 where this build does not read the process's CPU time:
// idleSince then always reports idle.
func processCPU() time.Duration { return 0 }
