//go:build !race

// The controller runs as processes built without -race: under -race the
// detector would check only this harness and internal/kubeletsim (whose
// own tests run with -race), so hack/test.sh runs these tests in its step
// without -race, beside the nemesis.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
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

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actorinformer/actorinformer/internal/kubeletsim"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// pods is a test cluster with the manifests applied, Bundles in many
// namespaces, the program built, and a kubelet to run it in pods.
type pods struct {
	t        *testing.T
	c        *testcluster.Cluster
	cs       kubernetes.Interface
	cl       client.Client // with the Bundle's scheme
	kube     *kubeletsim.Kubelet
	bin      string
	port     int
	keys     []string // the Bundles, namespace/name
	replicas []*replica
}

type replica struct {
	name    string
	pod     *kubeletsim.Pod // nil: a process outside a pod (startLocal)
	cmd     *exec.Cmd
	done    chan error
	probes  string // /healthz, /readyz
	metrics string // /metrics, /status
	killed  int64  // when the test sent it SIGKILL (Unix ns), 0 if it did not
	mu      sync.Mutex
	log     []string
}

var program struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if program.dir != "" {
		_ = os.RemoveAll(program.dir)
	}
	os.Exit(code)
}

// build builds the program once per test binary.
func build(t *testing.T) string {
	t.Helper()
	program.once.Do(func() {
		if program.dir, program.err = os.MkdirTemp("", "sharded-controller"); program.err != nil {
			return
		}
		program.bin = filepath.Join(program.dir, "sharded-controller")
		if out, err := exec.Command("go", "build", "-o", program.bin, ".").CombinedOutput(); err != nil {
			program.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if program.err != nil {
		t.Fatal(program.err)
	}
	return program.bin
}

// startPods starts a test cluster with the manifests and perNamespace
// Bundles (data {v: "0"}) in each of namespaces namespaces, team-<i>-apps
// (the number before the end: the namespace hash's top bits hardly depend
// on a name's last characters, docs/sharding.md).
func startPods(t *testing.T, namespaces, perNamespace int) *pods {
	return startPodsOn(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"}, namespaces, perNamespace)
}

// startPodsOn is startPods on a test cluster started with opts.
func startPodsOn(t *testing.T, opts testcluster.Options, namespaces, perNamespace int) *pods {
	c := testcluster.Start(t, opts)
	ctx := context.Background()
	if _, err := testcluster.Apply(ctx, c.Config(), manifests(t), "sharded-controller-test", false); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	p := &pods{t: t, c: c, cs: cs, cl: bundleClient(t, c.Config()), bin: build(t), port: freePort(t)}
	for i := range namespaces {
		ns := fmt.Sprintf("team-%d-apps", i)
		if err := p.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		for j := range perNamespace {
			b := &Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("b%d", j)},
				Spec: BundleSpec{Data: map[string]string{"v": "0", "bundle": fmt.Sprintf("%s/b%d", ns, j)}}}
			if err := p.cl.Create(ctx, b); err != nil {
				t.Fatal(err)
			}
			p.keys = append(p.keys, ns+"/"+b.Name)
		}
	}
	p.kube = kubeletsim.New(t, c)
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

// start runs the program in a new pod at ip, its remote on the pods'
// port, its probes on the next and its metrics on the one after.
func (p *pods) start(name, ip string, args ...string) *replica {
	t := p.t
	pod := p.kube.CreatePod(t, kubeletsim.PodSpec{Namespace: namespace, Name: name,
		ServiceAccount: serviceAccount, IP: ip, Labels: map[string]string{"app": "sharded-controller"}, Container: "controller"})
	r := &replica{name: name, pod: pod, done: make(chan error, 1), probes: net.JoinHostPort(ip, strconv.Itoa(p.port+1)),
		metrics: net.JoinHostPort(ip, strconv.Itoa(p.port+2))}
	r.cmd = pod.Command(p.bin, append([]string{"-v=2", "--remote-bind=" + ip, "--remote-port=" + strconv.Itoa(p.port),
		"--probe-address=" + r.probes, "--metrics-address=" + r.metrics}, args...)...)
	// In a pod, the in-cluster configuration: not a $KUBECONFIG of the
	// test's environment, which ctrl.GetConfig would take first.
	r.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KUBECONFIG=") })
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
	r := &replica{name: name, done: make(chan error, 1), probes: net.JoinHostPort(ip, strconv.Itoa(port+1)),
		metrics: net.JoinHostPort(ip, strconv.Itoa(port+2))}
	r.cmd = exec.Command(p.bin, append([]string{"-v=2", "--kubeconfig=" + kubeconfig, "--provider=etcd", "--etcd=" + p.c.EtcdURL(),
		"--namespace=" + namespace, "--member-name=" + name, "--remote-bind=" + ip, "--remote-port=" + strconv.Itoa(port),
		"--probe-address=" + r.probes, "--metrics-address=" + r.metrics}, args...)...)
	p.run(r)
	return r
}

// kill sends the replica SIGKILL and, in a pod, reports its container
// terminated (137), as the kubelet does.
func (p *pods) kill(r *replica) {
	t := p.t
	t.Helper()
	r.mu.Lock()
	r.killed = time.Now().UnixNano()
	r.mu.Unlock()
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still running 10s after SIGKILL", r.name)
	}
	if r.pod != nil {
		r.pod.ContainerExited(t, 137)
	}
}

var reconciledLine = regexp.MustCompile(`"reconciled" key="([^"]+)"`)

// reconciled are the Bundles the replica reconciled (a write or nothing
// to write: its ConfigMap as the Bundle says) in its log lines from the
// from-th on.
func (r *replica) reconciled(from int) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, l := range r.log[min(from, len(r.log)):] {
		if m := reconciledLine.FindStringSubmatch(l); m != nil {
			seen[m[1]] = true
		}
	}
	return seen
}

// reconciledBy is "" once the replicas together reconciled every Bundle.
func (p *pods) reconciledBy(rs ...*replica) string {
	return p.reconciledSince(nil, rs...)
}

// reconciledSince is "" once the replicas together reconciled every
// Bundle in their log lines after marks (nil: all).
func (p *pods) reconciledSince(marks map[*replica]int, rs ...*replica) string {
	seen := map[string]bool{}
	for _, r := range rs {
		maps.Copy(seen, r.reconciled(marks[r]))
	}
	missing := 0
	for _, k := range p.keys {
		if !seen[k] {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Sprintf("%d of %d Bundles not reconciled", missing, len(p.keys))
	}
	return ""
}

// marks are the replicas' log lengths now.
func marks(rs ...*replica) map[*replica]int {
	m := map[*replica]int{}
	for _, r := range rs {
		m[r] = r.lines()
	}
	return m
}

// converged is "" once every Bundle has its ConfigMap, controlled by it,
// with its current data (read from the API server).
func (p *pods) converged() string {
	ctx := context.Background()
	var bundles BundleList
	if err := p.cl.List(ctx, &bundles); err != nil {
		return err.Error()
	}
	var cms corev1.ConfigMapList
	if err := p.cl.List(ctx, &cms); err != nil {
		return err.Error()
	}
	byKey := map[string]*corev1.ConfigMap{}
	for i := range cms.Items {
		byKey[cms.Items[i].Namespace+"/"+cms.Items[i].Name] = &cms.Items[i]
	}
	if len(bundles.Items) != len(p.keys) {
		return fmt.Sprintf("%d Bundles, want %d", len(bundles.Items), len(p.keys))
	}
	var wrong []string
	for _, b := range bundles.Items {
		key := b.Namespace + "/" + b.Name
		cm := byKey[key]
		if cm == nil {
			wrong = append(wrong, key+": no ConfigMap")
			continue
		}
		switch ref := metav1.GetControllerOf(cm); {
		case ref == nil || ref.UID != b.UID || ref.Kind != "Bundle":
			wrong = append(wrong, fmt.Sprintf("%s: its ConfigMap's controller %v", key, ref))
		case !maps.Equal(cm.Data, b.Spec.Data):
			wrong = append(wrong, fmt.Sprintf("%s: ConfigMap data %v, Bundle's %v", key, cm.Data, b.Spec.Data))
		}
	}
	if len(wrong) > 0 {
		return fmt.Sprintf("%d of %d Bundles without their ConfigMap as they say, e.g. %s", len(wrong), len(p.keys), wrong[0])
	}
	return ""
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
			// client-go logs, as an error, a response it stopped reading
			// because the manager cancelled the reconcile's context as
			// the replica stopped: not the controller's error.
			if strings.HasPrefix(l, "E") && strings.Contains(l, `err="context canceled"`) {
				continue
			}
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

// freePort is a TCP port free a moment ago, with the next two.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		if err != nil {
			l.Close()
			continue
		}
		l3, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+2)))
		l.Close()
		l2.Close()
		if err == nil {
			l3.Close()
			return port
		}
	}
	t.Fatal("no three free ports in a row")
	return 0
}
