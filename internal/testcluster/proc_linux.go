package testcluster

import "syscall"

func sysProcAttr() *syscall.SysProcAttr {
	// Setpgid: a process group of its own, so cleanup can kill the process
	// and anything it spawned. Pdeathsig: SIGKILL when the test binary dies
	// without running its cleanups (e.g. a go test -timeout panic).
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
