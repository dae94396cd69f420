package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// The command as a user runs it: built, started, used through the
// kubeconfig it writes (the gate on: a list with a shard selector says the
// server applied it), then stopped with SIGTERM or SIGINT: both servers
// gone, the data directory and the kubeconfig removed.
func TestLocalClusterStartsAndStopsCleanly(t *testing.T) {
	testcluster.RequireBinaries(t)
	bin := filepath.Join(t.TempDir(), "localcluster")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) { testStartStop(t, bin, sig) })
	}
}

var (
	readyLine = regexp.MustCompile(`etcd \S+ \(pid (\d+),.*kube-apiserver v1\.37 \S+ \(pid (\d+),.*feature gates ShardedListAndWatch=true`)
	dirLine   = regexp.MustCompile(`data and logs in (\S+)`)
)

func testStartStop(t *testing.T, bin string, sig syscall.Signal) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--pods", "20", "--namespace", "shards")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()

	var apiPID, etcdPID int
	var dir string
	var all []string
	deadline := time.After(90 * time.Second)
	for running := false; !running; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("localcluster exited before it ran: %v\n%s\n%s", <-exited, strings.Join(all, "\n"), stderr.String())
			}
			all = append(all, l)
			if m := readyLine.FindStringSubmatch(l); m != nil {
				etcdPID, _ = strconv.Atoi(m[1])
				apiPID, _ = strconv.Atoi(m[2])
			}
			if m := dirLine.FindStringSubmatch(l); m != nil {
				dir = m[1]
			}
			running = strings.Contains(l, "running;")
		case <-deadline:
			t.Fatalf("localcluster not running after 90s:\n%s\n%s", strings.Join(all, "\n"), stderr.String())
		}
	}
	if apiPID == 0 || etcdPID == 0 || dir == "" {
		t.Fatalf("no pids or data directory in the output:\n%s", strings.Join(all, "\n"))
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Insecure {
		t.Error("the kubeconfig skips TLS verification")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Pods("shards").List(context.Background(), metav1.ListOptions{
		ShardSelector: "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 20 {
		t.Errorf("%d pods listed, want the 20 created", len(list.Items))
	}
	if list.ShardInfo == nil {
		t.Error("the list has no shardInfo: the ShardedListAndWatch gate is off")
	}

	stopped := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		for l := range lines {
			all = append(all, l)
		}
		if err != nil {
			t.Fatalf("localcluster exited with %v after %v:\n%s\n%s", err, sig, strings.Join(all, "\n"), stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("localcluster did not exit within 60s of %v", sig)
	}
	t.Logf("%v: localcluster exited after %v", sig, time.Since(stopped).Round(time.Millisecond))
	for name, pid := range map[string]int{"kube-apiserver": apiPID, "etcd": etcdPID} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there after localcluster exited: %v", name, pid, err)
		}
	}
	for _, p := range []string{dir, kubeconfig} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		gates string
		err   string
	}{
		{nil, "ShardedListAndWatch=true", ""},
		{[]string{"--sharded-list-and-watch=false"}, "", ""},
		{[]string{"--feature-gates", "WatchList=true"}, "ShardedListAndWatch=true,WatchList=true", ""},
		{[]string{"--pods", "-1"}, "", "--pods must not be negative"},
		{[]string{"extra"}, "", "unexpected arguments"},
	} {
		cfg, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err == "" && cfg.gates() != tc.gates:
			t.Errorf("%q: gates %q, want %q", tc.args, cfg.gates(), tc.gates)
		}
	}
}
