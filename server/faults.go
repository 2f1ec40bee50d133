package server

// faults are the seams tests put faults in. They are not part of Config's
// exported fields: this package's tests set them directly, and a binary
// built with the tag leaseplane_testfaults (serve's --test-fault and
// --test-drills) through SetTestFaults (faults_on.go); the product binary
// has no way to set them.
type faults struct {
	// drillNames, when set, limits the drills a run runs to these (the
	// crashed-holder drill takes 30 s of real time).
	drillNames []string
	// disableAlarms arms no alarm: leases lapse only when a command comes.
	disableAlarms bool
	// snapshot, when set, is called before each snapshot is written (a
	// slow snapshot write).
	snapshot func()
	// commit, when set, is called before each commit; a non-nil error
	// fails the commit as a disk write failure would.
	commit func() error
	// ledger, when set, is called before each ledger write; a non-nil
	// error fails it (the ledger's outage path).
	ledger func() error
}
