//go:build !race

// Member processes, built without -race (buildMember): under -race the
// detector would check only this test's harness, not our code, so
// hack/test.sh runs these tests in its step without -race, beside the
// nemesis.

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/internal/kubeletsim"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// Member processes joined through protoactor's Kubernetes provider
// (cluster/clusterproviders/k8s, k8s.New(): the in-cluster configuration)
// on kube-apiserver v1.37 with the gate. No kubelet runs: internal/kubeletsim
// creates each member's pod, bound to a node, reports it Running with a
// loopback IP and its container ready, and runs the member as the pod's
// container, with what the provider reads from a pod: its name from the
// hostname (os.Hostname), its namespace from the mounted service account
// (/var/run/secrets/kubernetes.io/serviceaccount/namespace, the provider's
// only source), and the API server from KUBERNETES_SERVICE_HOST/PORT with
// the service account's token (a real one, bound to the pod) and ca.crt.
// The members run with the rights of examples/sharded-controller's
// service account (its deploy/rbac.yaml, applied here): the provider's
// calls and the informers' must all be allowed.
//
// The provider puts its labels on each member's pod and watches the
// labelled pods: the members must form a group and keep the promises of
// TestShardedMembersRealCluster through churn, a SIGKILL (the kubelet
// then reports the container terminated, as a real one does within about a
// second) and a join.
func TestShardK8sProvider(t *testing.T) {
	c := startCluster(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	cs := clientFor(t, c.Config())
	ctx := context.Background()
	var manifests []byte
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "sharded-controller", "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(append(manifests, b...), "\n---\n"...)
	}
	if _, err := testcluster.Apply(ctx, c.Config(), manifests, "e2e", false); err != nil {
		t.Fatal(err)
	}
	const ns, sa = "sharded-controller", "sharded-controller"
	kube := kubeletsim.New(t, c)
	port := freePort(t)
	r := &shardRun{t: t, c: c, cs: cs, bin: buildMember(t), ns: ns, ranges: 16}
	pods := map[string]*kubeletsim.Pod{}
	r.start = func(name string) *shardproc.Proc {
		ip := fmt.Sprintf("127.0.0.%d", 10+r.n)
		pod := kube.CreatePod(t, kubeletsim.PodSpec{Namespace: ns, Name: "member-" + name, ServiceAccount: sa, IP: ip,
			Labels: map[string]string{"app": "shard-e2e"}, Container: "member"})
		pods[name] = pod
		p := shardproc.StartCmd(t, name, func(calls string) *exec.Cmd {
			// No -host: the informer uses the in-cluster configuration too.
			return pod.Command(r.bin, "-mode", "sharded", "-provider", "k8s", "-namespace", ns, "-lease-namespace", ns,
				"-remote-host", ip, "-remote-port", strconv.Itoa(port), "-ranges", strconv.Itoa(r.ranges), "-calls", calls)
		})
		// Ready once its process serves, as a container without a
		// readiness probe: the provider counts only ready pods.
		pod.SetReady(t, true)
		return p
	}
	for i := range 300 {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("o%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.join()
	r.join()
	r.join()
	took := r.waitFor(120*time.Second, "three members settled", r.settled)
	t.Logf("three members settled %v after the third started", took.Round(time.Millisecond))
	labelled := func() string {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelCluster + "=actorinformer"})
		if err != nil {
			return err.Error()
		}
		var names []string
		for _, p := range list.Items {
			if p.Labels[k8s.LabelMemberID] == "" || p.Labels[k8s.LabelPort] != strconv.Itoa(port) {
				return fmt.Sprintf("pod %s has the provider's labels %v", p.Name, p.Labels)
			}
			names = append(names, p.Name)
		}
		if len(names) != len(r.members) {
			return fmt.Sprintf("pods labelled by the provider: %v, want the %d members'", names, len(r.members))
		}
		return ""
	}
	if s := labelled(); s != "" {
		t.Fatal(s)
	}
	for _, m := range r.members {
		st, _ := m.State(false)
		if st.FilterMode != "server" {
			t.Errorf("%s: filter mode %q, want server", m.Name, st.FilterMode)
		}
	}

	ops, waitOps, stop, wg := r.churn()
	waitOps(500)
	victim := r.members[1]
	victim.Kill()
	pods[victim.Name].ContainerExited(t, 137)
	killedAt := time.Now()
	r.drop(victim)
	waitOps(1000)
	joined := r.join()
	waitOps(2000)
	close(stop)
	wg.Wait()
	t.Logf("%d writes during churn; %s killed at %v, %s started at %v", ops.Load(), victim.Name,
		killedAt.Sub(r.all[0].Start).Round(time.Millisecond), joined.Name, joined.Start.Sub(r.all[0].Start).Round(time.Millisecond))
	took = r.waitFor(120*time.Second, "members settled after churn", r.settled)
	t.Logf("settled %v after the churn stopped", took.Round(time.Millisecond))
	total, errs := r.overlaps()
	if len(errs) > 0 {
		t.Errorf("%d overlapping handler calls of %d, first: %s", len(errs), total, strings.Join(errs[:min(5, len(errs))], "\n"))
	}
	t.Logf("%d handler calls checked for overlaps", total)
	// The killed member's pod keeps its labels (its process died without
	// taking them off) but is not ready: the provider leaves it out.
	pods[victim.Name].Delete(t)
	if s := labelled(); s != "" {
		t.Error(s)
	}

	// Graceful leaves: the provider takes its labels off the pod.
	for _, m := range r.members {
		if !m.Stop(60 * time.Second) {
			t.Errorf("%s did not leave within 60s:\n%s", m.Name, shardproc.Tail(m.Log, 30))
		}
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, pods[m.Name].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if id := pod.Labels[k8s.LabelMemberID]; id != "" {
			t.Errorf("%s left, its pod still has the provider's member id %s", m.Name, id)
		}
	}
	r.checkLogs()
	saveLogs(t, "shard-k8s", r.all)
	if t.Failed() {
		for _, m := range r.all {
			t.Logf("--- %s:\n%s", m.Name, shardproc.Tail(m.Log, 40))
		}
	}
}

// freePort is a TCP port free on every loopback address a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
