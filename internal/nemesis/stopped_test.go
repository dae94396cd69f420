package nemesis

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// waitStopped sees a process stopped only once SIGSTOP has stopped it, and
// not after SIGCONT.
func TestAllStopped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if allStopped(pid) {
		t.Fatal("a running process seen stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(pid, 10*time.Second)
	if !allStopped(pid) {
		t.Fatal("a stopped process not seen stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for allStopped(pid) {
		if time.Now().After(deadline) {
			t.Fatal("a continued process still seen stopped")
		}
		time.Sleep(time.Millisecond)
	}
}
