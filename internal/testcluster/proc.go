package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child process in its own process group, with its output
// appended to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string

	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed

	killOnce sync.Once
}

// startProcess starts bin with args in dir, appending stdout and stderr to
// logPath.
func startProcess(name, bin string, args []string, dir, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("testcluster: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		fmt.Fprintf(logFile, "==== %s: %s exited: %v\n", time.Now().Format(time.RFC3339Nano), name, p.waitErr)
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process group and waits (bounded) for the
// process to be reaped. Safe to call more than once.
func (p *process) kill() {
	p.killOnce.Do(func() {
		if p.cmd.Process == nil {
			return
		}
		pid := p.cmd.Process.Pid
		// Negative pid: the whole process group (Setpgid made pid its id).
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			_ = p.cmd.Process.Kill()
		}
	})
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// stop sends SIGTERM to the process group and waits up to timeout for the
// process to exit; then it kills the group (SIGKILL) and waits. It reports
// whether the process exited on SIGTERM.
func (p *process) stop(timeout time.Duration) bool {
	if p.cmd.Process == nil {
		return true
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
	}
	p.kill()
	return false
}

// logTail returns about the last n lines of the process log.
func (p *process) logTail(n int) string { return fileTail(p.logPath, n) }

func fileTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	const maxBytes = 16 << 10
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := st.Size() - maxBytes
	if off < 0 {
		off = 0
	}
	buf, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(buf, "\n"), []byte("\n"))
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // first line is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freePorts(n int) ([]int, error) {
	// Hold all listeners open until every port is picked so that the ports
	// are distinct.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// portInUse reports whether the log says a listener could not bind.
func portInUse(log string) bool {
	return strings.Contains(log, "address already in use")
}
