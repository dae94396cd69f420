package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// startCluster starts a cluster and registers, before it, a goroutine-leak
// check that runs after every other cleanup (cleanups run last-in
// first-out): informers are stopped and the processes killed by then, so
// client connections to them have ended too. It checks the goroutines
// started since: those an earlier test left are that test's (in the build
// without -race, TestShardFilterModeOfAnEmptyNamespace leaves protoactor's
// test provider's behind, and the tests with member processes run after
// it).
func startCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leakcheck.Options(before)...) })
	return testcluster.Start(t, opts)
}

func clientFor(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func createNamespaces(t testing.TB, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create namespace %s: %v", n, err)
		}
	}
}

// ---- ListerWatcher that records what the reflectors ask for ----

// listCall is one List request a reflector made and what it got.
type listCall struct {
	opts  metav1.ListOptions
	cont  string
	items int
	err   error
}

// recordingLW wraps a ListerWatcher and records every List and Watch. With
// noWatchList it tells both reflectors that it cannot stream lists
// (client-go's opt-out), so they list instead.
type recordingLW struct {
	inner       cache.ListerWatcherWithContext
	noWatchList bool

	mu      sync.Mutex
	lists   []listCall
	watches []metav1.ListOptions
}

func (r *recordingLW) IsWatchListSemanticsUnSupported() bool { return r.noWatchList }

func (r *recordingLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return r.ListWithContext(context.Background(), opts)
}

func (r *recordingLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return r.WatchWithContext(context.Background(), opts)
}

func (r *recordingLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := r.inner.ListWithContext(ctx, opts)
	call := listCall{opts: opts, err: err}
	if err == nil {
		if la, lerr := meta.ListAccessor(obj); lerr == nil {
			call.cont = la.GetContinue()
		}
		call.items = meta.LenList(obj)
	}
	r.mu.Lock()
	r.lists = append(r.lists, call)
	r.mu.Unlock()
	return obj, err
}

func (r *recordingLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	r.mu.Lock()
	r.watches = append(r.watches, opts)
	r.mu.Unlock()
	return r.inner.WatchWithContext(ctx, opts)
}

func (r *recordingLW) listCalls() []listCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]listCall(nil), r.lists...)
}

func (r *recordingLW) watchCalls() []metav1.ListOptions {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]metav1.ListOptions(nil), r.watches...)
}

// listWatch turns a typed client (e.g. cs.CoreV1().ConfigMaps(ns)) into a
// ListerWatcher, as client-go's generated informers do.
func listWatch[L runtime.Object](c actors.ListWatchable[L]) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, o)
		},
	}
}

// ---- informers side by side ----

// side is one informer under test, ours or client-go's, with its handlers.
type side struct {
	name  string
	inf   cache.SharedIndexInformer
	ours  *actors.SharedIndexInformer // nil for client-go's
	lw    *recordingLW
	views map[string]*informertest.View

	errMu     sync.Mutex
	watchErrs []error
}

func (s *side) addView(t testing.TB, name string) *informertest.View {
	t.Helper()
	v := informertest.NewView()
	if _, err := s.inf.AddEventHandler(v.Handler()); err != nil {
		t.Fatal(err)
	}
	s.views[name] = v
	return v
}

func (s *side) errs() []error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return append([]error(nil), s.watchErrs...)
}

func (s *side) relists() int64 {
	if s.ours == nil {
		return -1
	}
	return s.ours.Stats().Relists
}

// pairConfig describes the informers of one resource to run side by side.
type pairConfig struct {
	example runtime.Object
	// newLW returns the ListerWatcher of one informer (each gets its own,
	// wrapped in a recordingLW).
	newLW       func() cache.ListerWatcherWithContext
	noWatchList bool
	ourOpts     []actors.Option
}

// startPair creates our informer and client-go's over cfg's resource, each
// with an "early" handler view, starts them and registers a cleanup that
// stops both and waits for them to return.
func startPair(t *testing.T, cfg pairConfig) (ours, ref *side) {
	t.Helper()
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	ours = &side{name: "ours", lw: &recordingLW{inner: cfg.newLW(), noWatchList: cfg.noWatchList}, views: map[string]*informertest.View{}}
	ref = &side{name: "client-go", lw: &recordingLW{inner: cfg.newLW(), noWatchList: cfg.noWatchList}, views: map[string]*informertest.View{}}
	ours.ours = actors.NewSharedIndexInformer(ours.lw, cfg.example, 0, indexers, cfg.ourOpts...)
	ours.inf = ours.ours
	ref.inf = cache.NewSharedIndexInformer(ref.lw, cfg.example, 0, indexers)
	for _, s := range []*side{ours, ref} {
		if err := s.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			s.errMu.Lock()
			s.watchErrs = append(s.watchErrs, err)
			s.errMu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		s.addView(t, "early")
	}
	runInformers(t, ours.inf, ref.inf)
	return ours, ref
}

// runInformers runs the informers until the test ends; the cleanup waits
// for each to return.
func runInformers(t *testing.T, infs ...cache.SharedIndexInformer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, inf := range infs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func waitSynced(t testing.TB, timeout time.Duration, fns ...cache.InformerSynced) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), fns...) {
		t.Fatalf("caches did not sync within %v", timeout)
	}
}

