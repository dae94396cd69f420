//go:build !race

// The race detector cannot take a protoactor cluster member beside another
// gRPC client in one process: remote.Start sets gRPC's global logger
// (grpclog.SetLoggerV2) while the etcd client's gRPC goroutines read it.
// hack/test.sh runs this file without -race.

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/shard"
)

// withEtcd is docs/sharding.md's member joined through protoactor's etcd
// provider.
func withEtcd(etcdURL string, clientset kubernetes.Interface, lw cache.ListerWatcher) (*cluster.Cluster, *shard.Informer, error) {
	// doc:begin docs/sharding.md
	provider, err := etcd.NewWithConfig("/my-controller",
		clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second},
		etcd.WithKeepAliveTTL(3*time.Second)) // a lost member's ranges move after this
	if err != nil {
		return nil, nil, err
	}
	c := cluster.New(actors.NewActorSystem(),
		cluster.Configure("my-controller", provider, disthash.New(), remote.Configure("127.0.0.1", 0)))
	c.StartMember()
	inf, err := shard.New(c, "configmaps", lw, &corev1.ConfigMap{},
		shard.WithLeases(clientset.CoordinationV1(), "default")) // each member's lease fences it
	// doc:end
	return c, inf, err
}

// The snippet on the test etcd (its own key prefix keeps it apart from the
// API server's data): a member that syncs the server's objects.
func TestShardDocEtcd(t *testing.T) {
	// Not startCluster: its goroutine check would catch the protoactor
	// cluster's own goroutines (gossip, throttlers), which outlive its
	// Shutdown.
	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	cs := clientFor(t, c.Config())
	ctx := context.Background()
	for i := range 20 {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("doc%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lw := listWatch(cs.CoreV1().ConfigMaps("default"))
	pc, inf, err := withEtcd(c.EtcdURL(), cs, lw)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(runCtx) }()
	if !cache.WaitForCacheSync(timeoutAfter(60*time.Second), inf.HasSynced) {
		t.Fatal("the member did not sync")
	}
	if n := len(inf.GetIndexer().ListKeys()); n < 20 {
		t.Errorf("%d objects cached, want the 20 created (and any other ConfigMap of default)", n)
	}
	if st := inf.Status(); st.Mode != shard.FilterServer {
		t.Errorf("filter mode %s, want server", st.Mode)
	}
	cancel()
	<-done
	pc.Shutdown(true)
}

func timeoutAfter(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}
