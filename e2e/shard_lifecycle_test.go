//go:build !race

// Member processes, built without -race (buildMember): under -race the
// detector would check only this test's harness, not our code, so
// hack/test.sh runs these tests in its step without -race, beside the
// nemesis.

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// TestShardLifecycle measures a member's way out, on the etcd provider
// (TTL 2 s), with each way of shutting the cluster member down once Run
// returned: cluster.Shutdown(true); the provider's Shutdown then
// cluster.Shutdown(false); or cluster.Shutdown(false) alone, which leaves
// the member registered with the provider until its TTL. It logs, for a graceful leave, how long Run
// took to return after SIGTERM, the cluster's shutdown, the process's
// exit, and how long a member started right after took to be served,
// with and without a peer SIGKILLed before; and it checks that the
// members settle after each step.
func TestShardLifecycle(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	bin := buildMember(t)
	n := 0
	// Each way with a peer killed before (the slow case: the others'
	// endpoint writers retry it); the default way without too.
	for _, tc := range []struct {
		how  string
		kill bool
	}{{"graceful", false}, {"graceful", true}, {"provider-first", true}, {"fast", true}} {
		n++
		ns := fmt.Sprintf("lifecycle-%d", n)
		t.Run(fmt.Sprintf("%s/kill=%v", tc.how, tc.kill), func(t *testing.T) { testShardLifecycle(t, c, bin, ns, tc.how, tc.kill) })
	}
}

var (
	informerStopped = regexp.MustCompile(`"informer stopped" sinceSignal="([^"]+)"`)
	clusterShutDown = regexp.MustCompile(`"cluster member shut down" how="[^"]+" took="([^"]+)"`)
)

func testShardLifecycle(t *testing.T, c *testcluster.Cluster, bin, ns, how string, killFirst bool) {
	r := &shardRun{t: t, c: c, cs: clientFor(t, c.Config()), bin: bin, ns: ns,
		prefix: fmt.Sprintf("/actorinformer-shard-lifecycle/%d", time.Now().UnixNano()), ranges: 16,
		extra: []string{"-cluster-shutdown", how}}
	ctx := context.Background()
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("o%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.join()
	r.join()
	r.join()
	r.waitFor(90*time.Second, "three members settled", r.settled)
	// A peer killed before: its endpoint writer on the others retries the
	// connection for a while, which a graceful remote shutdown waits for.
	if killFirst {
		victim := r.members[2]
		victim.Kill()
		r.drop(victim)
		r.waitFor(90*time.Second, "the others settled after the kill", r.settled)
	}

	leaver := r.members[0]
	left := time.Now()
	leaver.Terminate()
	r.drop(leaver)
	moved := r.waitFor(90*time.Second, "the others settled after the leave", r.settled)
	if !leaver.Stop(60 * time.Second) {
		t.Fatalf("%s did not exit:\n%s", leaver.Name, shardproc.Tail(leaver.Log, 30))
	}
	exited := leaver.Exited().Sub(left)
	b, _ := os.ReadFile(leaver.Log)
	run, shutdown := "?", "?"
	if m := informerStopped.FindSubmatch(b); m != nil {
		run = string(m[1])
	}
	if m := clusterShutDown.FindSubmatch(b); m != nil {
		shutdown = string(m[1])
	}
	// A member started as soon as the leaver exited: nothing may wait for
	// the member that left.
	joined := r.join()
	r.waitFor(90*time.Second, "a member joined after the leave", r.settled)
	join := time.Since(joined.Start)
	t.Logf("%s, a peer killed before: %v: the others served the leaver's ranges %v after its SIGTERM; its Run returned %s after it, the cluster shutdown took %s, the process exited %v after the SIGTERM; a member started then served its share %v after its start",
		how, killFirst, moved.Round(time.Millisecond), run, shutdown, exited.Round(time.Millisecond), join.Round(time.Millisecond))
	for _, m := range r.members {
		if !m.Stop(60 * time.Second) {
			t.Errorf("%s did not leave within 60s:\n%s", m.Name, shardproc.Tail(m.Log, 30))
		}
	}
	r.checkLogs()
}
