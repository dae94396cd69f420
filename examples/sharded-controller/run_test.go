//go:build !race

// The controller runs as processes built without -race (startPods): under
// -race the detector would check only this test's harness and
// internal/kubeletsim (whose own tests run with -race), so hack/test.sh
// runs these tests in its step without -race, beside the nemesis.

package main

import (
	"bufio"
	"context"
	"encoding/json"
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
// ConfigMap is reconciled, /healthz answers. A pod that stops being ready
// for a moment (a probe that timed out) drops out of the provider's
// topology, for good on its cluster member: the replica rejoins on a new
// one and serves again, live throughout. SIGTERM makes each leave (exit 0,
// the provider's labels off its pod), its probes passing until it exits.
func TestControllerInPods(t *testing.T) {
	p := startPods(t, 60)
	var replicas []*replica
	for i := range 2 {
		replicas = append(replicas, p.start(fmt.Sprintf("sharded-controller-%d", i), fmt.Sprintf("127.0.0.%d", 40+i), "--ranges=8"))
	}
	for _, r := range replicas {
		p.ready(r)
	}
	p.eventually(90*time.Second, "every ConfigMap reconciled, by the replicas together", func() string {
		return p.reconciledBy(replicas...)
	})
	members, err := p.cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelCluster + "=sharded-controller"})
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Items) != 2 {
		t.Errorf("%d pods labelled by the provider, want 2", len(members.Items))
	}
	for _, r := range replicas {
		if code := get(r.probes, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d", r.name, code)
		}
	}
	// Each replica acquires ranges, logged with a member id that carries
	// the pod's name (the host's, by default). The first to start may
	// claim every range before the other joins (a member asks for none
	// before its lease watch shows its lease, not a lease duration later):
	// the other takes its share from it then.
	for _, r := range replicas {
		acquired := regexp.MustCompile(`"acquired range" group="configmaps" member="[^"#]+#` + regexp.QuoteMeta(r.name) + `-`)
		p.eventually(60*time.Second, r.name+" acquires ranges", func() string {
			if r.matched(acquired) {
				return ""
			}
			return "no acquired range logged with a member id naming the pod"
		})
	}

	// Replica 0's pod is not ready for a moment.
	flapper, other := replicas[0], replicas[1]
	mark := flapper.lines()
	flapper.pod.SetReady(t, false)
	p.eventually(30*time.Second, "replica 0 fenced, the other delivering every range", func() string {
		if !flapper.logged(mark, "fenced: no handler is called") {
			return "replica 0 not fenced"
		}
		if code := get(other.probes, "/healthz"); code != http.StatusOK {
			return fmt.Sprintf("replica 1: /healthz %d", code)
		}
		return ""
	})
	if code := get(flapper.probes, "/healthz"); code != http.StatusOK {
		t.Errorf("replica 0 out of the group, rejoining: /healthz %d, want 200", code)
	}
	flapper.pod.SetReady(t, true)
	p.eventually(60*time.Second, "replica 0 serving again", func() string {
		if !flapper.logged(mark, "acquired range") {
			return "replica 0 acquired no range since"
		}
		return ""
	})
	if code := get(flapper.probes, "/healthz"); code != http.StatusOK {
		t.Errorf("replica 0 after its rejoin: /healthz %d", code)
	}

	for _, r := range replicas {
		p.leave(r)
	}
	p.noErrors(replicas...)
}

// A rollout that changes the range count (--ranges 8 to 16): the new
// replica, whose settings differ from the group's, is ready (so that the
// rollout goes on) and live, waits without reconciling anything, and once
// the old replica has left takes every ConfigMap over.
func TestRangeCountRolloutInPods(t *testing.T) {
	p := startPods(t, 40)
	old := p.start("sharded-controller-old", "127.0.0.50", "--ranges=8")
	p.ready(old)
	p.eventually(60*time.Second, "every ConfigMap reconciled by the old replica", func() string { return p.reconciledBy(old) })
	next := p.start("sharded-controller-new", "127.0.0.51", "--ranges=16")
	p.ready(next)
	p.eventually(30*time.Second, "the new replica waiting", func() string {
		if !next.logged(0, "settings differ from the group's") {
			return "no line saying it waits"
		}
		return ""
	})
	time.Sleep(2 * time.Second)
	if n := len(next.reconciled()); n != 0 {
		t.Errorf("the new replica reconciled %d ConfigMaps while it waited", n)
	}
	if code := get(next.probes, "/healthz"); code != http.StatusOK {
		t.Errorf("the waiting replica: /healthz %d", code)
	}
	p.leave(old)
	exited := time.Now()
	p.eventually(60*time.Second, "every ConfigMap reconciled by the new replica", func() string { return p.reconciledBy(next) })
	t.Logf("the new replica reconciled every ConfigMap within %v of the old one's exit (polled every 200ms)", time.Since(exited).Round(time.Millisecond))
	p.leave(next)
	p.noErrors(old, next)
}

