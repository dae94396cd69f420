package shard_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
)

// These tests run one cluster member at a time, so they run with -race.

func TestBadInput(t *testing.T) {
	c, prov := startCluster(newGroup(t, nil).agent)
	defer stopCluster(c, prov)
	src := newMemServer()
	for _, tc := range []struct {
		name  string
		group string
		opts  []shard.Option
		want  string
	}{
		{"empty group", "", nil, "empty group name"},
		{"blank group", "  ", nil, "empty group name"},
		{"group name too long for a label", strings.Repeat("g", 64), nil, "not a label value"},
		{"group name with a slash", "team/configmaps", nil, "not a label value"},
		{"no ranges", "g", []shard.Option{shard.WithRanges(0)}, "0 ranges"},
		{"too many ranges", "g", []shard.Option{shard.WithRanges(shard.MaxRanges + 1)}, "ranges"},
		{"unknown field", "g", []shard.Option{shard.WithHashField("object.metadata.name")}, "unknown hash field"},
	} {
		_, err := shard.New(c, tc.group, src, &corev1.ConfigMap{}, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := shard.New(c, "g", nil, &corev1.ConfigMap{}); err == nil {
		t.Error("nil ListerWatcher accepted")
	}
	if _, err := shard.New(c, "g", src, &corev1.ConfigMap{}); err == nil || !strings.Contains(err.Error(), "WithLeases") {
		t.Errorf("no leases: %v; want an error saying to pass WithLeases", err)
	}
	lease := testLeases()
	if _, err := shard.New(c, "g", src, &corev1.ConfigMap{}, append(lease, shard.WithLeaseTimings(time.Second, 2*time.Second, 100*time.Millisecond))...); err == nil || !strings.Contains(err.Error(), "renew deadline") {
		t.Errorf("renew deadline above the lease duration: %v", err)
	}
	inf, err := shard.New(c, "dup", src, &corev1.ConfigMap{}, lease...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shard.New(c, "dup", src, &corev1.ConfigMap{}, lease...); err == nil || !strings.Contains(err.Error(), "already has an informer") {
		t.Errorf("duplicate group: %v", err)
	}
	// Once the first one has run and stopped, the name is free again.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	inf.RunWithContext(ctx)
	if _, err := shard.New(c, "dup", src, &corev1.ConfigMap{}, lease...); err != nil {
		t.Errorf("after the first stopped: %v", err)
	}
}

// runOne runs one member over src with a handler; stop with the returned
// function.
func runOne(t *testing.T, src *memServer, h cache.ResourceEventHandler, opts ...shard.Option) (*shard.Informer, func()) {
	t.Helper()
	c, prov := startCluster(newGroup(t, nil).agent)
	opts = append(append(testLeases(), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler)))), opts...)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if h != nil {
		if _, err := inf.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	return inf, runUntilStop(t, inf, c, prov)
}

// runUntilStop runs inf and returns what stops it and its cluster; a test that
// fails before it stops the member still stops it: its cluster would
// outlive it and race with the next test's.
func runUntilStop(t *testing.T, inf *shard.Informer, c *cluster.Cluster, prov *test.Provider) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("Run did not return")
			}
			stopCluster(c, prov)
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestOneMemberDeliversEveryRange(t *testing.T) {
	src := newMemServer()
	for i := range 100 {
		src.create(fmt.Sprintf("o%d", i))
	}
	v := &orderCheck{acquired: map[int]bool{}}
	inf, stop := runOne(t, src, v, shard.WithRanges(8), shard.WithIndexers(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	if n := len(inf.Ranges()); n != 8 {
		t.Fatalf("%d ranges delivered, want 8", n)
	}
	eventually(t, 10*time.Second, "handler has every object", func() string {
		if n := int(v.adds.Load()); n != 100 {
			return fmt.Sprintf("%d adds", n)
		}
		return ""
	})
	lister := corev1listers.NewConfigMapLister(inf.GetIndexer())
	all, err := lister.List(everything())
	if err != nil || len(all) != 100 {
		t.Fatalf("lister: %d objects, %v", len(all), err)
	}
	inNs, err := lister.ConfigMaps("ns1").List(everything())
	if err != nil || len(inNs) == 0 || len(inNs) >= 100 {
		t.Fatalf("namespace lister: %d objects, %v", len(inNs), err)
	}
	cm, err := lister.ConfigMaps(all[0].Namespace).Get(all[0].Name)
	if err != nil || cm.UID != all[0].UID {
		t.Fatalf("Get: %v", err)
	}
	if !inf.Owns(cm) {
		t.Error("Owns is false for a delivered object")
	}
	if inf.Released(all[0].Namespace + "/" + all[0].Name) {
		t.Error("Released is true for a delivered key")
	}
	if err := inf.GetIndexer().Add(cm); err == nil {
		t.Error("the cache accepted a write")
	}
	st := inf.Status()
	if st.Mode != shard.FilterClient || st.Filtered == 0 {
		t.Errorf("mode %s with %d filtered, want client mode: the source ignores selectors", st.Mode, st.Filtered)
	}
	stop()
	if errs := v.errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	// Leaving with nobody to hand over to: every range is released.
	if n := v.released.Load(); n != 8 {
		t.Errorf("%d ranges released on leave, want 8", n)
	}
	if len(inf.Ranges()) != 0 || len(inf.GetIndexer().List()) != 0 {
		t.Error("ranges still delivered after Run returned")
	}
	noLeaks(t)
}

// orderCheck checks that OnAcquire comes before the range's objects, and
// that no two calls overlap.
type orderCheck struct {
	mu       sync.Mutex
	acquired map[int]bool
	errs     []string
	busy     atomic.Int32
	adds     atomic.Int32
	released atomic.Int32
	inf      *shard.Informer
}

func (o *orderCheck) enter() func() {
	if o.busy.Add(1) != 1 {
		o.fail("two calls at once")
	}
	return func() { o.busy.Add(-1) }
}

func (o *orderCheck) fail(s string) {
	o.mu.Lock()
	o.errs = append(o.errs, s)
	o.mu.Unlock()
}

func (o *orderCheck) errors() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errs
}

func (o *orderCheck) OnAcquire(r shard.Range, _ uint64) {
	defer o.enter()()
	o.mu.Lock()
	o.acquired[r.Index] = true
	o.mu.Unlock()
}

func (o *orderCheck) OnRelease(r shard.Range) {
	defer o.enter()()
	o.released.Add(1)
	o.mu.Lock()
	delete(o.acquired, r.Index)
	o.mu.Unlock()
}

func (o *orderCheck) OnAdd(obj any, initial bool) {
	defer o.enter()()
	time.Sleep(100 * time.Microsecond) // widen the window for overlaps
	o.adds.Add(1)
	if !initial {
		o.fail("an add of the initial objects is not isInInitialList")
	}
	cm := obj.(*corev1.ConfigMap)
	r := shard.Range{Index: int(shard.Hash(string(cm.UID)) >> 61), Count: 8} // 8 ranges: the top 3 bits
	o.mu.Lock()
	ok := o.acquired[r.Index]
	o.mu.Unlock()
	if !ok {
		o.fail(fmt.Sprintf("OnAdd of %s before OnAcquire of range %d", cm.Name, r.Index))
	}
}

func (o *orderCheck) OnUpdate(_, _ any) { defer o.enter()() }
func (o *orderCheck) OnDelete(_ any)    { defer o.enter()() }

func TestServerSideFilterMode(t *testing.T) {
	src := newMemServer()
	src.filter = true
	for i := range 50 {
		src.create(fmt.Sprintf("o%d", i))
	}
	// The default lease timings: a member fenced on a loaded machine
	// would list its ranges again as a new incarnation, rightly.
	inf, stop := runOne(t, src, nil, defaultLeaseTimings())
	defer stop()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	st := inf.Status()
	if st.Mode != shard.FilterServer || st.Filtered != 0 {
		t.Fatalf("mode %s, %d filtered; want server mode", st.Mode, st.Filtered)
	}
	if n := len(inf.GetIndexer().ListKeys()); n != 50 {
		t.Fatalf("%d cached, want 50", n)
	}
	checkView(t, inf.GetIndexer(), 50)
	src.mu.Lock()
	sent := src.sent
	src.mu.Unlock()
	if sent != 50 {
		t.Fatalf("the server sent %d objects for 50: the ranges' lists overlap (rejoins %d, fenced %q)", sent, st.Rejoins, st.Fenced)
	}
}

// A server that refuses shardSelector: the member lists without it, filters
// on the client, and says so once.
func TestServerRejectingSelectorsFallsBack(t *testing.T) {
	src := newMemServer()
	src.rejectSelectors = true
	for i := range 50 {
		src.create(fmt.Sprintf("o%d", i))
	}
	var logs syncBuffer
	c, prov := startCluster(newGroup(t, nil).agent)
	defer stopCluster(c, prov)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{}, append(testLeases(),
		shard.WithInformerOptions(actors.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	if st := inf.Status(); st.Mode != shard.FilterClient {
		t.Fatalf("mode %s, want client", st.Mode)
	}
	if n := len(inf.GetIndexer().ListKeys()); n != 50 {
		t.Fatalf("%d cached, want 50", n)
	}
	cancel()
	<-done
	noLeaks(t)
	if n := strings.Count(logs.String(), "shard selectors are not applied by the API server"); n != 1 {
		t.Fatalf("the fallback was logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "rejects shardSelector") {
		t.Fatalf("the log line does not say why:\n%s", logs.String())
	}
}

// client-go's fake clientset ignores shard selectors: the member filters.
func TestFakeClientset(t *testing.T) {
	client := fake.NewClientset()
	for i := range 40 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("o%d", i), UID: types.UID(fmt.Sprintf("u%d", i))}}
		if _, err := client.CoreV1().ConfigMaps("ns").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().ConfigMaps("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().ConfigMaps("").Watch(ctx, o)
		},
	}
	c, prov := startCluster(newGroup(t, nil).agent)
	defer stopCluster(c, prov)
	inf, err := shard.New(c, "configmaps", lw, &corev1.ConfigMap{}, append(testLeases(), shard.WithRanges(4),
		shard.WithInformerOptions(actors.WithWatchList(false), actors.WithLogger(slog.New(slog.DiscardHandler))))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	if n := len(inf.GetIndexer().ListKeys()); n != 40 {
		t.Fatalf("%d cached, want 40, each once", n)
	}
	if st := inf.Status(); st.Mode != shard.FilterClient || st.Filtered != 3*40 {
		t.Fatalf("mode %s, %d filtered; want client mode, 3 of 4 ranges' lists dropped (120)", st.Mode, st.Filtered)
	}
	if _, err := client.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late", UID: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the created object is cached once", func() string {
		if n := len(inf.GetIndexer().ListKeys()); n != 41 {
			return fmt.Sprintf("%d cached", n)
		}
		return ""
	})
}

func everything() labels.Selector { return labels.Everything() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A handler may call its informer from its calls, OnAcquire and OnRelease
// included.
func TestHandlerCallsTheInformer(t *testing.T) {
	src := newMemServer()
	for i := range 40 {
		src.create(fmt.Sprintf("o%d", i))
	}
	var inf *shard.Informer
	var ready sync.WaitGroup
	ready.Add(1)
	var calls atomic.Int32
	use := func() {
		ready.Wait()
		_ = inf.Status()
		_ = inf.Released("ns0/o1")
		_ = inf.Ranges()
		calls.Add(1)
	}
	h := shard.OwnershipFuncs{
		ResourceEventHandler: cache.ResourceEventHandlerFuncs{AddFunc: func(any) { use() }},
		AcquireFunc:          func(shard.Range, uint64) { use() },
		ReleaseFunc:          func(shard.Range) { use() },
	}
	c, prov := startCluster(newGroup(t, nil).agent)
	defer stopCluster(c, prov)
	var err error
	inf, err = shard.New(c, "configmaps", src, &corev1.ConfigMap{}, append(testLeases(), shard.WithRanges(8),
		shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))...)
	if err != nil {
		t.Fatal(err)
	}
	ready.Done()
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced: a handler calling the informer blocked it")
	}
	eventually(t, 10*time.Second, "the handler's calls", func() string {
		if n := calls.Load(); n < 48 {
			return fmt.Sprintf("%d calls", n)
		}
		return ""
	})
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return: a handler calling the informer blocked the leave")
	}
	if n := calls.Load(); n != 40+8+8 {
		t.Errorf("%d calls, want 40 adds, 8 acquires and 8 releases", n)
	}
}

