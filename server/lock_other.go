//go:build !unix

package server

// lockDataDir is a no-op where flock is not available.
func lockDataDir(dir string) (release func(), err error) { return func() {}, nil }

// DataDirInUse reports whether a running leaseplane serve holds dir's lock;
// without file locks it cannot tell, and says no.
func DataDirInUse(dir string) bool { return false }