// The same program outside any pod, as an operator runs it: two processes
// with a kubeconfig and protoactor's etcd provider reconcile every
// ConfigMap between them; each serves /readyz (CheckSynced), /metrics
// with the member's gauges and its queue's oldest key's age, and /status; SIGTERM makes each leave, exit 0.
func TestControllerLocally(t *testing.T) {
	p := startPods(t, 40)
	a, b := p.startLocal("local-a", "127.0.0.1", "--ranges=8"), p.startLocal("local-b", "127.0.0.1", "--ranges=8")
	p.eventually(90*time.Second, "every ConfigMap reconciled, by the two processes together", func() string {
		return p.reconciledBy(a, b)
	})
	for _, r := range []*replica{a, b} {
		p.eventually(30*time.Second, r.name+" ready", func() string {
			if code := get(r.probes, "/readyz"); code != http.StatusOK {
				return fmt.Sprintf("/readyz %d", code)
			}
			return ""
		})
		metrics := body(t, r.probes, "/metrics")
		if !regexp.MustCompile(`(?m)^actorinformer_shard_ranges\{.*actorinformer_shard_member_name="` + r.name + `".*\} [1-8]$`).MatchString(metrics) {
			t.Errorf("%s: /metrics has no actorinformer_shard_ranges of member %s:\n%s", r.name, r.name, metrics)
		}
		// What deploy/hpa.yaml scales on: the queue's oldest key's age.
		if !regexp.MustCompile(`(?m)^actorinformer_workqueue_oldest_age_seconds\{.*actorinformer_workqueue_name="configmaps".*\} [0-9.e+-]+$`).MatchString(metrics) {
			t.Errorf("%s: /metrics has no actorinformer_workqueue_oldest_age_seconds of the configmaps queue:\n%s", r.name, metrics)
		}
		var st struct {
			Member      string
			Delivered   []struct{ Index int }
			Undelivered []struct{ Index int }
		}
		if err := json.Unmarshal([]byte(body(t, r.probes, "/status")), &st); err != nil {
			t.Fatalf("%s: /status: %v", r.name, err)
		}
		if !strings.Contains(st.Member, "#"+r.name+"-") || len(st.Delivered) == 0 || len(st.Delivered) == 8 || st.Undelivered == nil || len(st.Undelivered) != 0 {
			t.Errorf("%s: /status member %q, delivers %d of 8 ranges, undelivered %v; want its name, a share, none undelivered", r.name, st.Member, len(st.Delivered), st.Undelivered)
		}
	}
	for _, r := range []*replica{b, a} {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM\n%s", r.name, err, p.logs())
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("%s did not exit within 90s of SIGTERM\n%s", r.name, p.logs())
		}
	}
	p.noErrors(a, b)
}

// body returns the body of GET http://addr+path.
func body(t *testing.T, addr, path string) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pods is a test cluster with the manifests applied, ConfigMaps, the
// program built, and a kubelet to run it in pods.
type pods struct {
	t        *testing.T
	c        *testcluster.Cluster
	cs       kubernetes.Interface
	kube     *kubeletsim.Kubelet
	bin      string
	port     int
	objects  int
	replicas []*replica
}

type replica struct {
	name   string
	pod    *kubeletsim.Pod // nil: a process outside a pod (startLocal)
	cmd    *exec.Cmd
	done   chan error
	probes string
	mu     sync.Mutex
	log    []string
}

func startPods(t *testing.T, objects int) *pods {
	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	ctx := context.Background()
	if _, err := testcluster.Apply(ctx, c.Config(), manifests(t), "sharded-controller-test", false); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
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
	p := &pods{t: t, c: c, cs: cs, kube: kubeletsim.New(t, c), bin: bin, port: freePort(t), objects: objects}
	t.Cleanup(func() {
		if testing.Verbose() {
			t.Log(p.logs())
		}
		if dir := os.Getenv("ACTORINFORMER_ARTIFACTS"); dir != "" && t.Failed() {
			_ = os.WriteFile(filepath.Join(dir, t.Name()+".log"), []byte(p.logs()), 0o644)
		}
	})
	return p
}

// start runs the program in a new pod at ip, its remote on the pods' port
// and its probes on the next.
func (p *pods) start(name, ip string, args ...string) *replica {
	t := p.t
	pod := p.kube.CreatePod(t, kubeletsim.PodSpec{Namespace: namespace, Name: name,
		ServiceAccount: serviceAccount, IP: ip, Labels: map[string]string{"app": "sharded-controller"}, Container: "controller"})
	r := &replica{name: name, pod: pod, done: make(chan error, 1), probes: net.JoinHostPort(ip, strconv.Itoa(p.port+1))}
	r.cmd = pod.Command(p.bin, append([]string{"-v=2", "--remote-bind=" + ip, "--remote-port=" + strconv.Itoa(p.port), "--probe-address=" + r.probes}, args...)...)
	p.run(r)
	return r
}

