//go:build unix

package backup

import (
	"errors"
	"syscall"
)

// alive reports whether a process with id pid runs.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
