// Package shardproc starts internal/shardmember processes and reads their
// state, for the real-cluster tests and benchmarks of package shard.
package shardproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var built struct {
	mu    sync.Mutex
	paths map[bool]string
}

// Build builds internal/shardmember (with -race when race is set) once per
// process and returns the binary's path.
func Build(race bool) (string, error) {
	built.mu.Lock()
	defer built.mu.Unlock()
	if p, ok := built.paths[race]; ok {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "shardmember")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "shardmember")
	args := []string{"build", "-o", path}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/actorinformer/actorinformer/internal/shardmember")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build shardmember: %v\n%s", err, out)
	}
	if built.paths == nil {
		built.paths = map[bool]string{}
	}
	built.paths[race] = path
	return path, nil
}

// ProtocolAt is the shard protocol version of the member program at git
// revision rev ("" for the working tree): members of two versions refuse
// each other.
func ProtocolAt(rev string) (int, error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return 0, fmt.Errorf("git rev-parse --show-toplevel: %v", err)
	}
	root := strings.TrimSpace(string(top))
	var src []byte
	if rev == "" {
		src, err = os.ReadFile(filepath.Join(root, "shard", "informer.go"))
	} else {
		src, err = exec.Command("git", "-C", root, "show", rev+":shard/informer.go").Output()
	}
	if err != nil {
		return 0, fmt.Errorf("shard/informer.go at %q: %v", rev, err)
	}
	m := regexp.MustCompile(`const protocolVersion = (\d+)`).FindSubmatch(src)
	if m == nil {
		return 0, fmt.Errorf("shard/informer.go at %q: no protocolVersion", rev)
	}
	return strconv.Atoi(string(m[1]))
}

// BuildAt builds the member program as it was at the git revision rev of
// the repository the working directory is in: its tree, exported to a
// temporary directory (git archive), built there. For a rolling update
// from an older version. The program is left alone in that directory: the
// caller removes filepath.Dir of the path once done with it.
func BuildAt(rev string) (path string, err error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %v", err)
	}
	dir, err := os.MkdirTemp("", "shardmember-at")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	tarball := filepath.Join(dir, "src.tar")
	if out, err := exec.Command("git", "-C", strings.TrimSpace(string(top)), "archive", "-o", tarball, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v: %s", rev, err, out)
	}
	if out, err := exec.Command("tar", "-x", "-C", src, "-f", tarball).CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, out)
	}
	path = filepath.Join(dir, "shardmember")
	build := exec.Command("go", "build", "-o", path, "./internal/shardmember")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build shardmember at %s: %v\n%s", rev, err, out)
	}
	_ = os.Remove(tarball)
	return path, os.RemoveAll(src)
}

// Proc is a running shardmember.
type Proc struct {
	Name   string
	URL    string
	Calls  string // its handler call log
	Log    string // its stderr
	Start  time.Time
	cmd    *exec.Cmd
	done   chan struct{}
	exited time.Time
}

// Exited is when the process exited (zero while it runs).
func (p *Proc) Exited() time.Time {
	select {
	case <-p.done:
		return p.exited
	default:
		return time.Time{}
	}
}

// State is what a member's state page answers (see internal/shardmember).
type State struct {
	Mode          string `json:"mode"`
	Member        string `json:"member"`
	Synced        bool   `json:"synced"`
	SyncedAfterMS int64  `json:"syncedAfterMs"`
	Ranges        []int  `json:"ranges"`
	Objects       int    `json:"objects"`
	Bytes         int64  `json:"bytes"`
	ListRequests  int64  `json:"listRequests"`
	ListBytes     int64  `json:"listBytes"`
	WatchBytes    int64  `json:"watchBytes"`
	// ResourceBytes are Bytes by the resource the requests named.
	ResourceBytes map[string]int64 `json:"resourceBytes"`
	// LeaseRequests counts the lease client's requests by kind: get,
	// watch, create, update, delete.
	LeaseRequests map[string]int64  `json:"leaseRequests,omitempty"`
	WarmStarts    int64             `json:"warmStarts"`
	WarmFallbacks int64             `json:"warmFallbacks"`
	Handovers     []Handover        `json:"handovers"`
	HeapAfterSync uint64            `json:"heapAfterSync"`
	HeapNow       uint64            `json:"heapNow"`
	CPUSeconds    float64           `json:"cpuSeconds"`
	GCCPUSeconds  float64           `json:"gcCPUSeconds"`
	GCIdleSeconds float64           `json:"gcIdleSeconds"`
	GCCycles      uint64            `json:"gcCycles"`
	AllocBytes    uint64            `json:"allocBytes"`
	FilterMode    string            `json:"filterMode"`
	View          []string          `json:"view"`
	Failed        string            `json:"failed"`
	Cache         map[string]string `json:"cache"`
	Handler       map[string]string `json:"handler"`
	HandlerErrors []string          `json:"handlerErrors"`
}

