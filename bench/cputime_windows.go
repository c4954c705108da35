package bench

import (
	"syscall"
	"time"
)

// cpuTime is this process's user+system CPU time (GetProcessTimes).
func cpuTime() time.Duration {
	user, sys := cpuTimes()
	return user + sys
}

// cpuTimes is this process's CPU time in user space and in the kernel.
func cpuTimes() (user, sys time.Duration) {
	h, err := syscall.GetCurrentProcess()
	if err != nil {
		return 0, 0
	}
	var creation, exit, kernel, usr syscall.Filetime
	if syscall.GetProcessTimes(h, &creation, &exit, &kernel, &usr) != nil {
		return 0, 0
	}
	ticks := func(f syscall.Filetime) time.Duration {
		return time.Duration(int64(f.HighDateTime)<<32|int64(f.LowDateTime)) * 100 // 100 ns units
	}
	return ticks(usr), ticks(kernel)
}
