package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// A cluster member that was not started (StartMember) has no remote: it
// would never join, so New refuses it.
func TestNewRefusesAClusterNotStarted(t *testing.T) {
	c := cluster.New(quietSystem(), cluster.Configure("shard-test", test.NewTestProvider(test.NewInMemAgent()), disthash.New(), remote.Configure("127.0.0.1", 0)))
	_, err := shard.New(c, "g", newMemServer(), &corev1.ConfigMap{}, testLeases()...)
	if err == nil || !strings.Contains(err.Error(), "StartMember") {
		t.Errorf("New on a cluster member not started: %v; want an error saying to call StartMember", err)
	}
}

// A cluster member whose address is 0.0.0.0 or [::] cannot be reached by
// the others, nor find itself in the topology: New says how to fix it.
func TestNewRefusesAnUnreachableAddress(t *testing.T) {
	prov := test.NewTestProvider(test.NewInMemAgent())
	c := cluster.New(quietSystem(), cluster.Configure("shard-test", prov, disthash.New(), remote.Configure("0.0.0.0", 0)))
	c.StartMember()
	defer stopCluster(c, prov)
	_, err := shard.New(c, "g", newMemServer(), &corev1.ConfigMap{}, testLeases()...)
	if err == nil || !strings.Contains(err.Error(), "WithAdvertisedHost") {
		t.Errorf("New with address %s: %v; want an error saying to advertise a reachable address", c.ActorSystem.Address(), err)
	}
}

// New asks the members of the group for their settings, not itself, also
// when the provider's member ids are not the actor system's (the k8s
// provider's are uuids): a request to itself would find no actor (a dead
// letter).
func TestNewDoesNotProbeItself(t *testing.T) {
	c, prov := startNamedCluster(test.NewInMemAgent(), "pod-a")
	defer stopCluster2(c, prov)
	var mu sync.Mutex
	var dead []string
	sub := c.ActorSystem.EventStream.Subscribe(func(evt any) {
		if d, ok := evt.(*actor.DeadLetterEvent); ok && d.PID != nil {
			mu.Lock()
			dead = append(dead, d.PID.String())
			mu.Unlock()
		}
	})
	defer c.ActorSystem.EventStream.Unsubscribe(sub)
	waitForTopology(t, c, 1)
	if _, err := shard.New(c, "g", newMemServer(), &corev1.ConfigMap{}, testLeases()...); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range dead {
		if strings.Contains(d, "actorinformer-shard/g") {
			t.Errorf("New sent a request to itself: a dead letter to %s", d)
		}
	}
}

func stopCluster2(c *cluster.Cluster, prov cluster.ClusterProvider) {
	_ = prov.Shutdown(true)
	c.Shutdown(false)
}

func waitForTopology(t *testing.T, c *cluster.Cluster, n int) {
	t.Helper()
	eventually(t, 10*time.Second, "the topology", func() string {
		if got := len(c.MemberList.Members().Members()); got != n {
			return fmt.Sprintf("%d members, want %d", got, n)
		}
		return ""
	})
}

// cacheCheck is a handler that looks each object it is given up in the
// informer's cache, as a worker would: client-go's informers update their
// cache before they call handlers.
type cacheCheck struct {
	mu     sync.Mutex
	inf    *shard.Informer
	calls  int
	misses []string
}

func (c *cacheCheck) check(obj any) {
	key, _ := cache.MetaNamespaceKeyFunc(obj)
	_, ok, _ := c.inf.GetIndexer().GetByKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if !ok {
		c.misses = append(c.misses, key)
	}
}

func (c *cacheCheck) OnAdd(obj any, _ bool) { c.check(obj) }
func (c *cacheCheck) OnUpdate(_, obj any)   { c.check(obj) }
func (c *cacheCheck) OnDelete(any)          {}
func (c *cacheCheck) result() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.misses
}

func TestHandlersFindTheirObjectInTheCache(t *testing.T) {
	src := newMemServer()
	for i := range 200 {
		src.create(fmt.Sprintf("o%d", i))
	}
	c, prov := startCluster(test.NewInMemAgent())
	defer stopCluster(c, prov)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{},
		append(testLeases(), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))...)
	if err != nil {
		t.Fatal(err)
	}
	h := &cacheCheck{inf: inf}
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, 30*time.Second, "every object handled", func() string {
		if n, _ := h.result(); n < 200 {
			return fmt.Sprintf("%d calls", n)
		}
		return ""
	})
	if _, misses := h.result(); len(misses) > 0 {
		t.Errorf("%d handler calls did not find their object in GetIndexer, first %v", len(misses), misses[:min(5, len(misses))])
	}
}
