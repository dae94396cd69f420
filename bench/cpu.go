package bench

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process has used: the
// informer, and the source and handlers, which cost both informers the
// same. Unlike wall time it barely moves when other processes take the
// machine's cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
