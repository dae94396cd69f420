package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// Sharded spreads a manager's controllers over the members of a shard
// group: each replica runs the same manager, and its cache holds, of the
// kinds it is given, only the namespaces of the ranges it delivers
// (shard.Informer, one group whose kinds share their ranges' owners,
// hashed by namespace). A controller written for one process,
// For(&Owner{}).Owns(&Owned{}), runs sharded with its reconciler wrapped
// by [Sharded.Reconciler]; no leader election is needed:
//
//	sharded := ctrlruntime.NewSharded(c, "owners", []client.Object{&Owner{}, &Owned{}}, shard.WithLeases(leases, ns))
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{NewCache: sharded.NewCache})
//	err = ctrl.NewControllerManagedBy(mgr).For(&Owner{}).Owns(&Owned{}).Complete(sharded.Reconciler(r))
//
// c is the replica's protoactor cluster member, started. The members of
// the group must give the same kinds, the same first. The cache's
// informers of other kinds (read by the client, or watched by other
// controllers) are not sharded: every replica caches all of their objects.
//
// Its methods may be called by multiple goroutines simultaneously.
type Sharded struct {
	c     *cluster.Cluster
	group string
	kinds []client.Object
	opts  []shard.Option

	mu     sync.Mutex
	idle   sync.Cond // signalled as a reconcile ends
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	first  *shard.Informer
	byKind map[schema.GroupKind]*shard.Informer
	err    error
	// owned are the ranges whose requests are reconciled here; inflight
	// counts the reconciles running, per range.
	owned    map[int]bool
	inflight map[int]int
	dropped  int64
}

// NewSharded returns what shards a manager over group's members: kinds
// are the sharded kinds (the first is the group's own, the others added
// to it in order), opts the group's (WithLeases is required). The group
// hashes by namespace, whatever opts say: an owner and what it owns share
// a namespace, not a uid.
func NewSharded(c *cluster.Cluster, group string, kinds []client.Object, opts ...shard.Option) *Sharded {
	s := &Sharded{c: c, group: group, kinds: kinds, opts: append(opts[:len(opts):len(opts)], shard.WithHashField(shard.Namespace)),
		byKind: map[schema.GroupKind]*shard.Informer{}, owned: map[int]bool{}, inflight: map[int]int{}}
	s.idle.L = &s.mu
	return s
}

// NewCache is a cache.NewCacheFunc (manager.Options.NewCache): the
// manager's cache, whose informers of the sharded kinds are the group's.
// It makes them at once, in the kinds' order, and fails when the group
// cannot be made. The cache watches every namespace (no
// DefaultNamespaces): the group splits them. Its Start runs the group,
// which leaves gracefully when the manager stops.
func (s *Sharded) NewCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	switch {
	case len(s.kinds) == 0:
		return nil, errors.New("ctrlruntime: NewSharded without kinds")
	case len(opts.DefaultNamespaces) > 0:
		return nil, errors.New("ctrlruntime: a sharded cache watches every namespace (its group splits them): no DefaultNamespaces")
	}
	s.mu.Lock()
	if s.scheme != nil || s.first != nil {
		s.mu.Unlock()
		return nil, errors.New("ctrlruntime: one manager's cache per Sharded")
	}
	s.scheme, s.mapper = opts.Scheme, opts.Mapper
	s.mu.Unlock()
	opts.NewInformer = s.newInformer
	c, err := cache.New(config, opts)
	if err != nil {
		return nil, err
	}
	for _, k := range s.kinds {
		if _, err := c.GetInformer(context.Background(), k, cache.BlockUntilSynced(false)); err != nil {
			return nil, fmt.Errorf("ctrlruntime: the sharded kind %T: %w", k, err)
		}
	}
	s.mu.Lock()
	first, err := s.first, s.err
	s.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case first == nil:
		return nil, errors.New("ctrlruntime: the cache made no informer of the sharded kinds")
	}
	// Hears which ranges this member delivers, for Reconciler.
	if _, err := first.AddOwnershipHandler(shard.OwnershipFuncs{AcquireFunc: s.acquired, ReleaseFunc: s.released}); err != nil {
		return nil, err
	}
	return c, nil
}

