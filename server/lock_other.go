//go:build !unix

package server

// lockDataDir is a no-op where flock is not available.
func lockDataDir(dir string) (release func(), err error) { return func() {}, nil }
