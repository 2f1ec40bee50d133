//go:build leaseplane_testfaults

package server

// TestFaults are the faults a binary for tests may put in a server
// (package cmd/leaseplane/internal/testfaults, serve --test-fault and
// --test-drills). Only a build with the tag leaseplane_testfaults has it.
type TestFaults struct {
	// DrillNames limits the drills a run runs to these.
	DrillNames []string
	// DisableAlarms arms no alarm.
	DisableAlarms bool
	// CommitFault is called before each commit; an error fails it.
	CommitFault func() error
}

// SetTestFaults puts f in the server cfg configures.
func (cfg *Config) SetTestFaults(f TestFaults) {
	cfg.faults.drillNames = f.DrillNames
	cfg.faults.disableAlarms = f.DisableAlarms
	cfg.faults.commit = f.CommitFault
}
