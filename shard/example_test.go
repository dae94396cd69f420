package shard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/fakeleases"
	"github.com/actorinformer/actorinformer/shard"
)

// The code blocks of docs/sharding.md, run.

// startMember is docs/sharding.md's member on protoactor's in-memory test
// provider: every member of the group shares agent.
func startMember(agent *test.InMemAgent, clientset kubernetes.Interface, lw cache.ListerWatcher) (*cluster.Cluster, *shard.Informer, error) {
	// doc:begin docs/sharding.md
	system := actors.NewActorSystem()
	config := cluster.Configure("my-cluster", test.NewTestProvider(agent), disthash.New(),
		remote.Configure("127.0.0.1", 0,
			remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096)))
	c := cluster.New(system, config)
	c.StartMember()

	inf, err := shard.New(c, "pods", lw, &corev1.Pod{},
		shard.WithLeases(clientset.CoordinationV1(), "default"),
		shard.WithRanges(16),
		shard.WithIndexers(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	// doc:end
	return c, inf, err
}

func TestDocTestProvider(t *testing.T) {
	src := newMemServer()
	src.create("a")
	cs := fake.NewClientset()
	fakeleases.Install(cs)
	c, inf, err := startMember(test.NewInMemAgent(), cs, src)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) || len(inf.GetIndexer().ListKeys()) != 1 {
		t.Fatal("the member did not sync its one object")
	}
}

// onKubernetes is docs/sharding.md's member on Kubernetes, found through
// protoactor's k8s provider (pods labelled by the provider).
func onKubernetes(clientset kubernetes.Interface, lw cache.ListerWatcher) (*shard.Informer, error) {
	// doc:begin docs/sharding.md
	provider, err := k8s.New() // in a pod: see "On Kubernetes" below
	if err != nil {
		return nil, err
	}
	// The provider gives the other members the pod's IP: advertise it
	// (POD_IP from the downward API), or this member never finds itself.
	advertised := net.JoinHostPort(os.Getenv("POD_IP"), "8090")
	c := cluster.New(actors.NewActorSystem(),
		cluster.Configure("my-controller", provider, disthash.New(),
			remote.Configure("0.0.0.0", 8090, remote.WithAdvertisedHost(advertised))))
	c.StartMember()
	return shard.New(c, "pods", lw, &corev1.Pod{}, shard.WithLeases(clientset.CoordinationV1(), "my-namespace"))
	// doc:end
}

// Outside a pod the k8s provider has no in-cluster configuration: the
// snippet compiles and runs up to there.
func TestDocKubernetesProviderOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := onKubernetes(fake.NewClientset(), newMemServer()); !errors.Is(err, rest.ErrNotInCluster) {
		t.Fatalf("err %v, want rest.ErrNotInCluster", err)
	}
}

func TestDocOwnershipHandler(t *testing.T) {
	src := newMemServer()
	for i := range 10 {
		src.create(fmt.Sprintf("o%d", i))
	}
	var handler cache.ResourceEventHandlerFuncs
	// doc:begin docs/sharding.md
	var mu sync.Mutex
	owned := map[int]bool{}
	h := shard.OwnershipFuncs{
		ResourceEventHandler: handler,
		AcquireFunc:          func(r shard.Range, epoch uint64) { mu.Lock(); owned[r.Index] = true; mu.Unlock() },
		ReleaseFunc:          func(r shard.Range) { mu.Lock(); delete(owned, r.Index); mu.Unlock() },
	}
	// doc:end
	inf, stop := runOne(t, src, h, shard.WithRanges(4))
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	mu.Lock()
	n := len(owned)
	mu.Unlock()
	if n != 4 {
		t.Fatalf("the handler heard of %d acquired ranges, want 4", n)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(owned) != 0 {
		t.Fatalf("%d ranges still owned after the member left", len(owned))
	}
}

// worker is docs/sharding.md's worker loop, dropping the keys of released
// ranges.
func worker(inf *shard.Informer, queue workqueue.TypedRateLimitingInterface[string], reconcile func(string) error) {
	// doc:begin docs/sharding.md
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		if inf.Released(key) {
			// Its range moved to another member, whose handlers have the
			// object: not ours to reconcile any more.
			queue.Forget(key)
			queue.Done(key)
			continue
		}
		if err := reconcile(key); err != nil {
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
	// doc:end
}

func TestDocWorkerDropsReleasedKeys(t *testing.T) {
	src := newMemServer()
	for i := range 20 {
		src.create(fmt.Sprintf("o%d", i))
	}
	inf, stop := runOne(t, src, nil, shard.WithRanges(4), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	keys := inf.GetIndexer().ListKeys()
	stop() // the only member leaves: every range is released
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	for _, k := range keys {
		queue.Add(k)
	}
	queue.Add("ns0/deleted-before") // a key of an object deleted while owned: still reconciled
	queue.ShutDown()                // Get hands out what is queued, then says shutdown
	var reconciled []string
	worker(inf, queue, func(k string) error { reconciled = append(reconciled, k); return nil })
	if len(reconciled) != 1 || reconciled[0] != "ns0/deleted-before" {
		t.Fatalf("reconciled %v; want only the key that was not in a released range", reconciled)
	}
}
