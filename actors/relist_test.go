package actors_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// Side-by-side tests of the store's resource version and of relists: the
// same script runs on client-go's informer and on ours.

// listScript is a ListerWatcher whose lists the test sets (one at a time:
// every List returns the current one) and whose watches the test drives:
// each Watch call hands a new FakeWatcher to the test through watches.
type listScript struct {
	mu      sync.Mutex
	list    *corev1.PodList
	watches chan *watch.FakeWatcher
}

func newListScript(list *corev1.PodList) *listScript {
	return &listScript{list: list, watches: make(chan *watch.FakeWatcher, 16)}
}

func (s *listScript) setList(l *corev1.PodList) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = l
}

func (s *listScript) List(metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list.DeepCopy(), nil
}

func (s *listScript) Watch(metav1.ListOptions) (watch.Interface, error) {
	w := watch.NewFake()
	s.watches <- w
	return w, nil
}

// Both informers list instead of streaming the list (WatchList).
func (*listScript) IsWatchListSemanticsUnSupported() bool { return true }

func (s *listScript) nextWatch(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-s.watches:
		return w
	case <-time.After(30 * time.Second):
		t.Fatal("no watch started")
		return nil
	}
}

// expired is the watch error that makes an informer relist.
func expired() *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
}

func rvPod(name, rv string, gen int) *corev1.Pod {
	p := pod("ns", name, gen)
	p.ResourceVersion = rv
	return p
}

func podList(rv string, pods ...*corev1.Pod) *corev1.PodList {
	l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, p := range pods {
		l.Items = append(l.Items, *p)
	}
	return l
}

// sideBySide is one informer of each kind, each on its own listScript.
type sideBySide struct {
	names []string // "client-go", "actors"
	lws   []*listScript
	infs  []cache.SharedIndexInformer
}

func newSideBySide(t *testing.T, first *corev1.PodList, indexers cache.Indexers) *sideBySide {
	t.Helper()
	sb := &sideBySide{names: []string{"client-go", "actors"}}
	for i := range 2 {
		lw := newListScript(first)
		sb.lws = append(sb.lws, lw)
		if i == 0 {
			sb.infs = append(sb.infs, cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, indexers))
		} else {
			sb.infs = append(sb.infs, actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, indexers, actors.WithWatchList(false)))
		}
	}
	return sb
}

// run starts both informers, waits for them to sync and to open their
// watches, and returns the watches.
func (sb *sideBySide) run(t *testing.T) []*watch.FakeWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, inf := range sb.infs {
		wg.Add(1)
		go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
	}
	for _, inf := range sb.infs {
		waitSynced(t, ctx, inf.HasSynced)
	}
	ws := make([]*watch.FakeWatcher, len(sb.lws))
	for i, lw := range sb.lws {
		ws[i] = lw.nextWatch(t)
	}
	return ws
}

// storeRVs returns each informer's LastStoreSyncResourceVersion.
func (sb *sideBySide) storeRVs() []string {
	rvs := make([]string, len(sb.infs))
	for i, inf := range sb.infs {
		rvs[i] = inf.GetStore().LastStoreSyncResourceVersion()
	}
	return rvs
}

// expectRV waits until both stores report rv.
func (sb *sideBySide) expectRV(t *testing.T, what, rv string) {
	t.Helper()
	eventually(t, 10*time.Second, what, func() string {
		if rvs := sb.storeRVs(); rvs[0] != rv || rvs[1] != rv {
			return fmt.Sprintf("store RVs client-go %q, actors %q; want %q", rvs[0], rvs[1], rv)
		}
		return ""
	})
}

