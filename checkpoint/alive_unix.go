//go:build unix

package checkpoint

import (
	"errors"
	"syscall"
)

// processAlive reports whether process pid exists on this host and has
// not exited (signal 0 checks without signalling; EPERM means it exists
// but is not ours). A process killed but not yet reaped by its parent — a
// zombie — still answers signal 0, and holds nothing.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return (err == nil || errors.Is(err, syscall.EPERM)) && !exited(pid)
}
