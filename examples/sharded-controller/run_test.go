package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/kubeletsim"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// The controller as deployed, with its manifests' RBAC, in two pods of the
// test's kube-apiserver, played by internal/kubeletsim (no kubelet runs):
// the pods become ready from /readyz as a kubelet's probe would make them,
// the replicas form a group through protoactor's k8s provider, every
// ConfigMap is reconciled, /healthz answers, and SIGTERM makes each leave
// (exit 0, the provider's labels off its pod).
func TestControllerInPods(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	ctx := context.Background()
	if _, err := testcluster.Apply(ctx, c.Config(), manifests(t), "sharded-controller-test", false); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	const objects = 60
	for i := range objects {
		if _, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%d", i)}, Data: map[string]string{"i": strconv.Itoa(i)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "sharded-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kube := kubeletsim.New(t, c)
	port := freePort(t)

	type replica struct {
		pod    *kubeletsim.Pod
		cmd    *exec.Cmd
		done   chan error
		mu     sync.Mutex
		log    []string
		probes string
	}
	var replicas []*replica
	for i := range 2 {
		ip := fmt.Sprintf("127.0.0.%d", 40+i)
		pod := kube.CreatePod(t, kubeletsim.PodSpec{Namespace: namespace, Name: fmt.Sprintf("sharded-controller-%d", i),
			ServiceAccount: serviceAccount, IP: ip, Labels: map[string]string{"app": "sharded-controller"}, Container: "controller"})
		r := &replica{pod: pod, done: make(chan error, 1), probes: net.JoinHostPort(ip, strconv.Itoa(port+1))}
		r.cmd = pod.Command(bin, "-v=2", "--ranges=8", "--remote-bind="+ip, "--remote-port="+strconv.Itoa(port), "--probe-address="+r.probes)
		stderr, err := r.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				r.mu.Lock()
				r.log = append(r.log, sc.Text())
				r.mu.Unlock()
			}
			_, _ = io.Copy(io.Discard, stderr)
			r.done <- r.cmd.Wait()
		}()
		t.Cleanup(func() { _ = r.cmd.Process.Kill() })
		replicas = append(replicas, r)
	}
	logs := func() string {
		var b strings.Builder
		for _, r := range replicas {
			r.mu.Lock()
			fmt.Fprintf(&b, "--- %s:\n%s\n", r.pod.Name, strings.Join(r.log[max(0, len(r.log)-30):], "\n"))
			r.mu.Unlock()
		}
		return b.String()
	}
	eventually := func(timeout time.Duration, what string, cond func() string) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		last := ""
		for time.Now().Before(deadline) {
			if last = cond(); last == "" {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: not within %v: %s\n%s", what, timeout, last, logs())
	}

	// The kubelet's readiness probe: each pod is ready once /readyz says so.
	for _, r := range replicas {
		eventually(60*time.Second, r.pod.Name+" ready", func() string {
			if code := get(r.probes, "/readyz"); code != http.StatusOK {
				return fmt.Sprintf("/readyz %d", code)
			}
			return ""
		})
		r.pod.SetReady(t, true)
	}
	reconciled := regexp.MustCompile(`"reconciled" key="` + namespace + `/(cm\d+)"`)
	eventually(90*time.Second, "every ConfigMap reconciled, by the replicas together", func() string {
		seen := map[string]bool{}
		for _, r := range replicas {
			r.mu.Lock()
			for _, l := range r.log {
				if m := reconciled.FindStringSubmatch(l); m != nil {
					seen[m[1]] = true
				}
			}
			r.mu.Unlock()
		}
		if len(seen) != objects {
			return fmt.Sprintf("%d of %d reconciled", len(seen), objects)
		}
		return ""
	})
	members, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelCluster + "=sharded-controller"})
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Items) != 2 {
		t.Errorf("%d pods labelled by the provider, want 2", len(members.Items))
	}
	for _, r := range replicas {
		if code := get(r.probes, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d", r.pod.Name, code)
		}
	}

	for _, r := range replicas {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM\n%s", r.pod.Name, err, logs())
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("%s did not exit within 90s of SIGTERM\n%s", r.pod.Name, logs())
		}
		r.pod.ContainerExited(t, 0)
		pod, err := cs.CoreV1().Pods(namespace).Get(ctx, r.pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if id := pod.Labels[k8s.LabelMemberID]; id != "" {
			t.Errorf("%s left, its pod still has the provider's member id %s", r.pod.Name, id)
		}
	}
	for _, r := range replicas {
		for _, l := range r.log {
			if strings.HasPrefix(l, "E") || strings.Contains(l, "panic") {
				t.Errorf("%s logged: %s", r.pod.Name, l)
			}
		}
	}
	if testing.Verbose() {
		t.Log(logs())
	}
	if dir := os.Getenv("ACTORINFORMER_ARTIFACTS"); dir != "" && t.Failed() {
		_ = os.WriteFile(filepath.Join(dir, "sharded-controller.log"), []byte(logs()), 0o644)
	}
}

// get returns the status code of GET http://addr+path, 0 if it failed.
func get(addr, path string) int {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// freePort is a TCP port free a moment ago, with the next one.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		l.Close()
		if err == nil {
			l2.Close()
			return port
		}
	}
	t.Fatal("no two free ports in a row")
	return 0
}