// TestStoreResourceVersionSideBySide: the store's resource version is the
// list's once the informer has synced (not that of an item), moves with
// watch events and bookmarks, and is the relist's after a relist.
// Real time: side by side with client-go's informer, which takes no clock.
func TestStoreResourceVersionSideBySide(t *testing.T) {
	t.Run("list RV, not the last item's", func(t *testing.T) {
		sb := newSideBySide(t, podList("10", rvPod("a", "5", 1), rvPod("b", "3", 1)), nil)
		sb.run(t)
		// Read as soon as HasSynced is true: the list's version is in the
		// store by then.
		if rvs := sb.storeRVs(); rvs[0] != "10" || rvs[1] != "10" {
			t.Fatalf("after sync: store RVs client-go %q, actors %q; want 10", rvs[0], rvs[1])
		}
	})
	t.Run("empty list", func(t *testing.T) {
		sb := newSideBySide(t, podList("7"), nil)
		sb.run(t)
		if rvs := sb.storeRVs(); rvs[0] != "7" || rvs[1] != "7" {
			t.Fatalf("after sync: store RVs client-go %q, actors %q; want 7", rvs[0], rvs[1])
		}
	})
	t.Run("watch events and bookmarks", func(t *testing.T) {
		sb := newSideBySide(t, podList("10", rvPod("a", "5", 1), rvPod("b", "3", 1)), nil)
		ws := sb.run(t)
		for _, w := range ws {
			w.Modify(rvPod("a", "11", 2))
		}
		sb.expectRV(t, "watch update", "11")

		// A bookmark moves the store's version once the informer runs.
		for _, w := range ws {
			w.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "20"}})
		}
		sb.expectRV(t, "bookmark after sync", "20")

		// A watch delete moves it to the deleted object's version.
		for _, w := range ws {
			w.Delete(rvPod("b", "21", 1))
		}
		sb.expectRV(t, "watch delete", "21")
	})
	t.Run("relist", func(t *testing.T) {
		sb := newSideBySide(t, podList("10", rvPod("a", "5", 1), rvPod("b", "3", 1)), nil)
		ws := sb.run(t)
		// A relist (410) sets it to the relist's version, although the
		// relist has items of other versions and tombstones.
		for i, lw := range sb.lws {
			lw.setList(podList("30", rvPod("c", "25", 1), rvPod("d", "22", 1)))
			ws[i].Error(expired())
		}
		sb.expectRV(t, "relist", "30")
		for i, inf := range sb.infs {
			if keys := sortedKeys(inf.GetStore()); keys != "ns/c,ns/d" {
				t.Errorf("%s: cache %s after the relist", sb.names[i], keys)
			}
		}
	})
}

func sortedKeys(s cache.Store) string {
	keys := s.ListKeys()
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// recorder records a handler's calls.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) handler() cache.ResourceEventHandler {
	key := func(obj any) string {
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return k
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { r.record("add " + key(obj)) },
		UpdateFunc: func(_, obj any) { r.record("update " + key(obj)) },
		DeleteFunc: func(obj any) { r.record("delete " + key(obj)) },
	}
}

