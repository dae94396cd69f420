package actors_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
)

// running starts inf (ours or client-go's) and returns a stop function
// that waits for Run to end.
func running(t testing.TB, inf interface{ RunWithContext(context.Context) }) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return ctx, stop
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPanickingHandlerIsIsolated: a handler's panic is logged with its
// stack and counted; that handler and the others go on.
// Real time: a panic recovered on a real listener's goroutine, logged and
// counted in Stats (handler panics on every interleaving: internal/sim's
// panic).
func TestPanickingHandlerIsIsolated(t *testing.T) {
	src, lw := newSource(t)
	var logs safeBuffer
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false),
		actors.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	var panicky, calm atomic.Int64
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(obj any, _ bool) {
		panicky.Add(1)
		if obj.(*corev1.Pod).Name == "bad" {
			panic("boom")
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { calm.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(pod("ns", "good1", 1))
	src.Add(pod("ns", "bad", 2))
	src.Add(pod("ns", "good2", 3))
	eventually(t, 10*time.Second, "deliveries", func() string {
		if panicky.Load() != 3 || calm.Load() != 3 {
			return fmt.Sprintf("panicky %d calm %d", panicky.Load(), calm.Load())
		}
		return ""
	})
	if n := len(inf.GetStore().List()); n != 3 {
		t.Fatalf("cache has %d objects, want 3", n)
	}
	var panics int64
	for _, h := range inf.Stats().Handlers {
		panics += h.Panics
	}
	if panics != 1 {
		t.Fatalf("panics counted: %d, want 1", panics)
	}
	out := logs.String()
	for _, want := range []string{"panicked", "ns/bad", "boom", "goroutine"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestSlowHandlerOnlyGrowsItsOwnBacklog: a blocked handler holds back
// neither the cache nor another handler; only its backlog grows.
// Real time: isolation is real mailboxes and goroutines, one of them
// blocked.
func TestSlowHandlerOnlyGrowsItsOwnBacklog(t *testing.T) {
	src, lw := newSource(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	gate := make(chan struct{})
	var slow, fast atomic.Int64
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) {
		<-gate
		slow.Add(1)
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { fast.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	const n = 200
	for i := 0; i < n; i++ {
		src.Add(pod("ns", fmt.Sprintf("p%d", i), i))
	}
	// The fast handler gets everything while the slow one is stuck on its first.
	eventually(t, 10*time.Second, "fast handler", func() string {
		if fast.Load() != n {
			return fmt.Sprint("fast got ", fast.Load())
		}
		return ""
	})
	var maxBacklog int64
	for _, h := range inf.Stats().Handlers {
		maxBacklog = max(maxBacklog, h.Backlog)
	}
	if slow.Load() != 0 || maxBacklog == 0 {
		t.Fatalf("slow handler delivered %d with max backlog %d; want 0 delivered and a backlog", slow.Load(), maxBacklog)
	}
	close(gate)
	eventually(t, 10*time.Second, "slow handler", func() string {
		if slow.Load() != n {
			return fmt.Sprint("slow got ", slow.Load())
		}
		return ""
	})
}

// TestLateHandler: a handler added to a running informer gets every cached
// object as an initial add, then the changes.
// Real time: AddEventHandler on a running informer goes through the
// supervisor (the late handler's initial batch on every interleaving:
// internal/sim's add, testdata/late_handler.txt).
func TestLateHandler(t *testing.T) {
	for _, objects := range []int{0, 50} {
		t.Run(fmt.Sprint(objects, " objects"), func(t *testing.T) {
			src, lw := newSource(t)
			for i := 0; i < objects; i++ {
				src.Add(pod("ns", fmt.Sprintf("p%d", i), i))
			}
			inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
			ctx, _ := running(t, inf)
			waitSynced(t, ctx, inf.HasSynced)
			v := informertest.NewView()
			reg, err := inf.AddEventHandler(v.Handler())
			if err != nil {
				t.Fatal(err)
			}
			waitSynced(t, ctx, reg.HasSynced)
			if c := v.Counts(); c.Initial != objects || c.Adds != objects {
				t.Fatalf("late handler: %d initial adds of %d adds, want %d", c.Initial, c.Adds, objects)
			}
			src.Add(pod("ns", "after", 99))
			eventually(t, 10*time.Second, "event after sync", func() string {
				return informertest.Diff(sourceSnapshot(t, lw), v.Snapshot())
			})
		})
	}
}

func TestRegistrationHasSyncedWaitsForDelivery(t *testing.T) {
	src, lw := newSource(t)
	for i := 0; i < 20; i++ {
		src.Add(pod("ns", fmt.Sprintf("p%d", i), i))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	gate := make(chan struct{})
	var got atomic.Int64
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(_ any, initial bool) {
		<-gate
		if initial {
			got.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	if reg.HasSynced() {
		t.Fatal("registration synced before its handler got the initial list")
	}
	close(gate)
	waitSynced(t, ctx, reg.HasSynced)
	if got.Load() != 20 {
		t.Fatalf("handler got %d initial adds before HasSynced, want 20", got.Load())
	}
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("HasSyncedChecker not done")
	}
}

// TestRemoveEventHandler: a removed handler gets nothing more, the others
// everything; removing twice is no error, another informer's is.
// Real time: the informer's API (RemoveEventHandler, Stats) on a real actor
// system (removals on every interleaving: internal/sim's remove).
func TestRemoveEventHandler(t *testing.T) {
	src, lw := newSource(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	var removed, kept atomic.Int64
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { removed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { kept.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(pod("ns", "a", 1))
	eventually(t, 10*time.Second, "first add", func() string {
		if removed.Load() != 1 || kept.Load() != 1 {
			return fmt.Sprint(removed.Load(), kept.Load())
		}
		return ""
	})
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatalf("second removal: %v", err)
	}
	for i := 0; i < 10; i++ {
		src.Add(pod("ns", fmt.Sprint("b", i), i))
	}
	eventually(t, 10*time.Second, "kept handler", func() string {
		if kept.Load() != 11 {
			return fmt.Sprint(kept.Load())
		}
		return ""
	})
	if removed.Load() != 1 {
		t.Fatalf("removed handler got %d adds, want 1", removed.Load())
	}
	if len(inf.Stats().Handlers) != 1 {
		t.Fatalf("stats list %d handlers, want 1", len(inf.Stats().Handlers))
	}
	other := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	foreign, _ := other.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{})
	if err := inf.RemoveEventHandler(foreign); err == nil {
		t.Fatal("removing another informer's registration succeeded")
	}
}

// TestTransform: the transform set with SetTransform before Run, or given
// with WithTransform, applies to every object.
// Real time: the informer's API (SetTransform, WithTransform) on a real
// actor system.
func TestTransform(t *testing.T) {
	transform := func(obj any) (any, error) {
		p := obj.(*corev1.Pod).DeepCopy()
		p.Labels = nil
		p.Annotations = map[string]string{"transformed": "yes"}
		return p, nil
	}
	for _, how := range []string{"SetTransform", "WithTransform"} {
		t.Run(how, func(t *testing.T) {
			src, lw := newSource(t)
			src.Add(pod("ns", "a", 1))
			opts := []actors.Option{actors.WithWatchList(false)}
			if how == "WithTransform" {
				opts = append(opts, actors.WithTransform(transform))
			}
			inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, opts...)
			if how == "SetTransform" {
				if err := inf.SetTransform(transform); err != nil {
					t.Fatal(err)
				}
			}
			testTransform(t, src, inf)
		})
	}
}

func testTransform(t *testing.T, src *fcache.FakeControllerSource, inf *actors.SharedIndexInformer) {
	var seen atomic.Int64
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, _ bool) {
			if obj.(*corev1.Pod).Annotations["transformed"] == "yes" {
				seen.Add(1)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(pod("ns", "b", 2))
	eventually(t, 10*time.Second, "transformed adds", func() string {
		if seen.Load() != 2 {
			return fmt.Sprint(seen.Load())
		}
		return ""
	})
	for _, obj := range inf.GetStore().List() {
		if p := obj.(*corev1.Pod); p.Labels != nil || p.Annotations["transformed"] != "yes" {
			t.Fatalf("cached object not transformed: %v", p.ObjectMeta)
		}
	}
	if err := inf.SetTransform(nil); err == nil {
		t.Fatal("SetTransform after start succeeded")
	}
	if err := inf.SetWatchErrorHandler(func(*cache.Reflector, error) {}); err == nil {
		t.Fatal("SetWatchErrorHandler after start succeeded")
	}
}

func TestAddIndexersOnRunningInformer(t *testing.T) {
	src, lw := newSource(t)
	for i := 0; i < 10; i++ {
		src.Add(pod(fmt.Sprint("ns", i%2), fmt.Sprint("p", i), i))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, actors.WithWatchList(false))
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	byIP := func(obj any) ([]string, error) { return []string{obj.(*corev1.Pod).Status.PodIP}, nil }
	if err := inf.AddIndexers(cache.Indexers{"byPodIP": byIP}); err != nil {
		t.Fatal(err)
	}
	got, err := inf.GetIndexer().ByIndex("byPodIP", pod("ns0", "p4", 4).Status.PodIP)
	if err != nil || len(got) != 1 || got[0].(*corev1.Pod).Name != "p4" {
		t.Fatalf("ByIndex after AddIndexers: %v, %v", got, err)
	}
	if err := inf.AddIndexers(cache.Indexers{"byPodIP": byIP}); err == nil {
		t.Fatal("adding an indexer twice succeeded")
	}
	ns0, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns0")
	if err != nil || len(ns0) != 5 {
		t.Fatalf("namespace index: %d objects, %v", len(ns0), err)
	}
	if err := inf.GetIndexer().Add(pod("x", "y", 1)); err == nil {
		t.Fatal("writing to a running informer's cache succeeded")
	}
}

// TestFilteringResourceEventHandler: client-go's filtering handler turns
// updates into adds and deletes as the filter's answer changes.
// Real time: client-go's FilteringResourceEventHandler through our
// informer's call path.
func TestFilteringResourceEventHandler(t *testing.T) {
	src, lw := newSource(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	var mu sync.Mutex
	var calls []string
	record := func(s string) { mu.Lock(); calls = append(calls, s); mu.Unlock() }
	if _, err := inf.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool { return obj.(*corev1.Pod).Labels["pick"] == "yes" },
		Handler: cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, _ bool) { record("add " + obj.(*corev1.Pod).Name) },
			UpdateFunc: func(_, obj any) { record("update " + obj.(*corev1.Pod).Name) },
			DeleteFunc: func(obj any) { record("delete " + informertest.Key(obj)) },
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	p := pod("ns", "a", 1)
	src.Add(p)
	p = p.DeepCopy()
	p.Labels["pick"] = "yes"
	src.Modify(p)
	p = p.DeepCopy()
	p.Labels["x"] = "1"
	src.Modify(p)
	p = p.DeepCopy()
	p.Labels["pick"] = "no"
	src.Modify(p)
	want := []string{"add a", "update a", "delete ns/a"}
	eventually(t, 10*time.Second, "filtered calls", func() string {
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			return fmt.Sprint(calls)
		}
		return ""
	})
}

// TestLifecycle: an informer before, while and after it runs.
// Real time: the informer's API (Run, its stop, IsStopped,
// HasSyncedChecker, LastSyncResourceVersion) on a real actor system.
func TestLifecycle(t *testing.T) {
	src, lw := newSource(t)
	src.Add(pod("ns", "first", 0)) // a list at RV "1": the watch then propagates RVs at once, as in client-go
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	if inf.IsStopped() || inf.HasSynced() {
		t.Fatal("new informer stopped or synced")
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	select {
	case <-inf.HasSyncedChecker().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("HasSyncedChecker not done")
	}
	if inf.GetController().HasSynced() != true {
		t.Fatal("controller view not synced")
	}
	src.Add(pod("ns", "a", 1))
	eventually(t, 10*time.Second, "rv", func() string {
		if inf.LastSyncResourceVersion() != "2" {
			return inf.LastSyncResourceVersion()
		}
		return ""
	})
	stop()
	if !inf.IsStopped() {
		t.Fatal("not stopped after Run returned")
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{}); err == nil {
		t.Fatal("AddEventHandler on a stopped informer succeeded")
	}
	returned := make(chan struct{})
	go func() { inf.Run(make(chan struct{})); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("second Run did not return")
	}
}

// TestForbiddenListReportsAndNeverSyncs: a forbidden list reaches the
// watch error handler set with SetWatchErrorHandler and Stats, and the
// informer has not synced. Real time: the informer's API on a real actor
// system; the retries, and that it never syncs, run on the fake clock in
// internal/sim's TestForbiddenListNeverSyncs.
func TestForbiddenListReportsAndNeverSyncs(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no list rights"))
	lw := &cache.ListWatch{
		ListFunc:  func(metav1.ListOptions) (runtime.Object, error) { return nil, forbidden },
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return nil, forbidden },
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	errs := make(chan error, 100)
	if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		select {
		case errs <- err:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	running(t, inf)
	select {
	case err := <-errs:
		if !apierrors.IsForbidden(err) {
			t.Fatalf("watch error handler got %v, want forbidden", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch error handler not called")
	}
	if inf.HasSynced() {
		t.Fatal("synced despite a forbidden list")
	}
	if inf.Stats().WatchErrors == 0 {
		t.Fatal("watch errors not counted")
	}
}

func TestNamedHandlersInStats(t *testing.T) {
	_, lw := newSource(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	for _, name := range []string{"first", "second", "third"} {
		if _, err := inf.AddEventHandler(actors.NamedHandler(name, cache.ResourceEventHandlerFuncs{})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inf.AddContextEventHandler(actors.NamedContextHandler("fourth", actors.ContextEventHandlerFuncs{})); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range inf.Stats().Handlers {
		names = append(names, h.Name)
	}
	if fmt.Sprint(names) != "[first second third fourth]" {
		t.Fatalf("handlers in Stats: %v", names)
	}
}

// TestStopDoesNotWaitForABacklog: stopping drops what a slow handler has not
// taken yet, as client-go's listeners do, instead of delivering all of it.
// Real time: stopping real actors while a handler blocks its goroutine.
func TestStopDoesNotWaitForABacklog(t *testing.T) {
	src, lw := newSource(t)
	for i := 0; i < 100; i++ {
		src.Add(pod("ns", fmt.Sprint("p", i), i))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	gate := make(chan struct{})
	var calls atomic.Int64
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) {
		if calls.Add(1) == 1 {
			<-gate
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	eventually(t, 10*time.Second, "first call", func() string {
		if calls.Load() == 0 {
			return "handler not called yet"
		}
		return ""
	})
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	eventually(t, 10*time.Second, "stopping", func() string {
		if !inf.IsStopped() {
			return "not stopping"
		}
		return ""
	})
	close(gate)
	<-stopped
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times after its informer stopped, want only the one in progress", n)
	}
}

// TestLaggingHandlerGetsEveryEventInOrder holds one handler back while
// thousands of updates arrive one at a time (small batches, which the
// indexer compacts for a listener that far behind), then lets it go: it
// must see every event, in order (its view checks each update's old
// resourceVersion against the one it holds), like the handler that kept up.
// Real time: the DrainMarker/Drained handshake between the real indexer and
// listener actors (compaction on every interleaving: internal/sim's seeds
// with a slow handler).
func TestLaggingHandlerGetsEveryEventInOrder(t *testing.T) {
	src, lw := newSource(t)
	const objects, updates = 30, 3000
	for i := range objects {
		src.Add(pod("ns", fmt.Sprintf("p%d", i), 0))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	gate := make(chan struct{})
	slowView, fastView := informertest.NewView(), informertest.NewView()
	sh := slowView.Handler()
	held := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { <-gate; sh.AddFunc(obj, initial) },
		UpdateFunc: func(old, obj any) { <-gate; sh.UpdateFunc(old, obj) },
		DeleteFunc: func(obj any) { <-gate; sh.DeleteFunc(obj) },
	}
	fastUpdated := make(chan struct{}, updates)
	fh := fastView.Handler()
	fast := fh
	fast.UpdateFunc = func(old, obj any) { fh.UpdateFunc(old, obj); fastUpdated <- struct{}{} }
	if _, err := inf.AddEventHandler(held); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(fast); err != nil {
		t.Fatal(err)
	}
	ctx, _ := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	for i := range updates {
		src.Modify(pod("ns", fmt.Sprintf("p%d", i%objects), i+1))
		// One event at a time through the pipeline: small batches.
		select {
		case <-fastUpdated:
		case <-time.After(10 * time.Second):
			t.Fatalf("the fast handler did not get update %d", i+1)
		}
	}
	var slowBacklog int64
	for _, h := range inf.Stats().Handlers {
		slowBacklog = max(slowBacklog, h.Backlog)
	}
	if slowBacklog < updates {
		t.Fatalf("held handler's backlog %d, want at least %d", slowBacklog, updates)
	}
	close(gate)
	informertest.Eventually(t, 20*time.Second, 10*time.Millisecond, "held handler", func() string {
		return informertest.Diff(fastView.Snapshot(), slowView.Snapshot())
	})
	for name, v := range map[string]*informertest.View{"held": slowView, "fast": fastView} {
		if errs := v.Errors(); len(errs) > 0 {
			t.Fatalf("%s handler saw inconsistent events: %v", name, errs)
		}
	}
	if c := slowView.Counts(); c.Updates != updates {
		t.Fatalf("held handler got %d updates, want %d", c.Updates, updates)
	}
	if d := informertest.Diff(sourceSnapshot(t, lw), slowView.Snapshot()); d != "" {
		t.Fatalf("held handler's view differs from the source: %s", d)
	}
	for _, h := range inf.Stats().Handlers {
		if h.Backlog != 0 {
			t.Fatalf("handler %s backlog %d after catching up", h.Name, h.Backlog)
		}
	}
}
