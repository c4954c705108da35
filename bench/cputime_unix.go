//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime is this process's user+system CPU time (getrusage RUSAGE_SELF:
// children, such as a fake server started by the bench, are not counted).
func cpuTime() time.Duration {
	user, sys := cpuTimes()
	return user + sys
}

// cpuTimes is this process's CPU time in user space and in the kernel.
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