// TestRelistHandlerOrderSideBySide: a relist reaches handlers as client-go
// v0.37 delivers it: the deletes (tombstones) first, then the updates and
// adds in list order.
// Real time: side by side with client-go's informer, which takes no clock.
func TestRelistHandlerOrderSideBySide(t *testing.T) {
	var first []*corev1.Pod
	for i := range 10 {
		first = append(first, rvPod(fmt.Sprintf("p%d", i), fmt.Sprint(i+1), 1))
	}
	sb := newSideBySide(t, podList("10", first...), nil)
	recs := []*recorder{{}, {}}
	for i, inf := range sb.infs {
		if _, err := inf.AddEventHandler(recs[i].handler()); err != nil {
			t.Fatal(err)
		}
	}
	ws := sb.run(t)
	eventually(t, 10*time.Second, "initial adds", func() string {
		for i, r := range recs {
			if n := len(r.snapshot()); n != len(first) {
				return fmt.Sprintf("%s: %d calls, want %d adds", sb.names[i], n, len(first))
			}
		}
		return ""
	})

	// The relist: p2, p5, p7 are gone, p3 changed, p10 is new, and the list
	// comes in reverse order.
	var second []*corev1.Pod
	for i := 10; i >= 0; i-- {
		switch i {
		case 2, 5, 7:
			continue
		case 3:
			second = append(second, rvPod("p3", "30", 2))
		case 10:
			second = append(second, rvPod("p10", "31", 1))
		default:
			second = append(second, first[i])
		}
	}
	for i, lw := range sb.lws {
		lw.setList(podList("40", second...))
		ws[i].Error(expired())
	}
	want := 3 + len(second)
	eventually(t, 20*time.Second, "relist notifications", func() string {
		for i, r := range recs {
			if n := len(r.snapshot()) - len(first); n < want {
				return fmt.Sprintf("%s: %d calls, want %d", sb.names[i], n, want)
			}
		}
		return ""
	})

	var wantRest []string
	for _, p := range second {
		op := "update "
		if p.Name == "p10" {
			op = "add "
		}
		wantRest = append(wantRest, op+"ns/"+p.Name)
	}
	for i, r := range recs {
		calls := r.snapshot()[len(first):]
		if len(calls) != want {
			t.Fatalf("%s: calls %v, want %d", sb.names[i], calls, want)
		}
		// client-go's deletes come in its cache's key order (a map's), so
		// the test compares them as a set.
		deletes := slices.Clone(calls[:3])
		slices.Sort(deletes)
		if !slices.Equal(deletes, []string{"delete ns/p2", "delete ns/p5", "delete ns/p7"}) {
			t.Errorf("%s: first calls %v, want the three deletes", sb.names[i], calls[:3])
		}
		if !slices.Equal(calls[3:], wantRest) {
			t.Errorf("%s: calls after the deletes\n got  %v\n want %v (list order)", sb.names[i], calls[3:], wantRest)
		}
	}
}

// TestRelistAtomicForReadersSideBySide: a reader polling the lister during
// a large relist sees the old generation or the new one, never a mix (nor a
// relist's deletes without its updates).
// Real time: side by side with client-go's informer, which takes no clock.
// (Readers race a real relist.)
func TestRelistAtomicForReadersSideBySide(t *testing.T) {
	const n = 10000
	var first, second []*corev1.Pod
	for i := range n {
		name := fmt.Sprintf("p%05d", i)
		first = append(first, rvPod(name, fmt.Sprint(i+1), 1))
		if i%10 != 0 { // every tenth is deleted by the relist
			second = append(second, rvPod(name, fmt.Sprint(n+i+1), 2))
		}
	}
	for i := range n / 10 { // and as many are new
		second = append(second, rvPod(fmt.Sprintf("q%05d", i), fmt.Sprint(2*n+i+1), 2))
	}
	sb := newSideBySide(t, podList(fmt.Sprint(n), first...), nil)
	ws := sb.run(t)

	type view struct{ gen1, gen2 int }
	look := func(s cache.Store) view {
		var v view
		for _, obj := range s.List() {
			if obj.(*corev1.Pod).Labels["gen"] == "1" {
				v.gen1++
			} else {
				v.gen2++
			}
		}
		return v
	}
	for i, inf := range sb.infs {
		if v := look(inf.GetStore()); v.gen1 != n || v.gen2 != 0 {
			t.Fatalf("%s: after sync %+v", sb.names[i], v)
		}
	}

	var wg sync.WaitGroup
	var mixed [2]atomic.Value
	var reads [2]atomic.Int64
	for i, inf := range sb.infs {
		started := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(func() { close(started) })
			for {
				v := look(inf.GetStore())
				reads[i].Add(1)
				once()
				if v.gen1 > 0 && v.gen2 > 0 || v.gen1 > 0 && v.gen1 != n || v.gen2 > 0 && v.gen2 != len(second) {
					mixed[i].CompareAndSwap(nil, fmt.Sprintf("%+v", v))
				}
				if v.gen2 == len(second) && v.gen1 == 0 {
					return // the relist is applied
				}
			}
		}()
		<-started
	}
	for i, lw := range sb.lws {
		lw.setList(podList(fmt.Sprint(3*n), second...))
		ws[i].Error(expired())
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("relist not applied")
	}
	for i := range sb.infs {
		if m := mixed[i].Load(); m != nil {
			t.Errorf("%s: a reader saw a mixed generation: %v (%d reads)", sb.names[i], m, reads[i].Load())
		}
	}
}