// Handover is one of a member's last handovers (shard.Handover).
type Handover struct {
	From, To string
	Kind     string
	Start    time.Time
	Unserved time.Duration
	// Claim and CatchUp are parts of Unserved (shard.Handover).
	Claim, CatchUp time.Duration
}

// Start starts bin with args (plus -calls in a temporary folder, unless
// args set -calls: "" logs no call) and waits for its state page. The
// process is killed at the test's end.
func Start(t testing.TB, bin, name string, args ...string) *Proc {
	t.Helper()
	p, log := TryStart(t, bin, name, args...)
	if p == nil {
		t.Fatalf("%s exited at start:\n%s", name, log)
	}
	return p
}

// StartCmd is Start with the command built by cmd, given the call log's
// path (for a member run in a wrapper: internal/kubeletsim's pods).
//
// A process that dies at start of protoactor's etcd provider race
// (ProviderRace), which a member cannot avoid, is started again, up to
// twice.
func StartCmd(t testing.TB, name string, cmd func(calls string) *exec.Cmd) *Proc {
	t.Helper()
	p, log := TryStartCmd(t, name, cmd)
	if p == nil {
		t.Fatalf("%s exited at start:\n%s", name, log)
	}
	return p
}

// TryStart is Start, except that a process that exits before it serves
// does not fail the test: TryStart returns nil and the tail of its log.
func TryStart(t testing.TB, bin, name string, args ...string) (*Proc, string) {
	t.Helper()
	return TryStartCmd(t, name, func(calls string) *exec.Cmd {
		if slices.Contains(args, "-calls") {
			return exec.Command(bin, args...)
		}
		return exec.Command(bin, append(args, "-calls", calls)...)
	})
}

// TryStartCmd is StartCmd, except that a process that exits before it
// serves (after the restarts StartCmd makes) does not fail the test:
// TryStartCmd returns nil and the tail of its log.
func TryStartCmd(t testing.TB, name string, cmd func(calls string) *exec.Cmd) (*Proc, string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, log := startCmd(t, name, cmd)
		if p != nil {
			return p, ""
		}
		if attempt == 3 || !ProviderRace(log) {
			return nil, log
		}
		t.Logf("%s died at start of protoactor's etcd provider race; starting it again:\n%s", name, log)
	}
}

// ProviderRace says whether a member's log ends in the fatal error of
// protoactor's etcd provider race: a "concurrent map" fault with the
// provider's code on the failing goroutine's stack. The provider writes
// its node's metadata map (Node.SetMeta, from its keep-alive goroutine's
// setLeaseID and from its watch) while other goroutines read it
// (Node.GetMeta: the watch, and Shutdown's updateLeadership), without a
// lock; a member cannot avoid it.
func ProviderRace(log string) bool {
	i := strings.LastIndex(log, "fatal error: concurrent map")
	return i >= 0 && strings.Contains(log[i:], "clusterproviders/etcd")
}

// startCmd starts the process once; nil and the tail of its log if it
// exited before it served.
func startCmd(t testing.TB, name string, cmd func(calls string) *exec.Cmd) (*Proc, string) {
	t.Helper()
	dir := t.TempDir()
	p := &Proc{Name: name, Calls: filepath.Join(dir, "calls"), Log: filepath.Join(dir, "stderr"), done: make(chan struct{}), Start: time.Now()}
	stderr, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd(p.Calls)
	p.cmd.Stderr = stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); p.exited = time.Now(); stderr.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case p.URL = <-urls:
	case <-p.done:
		return nil, ExitLog(p.Log)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start:\n%s", name, Tail(p.Log, 30))
	}
	return p, ""
}

// ExitLog is what to show of the log at path of a process that exited:
// from its last fatal error on (the error and the failing goroutine's
// stack, at most 40 lines), or else its last 30 lines.
func ExitLog(path string) string {
	b, _ := os.ReadFile(path)
	s := string(b)
	i := strings.LastIndex(s, "fatal error:")
	if i < 0 {
		return tail(s, 30)
	}
	lines := strings.Split(strings.TrimRight(s[i:], "\n"), "\n")
	return strings.Join(lines[:min(len(lines), 40)], "\n")
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), n)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stateClient bounds a state read: a frozen member (SIGSTOP) never answers.
var stateClient = &http.Client{Timeout: 5 * time.Second}

// State reads the member's state page; with objects, its cache and
// handler view too.
func (p *Proc) State(objects bool) (State, error) {
	q := ""
	if objects {
		q = "objects=1"
	}
	return p.StateQuery(q)
}

// StateQuery reads the state page with a query ("gc=1": the heap after a
// collection).
func (p *Proc) StateQuery(query string) (State, error) {
	var st State
	u := p.URL + "/state"
	if query != "" {
		u += "?" + query
	}
	resp, err := stateClient.Get(u)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Stop sends SIGTERM (a graceful leave) and waits up to timeout; it
// reports whether the process exited.
func (p *Proc) Stop(timeout time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Terminate sends SIGTERM (a graceful leave) and returns.
func (p *Proc) Terminate() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

// Kill sends SIGKILL and waits.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process (SIGSTOP and SIGCONT freeze and resume
// it).
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }
