package usercheck

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// runsPrograms are the documents whose complete programs a test runs.
var runsPrograms = map[string]bool{"docs/sharding.md": true}

// Every complete program of the documents is run by a test here.
func TestEveryDocProgramRuns(t *testing.T) {
	root := RepoRoot(t)
	docs, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		if _, programs := DocPrograms(t, root, doc); len(programs) > 0 && !runsPrograms[doc] {
			t.Errorf("%s has complete programs that no test builds and runs", doc)
		}
	}
}

// TestShardDocPrograms builds docs/sharding.md's programs from a module
// outside the repository with its go.mod lines, as a user would, and runs
// them: the first (two members over the fake clientset) must print that
// the members cache the 100 pods together; two processes of the second
// (one member each, through the etcd provider) on kube-apiserver v1.37
// must sync, share the ConfigMaps, and leave on SIGTERM with exit code 0.
func TestShardDocPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command on a scratch module")
	}
	testcluster.RequireBinaries(t)
	bins := BuildDocPrograms(t, "docs/sharding.md")
	if len(bins) != 2 {
		t.Fatalf("docs/sharding.md has %d complete programs, want 2", len(bins))
	}

	out, err := exec.Command(bins[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("the first program: %v\n%s", err, out)
	}
	counts := regexp.MustCompile(`(?m)^m\d: (\d+) ranges, (\d+) pods cached$`).FindAllStringSubmatch(string(out), -1)
	if len(counts) != 2 || !strings.Contains(string(out), "together 100 of the 100 pods") {
		t.Fatalf("the first program's output:\n%s", out)
	}
	for _, c := range counts {
		if n, _ := strconv.Atoi(c[2]); n == 0 || n == 100 {
			t.Errorf("a member caches %d of the 100 pods: the two did not share them\n%s", n, out)
		}
	}
	t.Logf("the first program:\n%s", out)

	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "docs"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const objects = 200
	for i := range objects {
		if _, err := cs.CoreV1().ConfigMaps("docs").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	synced := regexp.MustCompile(`^member (\S+): synced in \S+, (\d+) ConfigMaps in (\d+) ranges$`)
	type member struct {
		cmd   *exec.Cmd
		lines chan string
		done  chan error
		out   strings.Builder
	}
	start := func() *member {
		m := &member{lines: make(chan string, 100), done: make(chan error, 1)}
		m.cmd = exec.Command(bins[1], "-kubeconfig", kubeconfig, "-etcd", c.EtcdURL(), "-namespace", "docs")
		stdout, err := m.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		m.cmd.Stderr = &m.out
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.cmd.Process.Kill() })
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				m.lines <- sc.Text()
			}
			_, _ = io.Copy(io.Discard, stdout)
			m.done <- m.cmd.Wait()
		}()
		return m
	}
	await := func(m *member, what *regexp.Regexp) []string {
		t.Helper()
		select {
		case l := <-m.lines:
			if s := what.FindStringSubmatch(l); s != nil {
				return s
			}
			t.Fatalf("unexpected line %q, want %s\nstderr:\n%s", l, what, m.out.String())
		case err := <-m.done:
			t.Fatalf("the member exited (%v) before printing %s\nstderr:\n%s", err, what, m.out.String())
		case <-time.After(90 * time.Second):
			t.Fatalf("no %s within 90s\nstderr:\n%s", what, m.out.String())
		}
		return nil
	}
	// With no etcd at its address, the member exits at once with an error
	// that names it, rather than wait for ever in the provider.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	_ = dead.Close()
	out, err = exec.Command(bins[1], "-kubeconfig", kubeconfig, "-etcd", deadURL, "-namespace", "docs").CombinedOutput()
	if err == nil || !strings.Contains(string(out), deadURL) || !strings.Contains(string(out), "did not answer within") {
		t.Errorf("the etcd program with no etcd at %s: %v, want exit 1 with an error naming it\n%s", deadURL, err, out)
	}

	m1 := start()
	first := await(m1, synced)
	if first[2] != strconv.Itoa(objects) || first[3] != "16" {
		t.Errorf("the first member, alone, synced %s ConfigMaps in %s ranges, want %d in 16", first[2], first[3], objects)
	}
	m2 := start()
	second := await(m2, synced)
	if n, _ := strconv.Atoi(second[2]); n == 0 || n >= objects {
		t.Errorf("the second member synced %s of the %d ConfigMaps: it did not take a share", second[2], objects)
	}
	t.Logf("the etcd program: %q, then %q", first[0], second[0])
	left := regexp.MustCompile(`^member \S+: left the group$`)
	for _, m := range []*member{m2, m1} {
		sent := time.Now()
		if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		await(m, left)
		select {
		case err := <-m.done:
			if err != nil {
				t.Errorf("exit after SIGTERM: %v\nstderr:\n%s", err, m.out.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the member did not exit within 60s of SIGTERM\nstderr:\n%s", m.out.String())
		}
		t.Logf("a member exited %v after its SIGTERM", time.Since(sent).Round(time.Millisecond))
		if strings.Contains(m.out.String(), "\nE") || strings.HasPrefix(m.out.String(), "E") {
			t.Errorf("the member logged errors:\n%s", m.out.String())
		}
	}
}