// startLocal runs the program as a process outside any pod, as an
// operator would on a workstation: the test cluster's kubeconfig, and its
// etcd for protoactor's etcd provider.
func (p *pods) startLocal(name, ip string, args ...string) *replica {
	t := p.t
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := p.c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	r := &replica{name: name, done: make(chan error, 1), probes: net.JoinHostPort(ip, strconv.Itoa(port+1))}
	r.cmd = exec.Command(p.bin, append([]string{"-v=2", "--kubeconfig=" + kubeconfig, "--provider=etcd", "--etcd=" + p.c.EtcdURL(),
		"--namespace=" + namespace, "--member-name=" + name, "--remote-bind=" + ip, "--remote-port=" + strconv.Itoa(port), "--probe-address=" + r.probes}, args...)...)
	p.run(r)
	return r
}

// run starts the replica's process and keeps its log.
func (p *pods) run(r *replica) {
	t := p.t
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
	p.replicas = append(p.replicas, r)
}

// ready plays the kubelet's readiness probe: the pod is ready once its
// /readyz says so.
func (p *pods) ready(r *replica) {
	p.t.Helper()
	p.eventually(60*time.Second, r.name+" ready", func() string {
		if code := get(r.probes, "/readyz"); code != http.StatusOK {
			return fmt.Sprintf("/readyz %d", code)
		}
		return ""
	})
	r.pod.SetReady(p.t, true)
}

// leave sends the replica SIGTERM and checks that it leaves: its probes
// pass until it exits (the kubelet goes on probing a terminating pod; a
// failed readiness would drop it from the group before it handed its
// ranges over), it exits 0, and the provider's labels are off its pod.
func (p *pods) leave(r *replica) {
	t := p.t
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(90 * time.Second)
	for exited := false; !exited; {
		select {
		case err := <-r.done:
			exited = true
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM\n%s", r.name, err, p.logs())
			}
		case <-deadline:
			t.Fatalf("%s did not exit within 90s of SIGTERM\n%s", r.name, p.logs())
		case <-time.After(20 * time.Millisecond):
			for _, path := range []string{"/readyz", "/healthz"} {
				// 0: the probe server has closed, the process exits.
				if code := get(r.probes, path); code != http.StatusOK && code != 0 {
					t.Errorf("%s: %s %d while it left", r.name, path, code)
				}
			}
		}
	}
	if r.pod == nil {
		return
	}
	r.pod.ContainerExited(t, 0)
	pod, err := p.cs.CoreV1().Pods(namespace).Get(context.Background(), r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := pod.Labels[k8s.LabelMemberID]; id != "" {
		t.Errorf("%s left, its pod still has the provider's member id %s", r.name, id)
	}
}

var reconciledLine = regexp.MustCompile(`"reconciled" key="` + namespace + `/(cm\d+)"`)

// reconciled are the ConfigMaps the replica reconciled.
func (r *replica) reconciled() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, l := range r.log {
		if m := reconciledLine.FindStringSubmatch(l); m != nil {
			seen[m[1]] = true
		}
	}
	return seen
}

// reconciledBy is "" once the replicas together reconciled every
// ConfigMap.
func (p *pods) reconciledBy(rs ...*replica) string {
	seen := map[string]bool{}
	for _, r := range rs {
		for k := range r.reconciled() {
			seen[k] = true
		}
	}
	if len(seen) != p.objects {
		return fmt.Sprintf("%d of %d reconciled", len(seen), p.objects)
	}
	return ""
}

func (r *replica) lines() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// logged reports whether a line from the from-th on contains s.
func (r *replica) logged(from int, s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.log[min(from, len(r.log)):] {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func (r *replica) matched(re *regexp.Regexp) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.log {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

func (p *pods) noErrors(rs ...*replica) {
	for _, r := range rs {
		r.mu.Lock()
		for _, l := range r.log {
			if strings.HasPrefix(l, "E") || strings.Contains(l, "panic") {
				p.t.Errorf("%s logged: %s", r.name, l)
			}
		}
		r.mu.Unlock()
	}
}

func (p *pods) logs() string {
	var b strings.Builder
	for _, r := range p.replicas {
		r.mu.Lock()
		fmt.Fprintf(&b, "--- %s:\n%s\n", r.name, strings.Join(r.log[max(0, len(r.log)-40):], "\n"))
		r.mu.Unlock()
	}
	return b.String()
}

func (p *pods) eventually(timeout time.Duration, what string, cond func() string) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.t.Fatalf("%s: not within %v: %s\n%s", what, timeout, last, p.logs())
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
