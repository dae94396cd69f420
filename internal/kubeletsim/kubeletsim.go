// Package kubeletsim plays the kubelet for tests that run, on one machine,
// processes that must believe they run in a pod of the test's
// kube-apiserver (internal/testcluster), where no kubelet runs: for
// protoactor's k8s provider, which finds its own pod by its hostname and
// namespace and its API server by the in-cluster configuration.
//
// For a pod it creates the Pod object (bound to a node, as after
// scheduling), asks the API server for a token of the pod's service
// account bound to the pod (TokenRequest, as the kubelet does for the
// projected token), reports the pod Running with its IP (a loopback
// address, 127.0.0.0/8 being loopback on Linux) and its container's
// readiness, and runs the container's command through internal/podsandbox:
// in UTS and mount namespaces of its own, with the pod's name as hostname,
// the token, ca.crt and namespace at
// /var/run/secrets/kubernetes.io/serviceaccount, and
// KUBERNETES_SERVICE_HOST/PORT, POD_NAME, POD_NAMESPACE and POD_IP set.
//
// The namespaces need root, or unprivileged user namespaces (then the
// command runs as root of a user namespace of its own). Linux only.
package kubeletsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// Node is the node the pods are bound to (no Node object exists).
const Node = "kubeletsim-node"

var built struct {
	mu   sync.Mutex
	path string
}

// BuildSandbox builds internal/podsandbox once per process and returns the
// binary's path.
func BuildSandbox() (string, error) {
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.path != "" {
		return built.path, nil
	}
	dir, err := os.MkdirTemp("", "podsandbox")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "podsandbox")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/actorinformer/actorinformer/internal/podsandbox").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build podsandbox: %v\n%s", err, out)
	}
	built.path = path
	return path, nil
}

// Sandbox returns the command that runs bin with args as a container of
// pod hostname would: see the package's doc. saDir holds the service
// account's token, ca.crt and namespace; env are KEY=VALUE pairs.
func Sandbox(sandbox, hostname, saDir string, env []string, bin string, args ...string) *exec.Cmd {
	sargs := []string{"-hostname", hostname, "-serviceaccount", saDir}
	for _, kv := range env {
		sargs = append(sargs, "-env", kv)
	}
	sargs = append(append(sargs, "--", bin), args...)
	cmd := exec.Command(sandbox, sargs...)
	cmd.SysProcAttr = sysProcAttr()
	return cmd
}

// sysProcAttr puts the sandbox in UTS and mount namespaces of its own: as
// root, by unsharing them (Go also makes / private in the new mount
// namespace); otherwise in a user namespace of its own too, where it is
// root. The process dies with the test.
func sysProcAttr() *syscall.SysProcAttr {
	if os.Geteuid() == 0 {
		return &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	}
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// Kubelet runs pods against one test cluster.
type Kubelet struct {
	c       *testcluster.Cluster
	cs      kubernetes.Interface
	sandbox string
}

// New returns a kubelet for c; it builds internal/podsandbox.
func New(t testing.TB, c *testcluster.Cluster) *Kubelet {
	t.Helper()
	sandbox, err := BuildSandbox()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	return &Kubelet{c: c, cs: cs, sandbox: sandbox}
}

// PodSpec is what a pod is created with.
type PodSpec struct {
	Namespace, Name string
	ServiceAccount  string
	// IP is the pod's IP: a loopback address such as 127.0.0.11.
	IP     string
	Labels map[string]string
	// Container names the pod's one container ("main" if empty).
	Container string
}

// Pod is a pod the kubelet created.
type Pod struct {
	k         *Kubelet
	Namespace string
	Name      string
	IP        string
	UID       types.UID
	Container string
	dir       string // the service account's files
}

// CreatePod creates the pod's object bound to Node, a token of its service
// account bound to it, and reports it Running with its IP, its container
// started and not ready yet.
func (k *Kubelet) CreatePod(t testing.TB, spec PodSpec) *Pod {
	t.Helper()
	ctx := context.Background()
	if spec.Container == "" {
		spec.Container = "main"
	}
	pod, err := k.cs.CoreV1().Pods(spec.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: spec.Labels},
		Spec: corev1.PodSpec{
			NodeName:           Node,
			ServiceAccountName: spec.ServiceAccount,
			Containers:         []corev1.Container{{Name: spec.Container, Image: "kubeletsim"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubeletsim: create pod %s/%s: %v", spec.Namespace, spec.Name, err)
	}
	expiry := int64(3600)
	tr, err := k.cs.CoreV1().ServiceAccounts(spec.Namespace).CreateToken(ctx, spec.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubeletsim: token of service account %s/%s: %v", spec.Namespace, spec.ServiceAccount, err)
	}
	dir := t.TempDir()
	for f, b := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": k.c.CAData(), "namespace": []byte(spec.Namespace)} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := &Pod{k: k, Namespace: spec.Namespace, Name: spec.Name, IP: spec.IP, UID: pod.UID, Container: spec.Container, dir: dir}
	p.setStatus(t, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}, false)
	return p
}

// Command returns the command of the pod's container: bin with args, run
// as the package's doc says.
func (p *Pod) Command(bin string, args ...string) *exec.Cmd {
	u, _ := url.Parse(p.k.c.Host())
	host, port, _ := net.SplitHostPort(u.Host)
	env := []string{
		"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
		"POD_NAME=" + p.Name, "POD_NAMESPACE=" + p.Namespace, "POD_IP=" + p.IP,
	}
	return Sandbox(p.k.sandbox, p.Name, p.dir, env, bin, args...)
}

// SetReady reports the container ready or not, as the kubelet does from
// its readiness probe.
func (p *Pod) SetReady(t testing.TB, ready bool) {
	t.Helper()
	p.setStatus(t, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}, ready)
}

// ContainerExited reports the container terminated with code, not ready,
// as the kubelet does once the process has died (its pod lifecycle event
// generator notices within about a second on a real node).
func (p *Pod) ContainerExited(t testing.TB, code int32) {
	t.Helper()
	p.setStatus(t, corev1.PodRunning, &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.Now()}}, false)
}

// Delete deletes the pod's object at once, as the kubelet does once its
// containers have stopped.
func (p *Pod) Delete(t testing.TB) {
	t.Helper()
	zero := int64(0)
	if err := p.k.cs.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("kubeletsim: delete pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

// setStatus writes the pod's status: phase, its IP, its container's state
// and readiness, and the matching conditions.
func (p *Pod) setStatus(t testing.TB, phase corev1.PodPhase, state *corev1.ContainerState, ready bool) {
	t.Helper()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.NewTime(time.Now())
	status := corev1.PodStatus{
		Phase:  phase,
		HostIP: "127.0.0.1", PodIP: p.IP, PodIPs: []corev1.PodIP{{IP: p.IP}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: p.Container, Ready: ready, State: *state, Image: "kubeletsim", ImageID: "kubeletsim",
			Started: ptrTo(state.Running != nil),
		}},
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	// A merge patch of the status subresource: the provider patches the
	// pod's labels meanwhile, which an update would conflict with.
	if _, err := p.k.cs.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("kubeletsim: status of pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

func ptrTo[T any](v T) *T { return &v }