// ---- snapshots and convergence ----

func objectsSnapshot[T runtime.Object](objs []T) map[string]string {
	out := make(map[string]string, len(objs))
	for _, obj := range objs {
		out[informertest.Key(obj)] = informertest.RV(obj)
	}
	return out
}

// configMapListerSnapshot reads the cache through the generated lister, as
// controllers do.
func configMapListerSnapshot(idx cache.Indexer) map[string]string {
	l, err := corev1listers.NewConfigMapLister(idx).List(labels.Everything())
	if err != nil {
		return map[string]string{"lister-error": err.Error()}
	}
	return objectsSnapshot(l)
}

func podListerSnapshot(idx cache.Indexer) map[string]string {
	l, err := corev1listers.NewPodLister(idx).List(labels.Everything())
	if err != nil {
		return map[string]string{"lister-error": err.Error()}
	}
	return objectsSnapshot(l)
}

func listSnapshot(obj runtime.Object, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(items))
	for _, it := range items {
		out[informertest.Key(it)] = informertest.RV(it)
	}
	return out, nil
}

// snapshotSource is one of the things that must equal the server's list.
type snapshotSource struct {
	name string
	get  func() map[string]string
}

// sidesSources returns, for each side, its store, its lister read (when
// lister is not nil) and each handler view.
func sidesSources(lister func(cache.Indexer) map[string]string, sides ...*side) []snapshotSource {
	var out []snapshotSource
	for _, s := range sides {
		out = append(out, snapshotSource{s.name + " cache", func() map[string]string { return informertest.StoreSnapshot(s.inf.GetStore()) }})
		if lister != nil {
			out = append(out, snapshotSource{s.name + " lister", func() map[string]string { return lister(s.inf.GetIndexer()) }})
		}
		names := make([]string, 0, len(s.views))
		for n := range s.views {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			v := s.views[n]
			out = append(out, snapshotSource{s.name + " handler " + n, v.Snapshot})
		}
	}
	return out
}

// waitConverged waits until every source equals the server's list (fetched
// again at each poll) and returns how long that took and the server's size.
func waitConverged(t testing.TB, timeout time.Duration, what string, server func(context.Context) (map[string]string, error), sources []snapshotSource) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	n := 0
	informertest.Eventually(t, timeout, 100*time.Millisecond, what, func() string {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		want, err := server(ctx)
		if err != nil {
			return "server list: " + err.Error()
		}
		n = len(want)
		for _, src := range sources {
			if d := informertest.Diff(want, src.get()); d != "" {
				return src.name + ": " + d
			}
		}
		return ""
	})
	return time.Since(start), n
}

// checkHandlerErrors fails the test if a handler saw an event sequence that
// contradicts its own view (e.g. an update whose old object it never had).
func checkHandlerErrors(t testing.TB, sides ...*side) {
	t.Helper()
	for _, s := range sides {
		for n, v := range s.views {
			if errs := v.Errors(); len(errs) > 0 {
				t.Errorf("%s handler %s saw %d inconsistent events: %v", s.name, n, len(errs), errs[:min(5, len(errs))])
			}
		}
	}
}

// ---- the writer ----

// resourceOps are the writes the churn makes on one resource. Updates are
// merge patches, so they need no resourceVersion and never conflict.
type resourceOps struct {
	create func(ctx context.Context, ns, name string, gen int) error
	patch  func(ctx context.Context, ns, name string, gen int) error
	del    func(ctx context.Context, ns, name string) error
	get    func(ctx context.Context, ns, name string) error
}

func genPatch(field string, gen int) []byte {
	return fmt.Appendf(nil, `{"metadata":{"labels":{"gen":"%d"}},%q:{"gen":"%d"}}`, gen, field, gen)
}

func configMapOps(cs kubernetes.Interface) resourceOps {
	return resourceOps{
		create: func(ctx context.Context, ns, name string, gen int) error {
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gen": fmt.Sprint(gen)}},
				Data:       map[string]string{"gen": fmt.Sprint(gen)},
			}, metav1.CreateOptions{})
			return err
		},
		patch: func(ctx context.Context, ns, name string, gen int) error {
			_, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, genPatch("data", gen), metav1.PatchOptions{})
			return err
		},
		del: func(ctx context.Context, ns, name string) error {
			return cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
		},
		get: func(ctx context.Context, ns, name string) error {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
	}
}

