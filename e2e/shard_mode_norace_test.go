//go:build !race

// A protoactor cluster member in the test process: not under -race
// (remote.Start sets gRPC's global logger while other gRPC goroutines of
// the process read it). hack/test.sh runs TestShardFilterMode without it.

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/shard"
)

// On an empty namespace, the filter mode is known once the ranges' lists
// have answered: kube-apiserver 1.37 with the gate says in the list's
// shardInfo that it applied the selector; without the gate it says nothing.
func TestShardFilterModeOfAnEmptyNamespace(t *testing.T) {
	for _, gate := range []bool{true, false} {
		t.Run(fmt.Sprintf("gate=%v", gate), func(t *testing.T) {
			opts := testcluster.Options{}
			want := shard.FilterClient
			if gate {
				opts.FeatureGates = "ShardedListAndWatch=true"
				want = shard.FilterServer
			}
			c := testcluster.Start(t, opts)
			cs := clientFor(t, c.Config())
			createNamespaces(t, cs, "empty")
			pc := cluster.New(actors.NewActorSystem(), cluster.Configure("mode-test",
				test.NewTestProvider(test.NewInMemAgent()), disthash.New(), remote.Configure("127.0.0.1", 0)))
			pc.StartMember()
			defer pc.Shutdown(false)
			inf, err := shard.New(pc, "configmaps", listWatch(cs.CoreV1().ConfigMaps("empty")), &corev1.ConfigMap{}, shard.WithRanges(4),
				shard.WithLeases(cs.CoordinationV1(), "empty"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); inf.RunWithContext(ctx) }()
			defer func() { cancel(); <-done }()
			if !cache.WaitForCacheSync(timeoutAfter(60*time.Second), inf.HasSynced) {
				t.Fatal("the member did not sync")
			}
			if st := inf.Status(); st.Mode != want {
				t.Fatalf("filter mode %s once every range listed the empty namespace, want %s", st.Mode, want)
			}
		})
	}
}

func timeoutAfter(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}
