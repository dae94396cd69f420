//go:build !race

// Several protoactor cluster members in one process, which the race
// detector cannot take (each member's remote.Start sets gRPC's global
// logger while the others' goroutines read it): hack/test.sh runs this
// file's tests without -race.

package ctrlruntime_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
	"github.com/actorinformer/actorinformer/shard"
)

// reconciles records a sharded controller's reconciles across replicas:
// which replica reconciled each owner last, with what it read from its
// cache, and the reconciles of one owner that overlapped.
type reconciles struct {
	mu       sync.Mutex
	running  map[string]string // owner key → the replica reconciling it
	last     map[string]seen
	overlaps []string
	count    int
}

type seen struct {
	replica string
	v       string // the owner's data["v"], from the replica's cache
	owned   int    // the owned Secrets the replica's cache has in the namespace
}

func (rs *reconciles) enter(replica, key string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if other, ok := rs.running[key]; ok {
		rs.overlaps = append(rs.overlaps, fmt.Sprintf("%s reconciled %s while %s did", replica, key, other))
	}
	rs.running[key] = replica
	rs.count++
}

func (rs *reconciles) leave(replica, key string, s seen) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.running[key] == replica {
		delete(rs.running, key)
	}
	rs.last[key] = s
}

// all reports whether every owner's last reconcile saw value v and its
// owned Secret, by the replica owner names, and how many each reconciled.
func (rs *reconciles) all(keys []string, v string, owner func(key string) string) (bool, map[string]int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	by := map[string]int{}
	for _, k := range keys {
		s, ok := rs.last[k]
		if !ok || s.v != v || s.owned != 1 || s.replica != owner(k) {
			return false, nil
		}
		by[s.replica]++
	}
	return true, by
}

type replica struct {
	name    string
	c       *cluster.Cluster
	prov    *test.Provider
	sharded *ctrlruntime.Sharded
	inner   reconcile.Reconciler
	cancel  context.CancelFunc
	done    chan error
}