// podOps writes Pods. Nothing schedules them, so they stay Pending and a
// delete removes them at once.
func podOps(cs kubernetes.Interface) resourceOps {
	return resourceOps{
		create: func(ctx context.Context, ns, name string, gen int) error {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gen": fmt.Sprint(gen)}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
			}, metav1.CreateOptions{})
			return err
		},
		patch: func(ctx context.Context, ns, name string, gen int) error {
			_, err := cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"labels":{"gen":"%d"}}}`, gen), metav1.PatchOptions{})
			return err
		},
		del: func(ctx context.Context, ns, name string) error {
			return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		},
		get: func(ctx context.Context, ns, name string) error {
			_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
	}
}

// churnSpec is a random mix of creates, updates and deletes over
// len(namespaces)*names keys, by a pool of workers that each own a disjoint
// share of the keys (so they never race each other on one object).
type churnSpec struct {
	ops        resourceOps
	namespaces []string
	prefix     string
	names      int
	// ops successful writes in all; 0 means until stop is closed.
	total   int
	workers int
	seed    int64
	stop    <-chan struct{}
}

// churnStats counts the writes that succeeded, and the failed attempts.
type churnStats struct {
	creates, updates, deletes, failures atomic.Int64
}

func (s *churnStats) done() int64 { return s.creates.Load() + s.updates.Load() + s.deletes.Load() }

func (s *churnStats) String() string {
	return fmt.Sprintf("%d creates, %d updates, %d deletes, %d failed attempts",
		s.creates.Load(), s.updates.Load(), s.deletes.Load(), s.failures.Load())
}

type keyState uint8

const (
	absent keyState = iota
	live
	unknown // a write failed in a way that leaves the outcome open
)

// startChurn runs spec in the background; wait returns when it is done.
func startChurn(ctx context.Context, spec churnSpec) (stats *churnStats, wait func()) {
	stats = &churnStats{}
	if spec.workers <= 0 {
		spec.workers = 8
	}
	type key struct{ ns, name string }
	var keys []key
	for _, ns := range spec.namespaces {
		for i := 0; i < spec.names; i++ {
			keys = append(keys, key{ns, fmt.Sprintf("%s-%03d", spec.prefix, i)})
		}
	}
	var gen atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < spec.workers; w++ {
		var mine []key
		for i := w; i < len(keys); i += spec.workers {
			mine = append(mine, keys[i])
		}
		quota := -1
		if spec.total > 0 {
			quota = spec.total / spec.workers
			if w < spec.total%spec.workers {
				quota++
			}
		}
		wg.Add(1)
		go func(w int, mine []key, quota int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(spec.seed*1000 + int64(w)))
			state := make([]keyState, len(mine))
			fail := func() {
				stats.failures.Add(1)
				select { // the server may be down: do not spin
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
			for done := 0; quota < 0 || done < quota; {
				if ctx.Err() != nil {
					return
				}
				if spec.stop != nil {
					select {
					case <-spec.stop:
						return
					default:
					}
				}
				i := rng.Intn(len(mine))
				k := mine[i]
				g := int(gen.Add(1))
				switch state[i] {
				case unknown:
					switch err := spec.ops.get(ctx, k.ns, k.name); {
					case err == nil:
						state[i] = live
					case apierrors.IsNotFound(err):
						state[i] = absent
					default:
						fail()
					}
				case absent:
					switch err := spec.ops.create(ctx, k.ns, k.name, g); {
					case err == nil:
						state[i] = live
						stats.creates.Add(1)
						done++
					case apierrors.IsAlreadyExists(err):
						state[i] = live
					default:
						state[i] = unknown
						fail()
					}
				case live:
					if rng.Intn(4) == 0 {
						switch err := spec.ops.del(ctx, k.ns, k.name); {
						case err == nil:
							state[i] = absent
							stats.deletes.Add(1)
							done++
						case apierrors.IsNotFound(err):
							state[i] = absent
						default:
							state[i] = unknown
							fail()
						}
					} else {
						switch err := spec.ops.patch(ctx, k.ns, k.name, g); {
						case err == nil:
							stats.updates.Add(1)
							done++
						case apierrors.IsNotFound(err):
							state[i] = absent
						default:
							state[i] = unknown
							fail()
						}
					}
				}
			}
		}(w, mine, quota)
	}
	return stats, wg.Wait
}

// waitOps waits until the churn has made n more successful writes than
// from.
func waitOps(t testing.TB, stats *churnStats, from, n int64) {
	t.Helper()
	informertest.Eventually(t, 120*time.Second, 20*time.Millisecond, fmt.Sprintf("%d more writes", n), func() string {
		if d := stats.done() - from; d < n {
			return fmt.Sprintf("%d writes so far", d)
		}
		return ""
	})
}

// createConfigMaps creates n ConfigMaps name-0..name-(n-1) in ns with
// workers in parallel.
func createConfigMaps(t testing.TB, cs kubernetes.Interface, ns, prefix string, n, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	next := atomic.Int64{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || firstErr.Load() != nil {
					return
				}
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, i), Labels: map[string]string{"app": "e2e"}},
					Data:       map[string]string{"index": fmt.Sprint(i), "payload": strings.Repeat("x", 64)},
				}
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					err = fmt.Errorf("create %s/%s: %w", ns, cm.Name, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		t.Fatal(*p)
	}
}

func configMapServer(cs kubernetes.Interface, ns string) func(context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		return listSnapshot(cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}))
	}
}

func podServer(cs kubernetes.Interface, ns string) func(context.Context) (map[string]string, error) {
	return func(ctx context.Context) (map[string]string, error) {
		return listSnapshot(cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}))
	}
}

func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