// An ownership handler hears which ranges the member delivers, in order
// with the other handlers' calls (OnAcquire before a range's first call,
// OnRelease after its last), and no range's informer gets a listener for
// it.
func TestOwnershipHandlerGetsNoListener(t *testing.T) {
	src := newMemServer()
	for i := range 40 {
		src.create(fmt.Sprintf("o%d", i))
	}
	c, prov := startCluster(newGroup(t, nil).agent)
	defer stopCluster(c, prov)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{}, append(testLeases(), shard.WithRanges(8),
		shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))...)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []string
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf(format, args...))
	}
	ownership := func(who string) shard.OwnershipFuncs {
		return shard.OwnershipFuncs{
			AcquireFunc: func(r shard.Range, _ uint64) { note("%s acquire %d", who, r.Index) },
			ReleaseFunc: func(r shard.Range) { note("%s release %d", who, r.Index) },
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		r, err := inf.RangeOf(obj)
		if err != nil {
			t.Error(err)
		}
		note("handler add %d", r.Index)
	}}); err != nil {
		t.Fatal(err)
	}
	own, err := inf.AddOwnershipHandler(ownership("early"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddOwnershipHandler(nil); err == nil {
		t.Error("AddOwnershipHandler(nil) took it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced, own.HasSynced) {
		t.Fatal("not synced")
	}
	eventually(t, 10*time.Second, "every range delivered", func() string {
		if n := len(inf.Ranges()); n != 8 {
			return fmt.Sprintf("%d ranges", n)
		}
		return ""
	})
	if _, err := inf.AddOwnershipHandler(ownership("late")); err != nil {
		t.Fatal(err)
	}
	if n := shard.RangeListeners(inf); n != 8 {
		t.Errorf("%d listeners on the range informers, want 8: the event handler's only", n)
	}
	if hs := inf.Stats().Handlers; len(hs) != 1 {
		t.Errorf("Stats lists %d handlers, want the event handler alone: %+v", len(hs), hs)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	for r := range 8 {
		at := func(e string) []int {
			var is []int
			for i, got := range events {
				if got == fmt.Sprintf(e, r) {
					is = append(is, i)
				}
			}
			return is
		}
		adds := at("handler add %d")
		for _, who := range []string{"early", "late"} {
			acq, rel := at(who+" acquire %d"), at(who+" release %d")
			if len(acq) != 1 || len(rel) != 1 {
				t.Fatalf("range %d: %s heard %d acquires and %d releases, want 1 each: %q", r, who, len(acq), len(rel), events)
			}
			if len(adds) > 0 && (who == "early" && acq[0] > adds[0] || rel[0] < adds[len(adds)-1]) {
				t.Errorf("range %d: %s's acquire at %d, release at %d, the handler's adds at %v", r, who, acq[0], rel[0], adds)
			}
		}
	}
}

// checkView checks the view over the delivered ranges' caches: its length,
// List and ListKeys agree, and each of them allocates its one slice.
func checkView(t *testing.T, ix cache.Indexer, want int) {
	t.Helper()
	if n := ix.(interface{ Len() int }).Len(); n != want {
		t.Fatalf("Len %d, want %d", n, want)
	}
	keys := ix.ListKeys()
	var fromList []string
	for _, obj := range ix.List() {
		k, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			t.Fatal(err)
		}
		fromList = append(fromList, k)
	}
	slices.Sort(keys)
	slices.Sort(fromList)
	if len(keys) != want || !slices.Equal(keys, fromList) || len(slices.Compact(slices.Clone(keys))) != want {
		t.Fatalf("ListKeys %d keys, List %d objects, want %d, the same and distinct", len(keys), len(fromList), want)
	}
	if a := testing.AllocsPerRun(5, func() { _ = ix.ListKeys() }); a != 1 {
		t.Errorf("ListKeys allocated %v times, want 1: one slice for every range's keys", a)
	}
	if a := testing.AllocsPerRun(5, func() { _ = ix.List() }); a != 1 {
		t.Errorf("List allocated %v times, want 1", a)
	}
}