// A controller written for one process, For(ConfigMap).Owns(Secret),
// sharded over replicas by ctrlruntime.Sharded on a real kube-apiserver:
// each owner is reconciled by one replica at a time, which reads the owner
// and its owned Secret from its own cache, through a graceful leave and a
// join; a replica drops (and counts) a request of a namespace it does not
// deliver; every replica stops without the manager's grace period running
// out.
func TestShardedController(t *testing.T) {
	cfg := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(cfg)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 48 {
		// The number before the end: namespaces that differ only in their
		// last characters fall in few ranges (docs/sharding.md, "Keys").
		ns := fmt.Sprintf("sharded-%d-owners", i)
		if err := direct.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}, Data: map[string]string{"v": "1"}}
		if err := direct.Create(ctx, owner); err != nil {
			t.Fatal(err)
		}
		yes := true
		owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID, Controller: &yes}}}}
		if err := direct.Create(ctx, owned); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ns+"/owner")
	}

	rs := &reconciles{running: map[string]string{}, last: map[string]seen{}}
	var slow atomic.Int64
	slow.Store(int64(5 * time.Millisecond))
	agent := test.NewInMemAgent()
	start := func(name string) *replica {
		t.Helper()
		prov := test.NewTestProvider(agent, test.WithTestProviderServiceTTL(time.Second), test.WithTestProviderRefreshTTL(200*time.Millisecond))
		c := cluster.New(actors.NewActorSystem(actors.SystemLogger(slog.New(slog.DiscardHandler))),
			cluster.Configure("sharded-controller", prov, disthash.New(), remote.Configure("127.0.0.1", 0, shard.RemoteOption())))
		c.StartMember()
		r := &replica{name: name, c: c, prov: prov, done: make(chan error, 1)}
		r.sharded = ctrlruntime.NewSharded(c, "owners", []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}},
			shard.WithLeases(cs.CoordinationV1(), "default"), shard.WithRanges(8), shard.WithMemberName(name),
			shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))
		mgr, err := manager.New(cfg, manager.Options{
			Scheme: scheme, NewCache: r.sharded.NewCache,
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: &skipNameValidation},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.AddReadyzCheck("shard", r.sharded.CheckSynced); err != nil {
			t.Fatal(err)
		}
		r.inner = reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			key := req.String()
			rs.enter(name, key)
			var s seen
			defer func() { rs.leave(name, key, s) }()
			var cm corev1.ConfigMap
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			var secrets corev1.SecretList
			if err := mgr.GetClient().List(ctx, &secrets, client.InNamespace(req.Namespace)); err != nil {
				return reconcile.Result{}, err
			}
			s = seen{replica: name, v: cm.Data["v"], owned: len(secrets.Items)}
			time.Sleep(time.Duration(slow.Load())) // a reconcile that takes a while
			return reconcile.Result{}, nil
		})
		// The one line that shards the controller: its reconciler wrapped.
		err = builder.ControllerManagedBy(mgr).Named("owners-" + name).For(&corev1.ConfigMap{}).Owns(&corev1.Secret{}).
			WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
			Complete(r.sharded.Reconciler(r.inner))
		if err != nil {
			t.Fatal(err)
		}
		mctx, mcancel := context.WithCancel(ctx)
		r.cancel = mcancel
		go func() { r.done <- mgr.Start(mctx) }()
		return r
	}
	stop := func(rps ...*replica) {
		t.Helper()
		for _, r := range rps {
			r.cancel()
		}
		for _, r := range rps {
			if err := <-r.done; err != nil {
				t.Errorf("%s's manager: %v", r.name, err)
			}
			_ = r.prov.Shutdown(true)
			r.c.Shutdown(false)
		}
	}
	updateAll := func(v string) error {
		for _, k := range keys {
			ns, name, _ := strings.Cut(k, "/")
			patch := client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"`+v+`"}}`))
			if err := direct.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch); err != nil {
				return err
			}
		}
		return nil
	}
	update := func(v string) {
		t.Helper()
		if err := updateAll(v); err != nil {
			t.Fatal(err)
		}
	}
	// settle waits until the last reconcile of every owner saw v and its
	// owned Secret, on the replica that delivers its namespace's range.
	settle := func(what, v string, live []*replica) {
		t.Helper()
		owner := func(key string) string {
			ns, _, _ := strings.Cut(key, "/")
			for _, r := range live {
				inf := r.sharded.Informer()
				rg, _ := inf.RangeOf(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns}})
				if slices.Contains(inf.Ranges(), rg) {
					return r.name
				}
			}
			return ""
		}
		var by map[string]int
		deadline := time.Now().Add(waitTimeout)
		for {
			var ok bool
			if ok, by = rs.all(keys, v, owner); ok {
				break
			}
			if time.Now().After(deadline) {
				rs.mu.Lock()
				last := fmt.Sprint(rs.last)
				rs.mu.Unlock()
				t.Fatalf("timed out waiting for %s; last reconciles %s", what, last)
			}
			time.Sleep(20 * time.Millisecond)
		}
		ranges := map[string]int{}
		for _, r := range live {
			ranges[r.name] = len(r.sharded.Informer().Ranges())
		}
		t.Logf("%s: owners reconciled by %v; ranges delivered %v", what, by, ranges)
	}

	rps := []*replica{start("r1"), start("r2"), start("r3")}
	every := rps
	balanced(t, rps)
	settle("three replicas reconciled every owner with its owned Secret", "1", rps)

	// A request of a namespace r1 does not deliver: dropped, counted, not
	// reconciled.
	inf := rps[0].sharded.Informer()
	mine := map[int]bool{}
	for _, r := range inf.Ranges() {
		mine[r.Index] = true
	}
	i := slices.IndexFunc(keys, func(k string) bool {
		ns, _, _ := strings.Cut(k, "/")
		r, _ := inf.RangeOf(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns}})
		return !mine[r.Index]
	})
	if i < 0 {
		t.Fatal("r1 delivers every namespace")
	}
	ns, name, _ := strings.Cut(keys[i], "/")
	before := rps[0].sharded.Dropped()
	rs.mu.Lock()
	count := rs.count
	rs.mu.Unlock()
	if _, err := rps[0].sharded.Reconciler(rps[0].inner).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	rs.mu.Lock()
	after := rs.count
	rs.mu.Unlock()
	if rps[0].sharded.Dropped() != before+1 || after != count {
		t.Errorf("a request of a range r1 does not deliver: dropped %d→%d, reconciles %d→%d; want dropped once and not reconciled",
			before, rps[0].sharded.Dropped(), count, after)
	}

	// Two joins while the owners change all the time and every replica has
	// reconciles queued and running (250 ms each, 8 at a time): the ranges
	// that move away from a running replica are released only once their
	// reconciles there have returned, and their requests still queued
	// there are dropped.
	slow.Store(int64(250 * time.Millisecond))
	churned := make(chan error, 1)
	var halt atomic.Bool
	go func() {
		for n := 0; !halt.Load(); n++ {
			if err := updateAll(fmt.Sprint("churn-", n)); err != nil {
				churned <- err
				return
			}
		}
		churned <- nil
	}()
	for _, name := range []string{"r4", "r5"} {
		rps = append(rps, start(name))
		every = append(every, rps[len(rps)-1])
		balanced(t, rps)
	}
	halt.Store(true)
	if err := <-churned; err != nil {
		t.Fatal(err)
	}
	update("2")
	settle("five replicas after two joins under load", "2", rps)
	slow.Store(int64(5 * time.Millisecond))
	stop(rps[0])
	rps = rps[1:]
	update("3")
	settle("four replicas after a graceful leave", "3", rps)
	dropped := map[string]int64{}
	for _, r := range every {
		dropped[r.name] = r.sharded.Dropped()
	}
	t.Logf("requests dropped: %v", dropped)
	stop(rps...)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t.Logf("%d reconciles", rs.count)
	if len(rs.overlaps) > 0 {
		t.Errorf("%d overlapping reconciles of one owner, first: %s", len(rs.overlaps), rs.overlaps[0])
	}
}

// balanced waits until the replicas deliver the group's 8 ranges between
// them, each some.
func balanced(t *testing.T, rps []*replica) {
	t.Helper()
	waitFor(t, "the replicas sharing the ranges", func() bool {
		n := 0
		for _, r := range rps {
			inf := r.sharded.Informer()
			if inf == nil || len(inf.Ranges()) == 0 {
				return false
			}
			n += len(inf.Ranges())
		}
		return n == 8
	})
}