// newInformer is the cache's NewInformer: the group's informer of a
// sharded kind (New's for the first, AddKind's for the others), a plain
// actorinformer informer in the cluster member's actor system for the
// other kinds.
func (s *Sharded) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	gvk, variant := kindOf(obj, s.scheme)
	sharded := false
	for _, k := range s.kinds {
		if kk, v := kindOf(k, s.scheme); kk.GroupKind() == gvk.GroupKind() && v == variant {
			sharded = true
		}
	}
	plain := func() toolscache.SharedIndexInformer {
		return actors.NewSharedIndexInformer(lw, obj, resync, idx, actors.WithActorSystem(s.c.ActorSystem),
			actors.WithName(gvkName(gvk)), actors.WithResource(resourceOf(gvk, s.mapper)))
	}
	if !sharded || s.err != nil {
		return plain()
	}
	var inf *shard.Informer
	var err error
	switch {
	case s.byKind[gvk.GroupKind()] != nil:
		err = fmt.Errorf("ctrlruntime: a second informer of the sharded kind %s (one per kind: no DefaultNamespaces, and not both typed and metadata-only)", gvk.GroupKind())
	case s.first == nil:
		inf, err = shard.New(s.c, s.group, lw, obj, s.opts...)
	default:
		inf, err = s.first.AddKind(resourceOf(gvk, s.mapper).GroupResource(), lw, obj)
	}
	if err == nil {
		err = inf.AddIndexers(idx)
	}
	if err != nil {
		s.err = err
		return plain() // never started: NewCache fails
	}
	if s.first == nil {
		s.first = inf
	}
	s.byKind[gvk.GroupKind()] = inf
	return inf
}

// Informer returns the group's informer of the first kind, once the
// manager's cache is made (nil before): its Status, Ranges and fencing
// tokens (Epoch) are the member's.
func (s *Sharded) Informer() *shard.Informer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// CheckSynced and CheckLive are the member's readiness and liveness
// checks (shard.Informer's), for mgr.AddReadyzCheck and
// mgr.AddHealthzCheck; they fail until the manager's cache is made.
func (s *Sharded) CheckSynced(r *http.Request) error {
	if inf := s.Informer(); inf != nil {
		return inf.CheckSynced(r)
	}
	return errors.New("the sharded cache is not made yet")
}

func (s *Sharded) CheckLive(r *http.Request) error {
	if inf := s.Informer(); inf != nil {
		return inf.CheckLive(r)
	}
	return errors.New("the sharded cache is not made yet")
}

// Reconciler wraps r so that it reconciles only the requests of the
// ranges this member delivers, one range's at a time with its delivery: a
// request whose namespace is in a range this member does not deliver (it
// moved away while the request waited in the queue, or was requeued) is
// dropped and counted (Dropped, and the metric
// actorinformer_sharded_dropped_requests_total), and a range is released
// only once its reconciles running here have returned, so that its next
// owner's never overlap them.
func (s *Sharded) Reconciler(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		rng, ok := s.begin(req.Namespace)
		if !ok {
			droppedRequests.WithLabelValues(s.group).Inc()
			return reconcile.Result{}, nil
		}
		defer s.end(rng)
		return r.Reconcile(ctx, req)
	})
}

// Dropped is how many requests Reconciler dropped.
func (s *Sharded) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

func (s *Sharded) begin(namespace string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.dropped++
		return 0, false
	}
	r, err := s.first.RangeOf(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace}})
	if err != nil || !s.owned[r.Index] {
		s.dropped++
		return 0, false
	}
	s.inflight[r.Index]++
	return r.Index, true
}

func (s *Sharded) end(r int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[r]--
	s.idle.Broadcast()
}

func (s *Sharded) acquired(r shard.Range, _ uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owned[r.Index] = true
}

// released stops the range's reconciles, and returns once those running
// have: the range's release (its record's write) waits for it.
func (s *Sharded) released(r shard.Range) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.owned, r.Index)
	for s.inflight[r.Index] > 0 {
		s.idle.Wait()
	}
}

// droppedRequests counts Reconciler's dropped requests, per group, in
// controller-runtime's metrics registry (a manager's /metrics).
var droppedRequests = func() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actorinformer_sharded_dropped_requests_total",
		Help: "Reconcile requests dropped because their namespace's range is not delivered by this member (it moved away while they waited).",
	}, []string{"group"})
	metrics.Registry.MustRegister(c)
	return c
}()
