package bench

import (
	"os"
	"path/filepath"
	"runtime/pprof"
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

// minorFaults is the number of minor page faults the process has taken: a
// run that grows the heap into memory the process never used before pays
// one per fresh page.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// startPhaseProfile starts a CPU profile written to a new file
// dir/name-*.pprof, for the measured phase of a run, and returns what
// stops it. With dir empty it does nothing.
func startPhaseProfile(dir, name string) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.CreateTemp(dir, filepath.Base(name)+"-*.pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
