package indexer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
)

func parityIndexers() cache.Indexers {
	return cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"labels":             labelValues,
	}
}

// world generates random pods over a small key space, so that keys, index
// values and resource versions collide often.
type world struct {
	rng  *rand.Rand
	objs []*corev1.Pod // every object ever made
}

var (
	worldNamespaces = []string{"a", "b", "c", ""}
	worldLabels     = [][2]string{{"app", "x"}, {"app", "y"}, {"tier", "web"}, {"tier", "db"}, {"env", "prod"}}
)

func (w *world) pod() *corev1.Pod {
	p := podIP(worldNamespaces[w.rng.IntN(len(worldNamespaces))], "p"+strconv.Itoa(w.rng.IntN(20)),
		strconv.Itoa(1+w.rng.IntN(4)), fmt.Sprintf("10.0.0.%d", w.rng.IntN(6)))
	if n := w.rng.IntN(4); n > 0 {
		p.Labels = map[string]string{}
		for range n {
			l := worldLabels[w.rng.IntN(len(worldLabels))]
			p.Labels[l[0]] = l[1]
		}
	}
	w.objs = append(w.objs, p)
	return p
}

func (w *world) old() *corev1.Pod {
	if len(w.objs) == 0 {
		return w.pod()
	}
	return w.objs[w.rng.IntN(len(w.objs))]
}

func (w *world) keys() []string {
	var ks []string
	for _, ns := range worldNamespaces {
		for i := range 20 {
			ks = append(ks, key(pod(ns, "p"+strconv.Itoa(i), "")))
		}
	}
	return ks
}

// refApply is client-go's processDeltas + sharedIndexInformer.OnAdd/OnUpdate/
// OnDelete on a client-go indexer: what the core must do.
func refApply(ref cache.Indexer, deltas []fifo.Delta) []expected {
	var out []expected
	for _, d := range deltas {
		var n Notification
		// client-go's AtomicFIFO informer never writes Replaced or Sync
		// deltas through Add/Update: a list is a ReplacedAll, which takes
		// the list's version (our queue ends a list with a Bookmark), and a
		// resync is a SyncAll, which writes nothing. So neither moves the
		// store's version.
		keepRV := d.Type == fifo.Replaced || d.Type == fifo.Sync
		rv := ref.LastStoreSyncResourceVersion()
		switch d.Type {
		case fifo.Bookmark:
			ref.Bookmark(d.BookmarkRV())
			continue
		case fifo.Deleted:
			if err := ref.Delete(d.Object); err != nil {
				panic(err)
			}
			n = Notification{Type: NotifyDelete, New: d.Object, InitialList: d.InitialList}
		default:
			if old, exists, err := ref.Get(d.Object); err == nil && exists {
				_ = ref.Update(d.Object)
				// As sharedIndexInformer.OnUpdate: a resync if both have the same RV.
				sync := false
				if nm, err := meta.Accessor(d.Object); err == nil {
					if om, err := meta.Accessor(old); err == nil {
						sync = nm.GetResourceVersion() == om.GetResourceVersion()
					}
				}
				n = Notification{Type: NotifyUpdate, Old: old, New: d.Object, Sync: sync}
			} else {
				_ = ref.Add(d.Object)
				n = Notification{Type: NotifyAdd, New: d.Object, InitialList: d.InitialList}
			}
		}
		if keepRV {
			ref.Bookmark(rv)
		}
		out = append(out, summarize([]Notification{n})...)
	}
	return out
}

// TestStoreParity runs the same random writes on our Store (through its
// cache.Indexer methods and through the Core) and on client-go's indexer, and
// compares every read after every step.
func TestStoreParity(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := &world{rng: rand.New(rand.NewPCG(seed, 42))}
			ours := NewStore(nil, parityIndexers())
			core := NewCore(ours.Writer(), Config{})
			core.subscribe(&Subscribe{ID: 1})
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, parityIndexers())
			universe := w.keys()

			const steps = 2000
			for step := range steps {
				var op string
				switch r := w.rng.IntN(100); {
				case step == steps/3:
					op = "addIndexers"
					idx := cache.Indexers{"byIP": podIPIndex}
					compareErr(t, step, ours.AddIndexers(idx), ref.AddIndexers(idx))
				case step == steps/2:
					op = "addIndexers-conflict"
					idx := cache.Indexers{"labels": labelValues, "other": podIPIndex}
					e1, e2 := ours.AddIndexers(idx), ref.AddIndexers(idx)
					if e1 == nil || e2 == nil {
						t.Fatalf("step %d: conflict not reported: ours %v, client-go %v", step, e1, e2)
					}
					compareErr(t, step, e1, e2)
				case r < 25:
					op = "add"
					p := w.pod()
					compareErr(t, step, ours.Add(p), ref.Add(p))
				case r < 45:
					op = "update"
					p := w.pod()
					compareErr(t, step, ours.Update(p), ref.Update(p))
				case r < 55:
					op = "delete"
					var obj any = w.old()
					if w.rng.IntN(3) == 0 {
						obj = tombstone(obj)
					}
					compareErr(t, step, ours.Delete(obj), ref.Delete(obj))
				case r < 58:
					op = "replace"
					var list1, list2 []any
					for range w.rng.IntN(40) {
						p := w.pod()
						list1 = append(list1, p)
						list2 = append(list2, p)
					}
					rv := strconv.Itoa(step)
					compareErr(t, step, ours.Replace(list1, rv), ref.Replace(list2, rv))
				case r < 60:
					op = "bookmark"
					ours.Bookmark("bm" + strconv.Itoa(step))
					ref.Bookmark("bm" + strconv.Itoa(step))
				default:
					op = "apply"
					var deltas []fifo.Delta
					for range 1 + w.rng.IntN(12) {
						var d fifo.Delta
						switch r := w.rng.IntN(12); {
						case r < 1:
							d = fifo.NewBookmark("bm" + strconv.Itoa(step))
						case r < 3:
							var obj any = w.old()
							if w.rng.IntN(2) == 0 {
								obj = tombstone(obj)
							}
							d = delta(fifo.Deleted, obj)
						default:
							d = delta([]fifo.DeltaType{fifo.Added, fifo.Updated, fifo.Replaced, fifo.Sync}[w.rng.IntN(4)], w.pod())
						}
						d.InitialList = w.rng.IntN(5) == 0
						deltas = append(deltas, d)
					}
					want := refApply(ref, deltas)
					n := core.applyAll(deltas)
					var got []expected
					if n != nil {
						got = summarize(n.Items)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("step %d: notifications\n got %+v\nwant %+v", step, got, want)
					}
				}
				compareStores(t, step, op, ours, ref, universe, w)
			}
		})
	}
}

func compareErr(t *testing.T, step int, ours, ref error) {
	t.Helper()
	if fmt.Sprint(ours) != fmt.Sprint(ref) {
		t.Fatalf("step %d: error: ours %v, client-go %v", step, ours, ref)
	}
}

func compareStores(t *testing.T, step int, op string, ours *Store, ref cache.Indexer, universe []string, w *world) {
	t.Helper()
	fail := func(what string, got, want any) {
		t.Helper()
		t.Fatalf("step %d (%s): %s:\n ours      %v\n client-go %v", step, op, what, got, want)
	}
	if g, r := sorted(ours.ListKeys()), sorted(ref.ListKeys()); !slices.Equal(g, r) {
		fail("ListKeys", g, r)
	}
	if g, r := ours.List(), ref.List(); !sameObjects(g, r) {
		fail("List", describe(g), describe(r))
	}
	if ours.Len() != len(ref.ListKeys()) {
		fail("Len", ours.Len(), len(ref.ListKeys()))
	}
	for _, k := range universe {
		g, gok, gerr := ours.GetByKey(k)
		r, rok, rerr := ref.GetByKey(k)
		if g != r || gok != rok || (gerr == nil) != (rerr == nil) {
			fail("GetByKey "+k, g, r)
		}
	}
	probe := w.old()
	g, gok, _ := ours.Get(probe)
	r, rok, _ := ref.Get(probe)
	if g != r || gok != rok {
		fail("Get", g, r)
	}
	if g, r := ours.LastStoreSyncResourceVersion(), ref.LastStoreSyncResourceVersion(); g != r {
		fail("LastStoreSyncResourceVersion", g, r)
	}
	var gNames, rNames []string
	for n := range ours.GetIndexers() {
		gNames = append(gNames, n)
	}
	for n := range ref.GetIndexers() {
		rNames = append(rNames, n)
	}
	if !slices.Equal(sorted(gNames), sorted(rNames)) {
		fail("GetIndexers", sorted(gNames), sorted(rNames))
	}
	if step%2 == 1 {
		return // the index sweep below is the costly part; every other step is enough
	}
	for _, name := range append(rNames, "nope") {
		gv, rv := sorted(ours.ListIndexFuncValues(name)), sorted(ref.ListIndexFuncValues(name))
		if !slices.Equal(gv, rv) {
			fail("ListIndexFuncValues "+name, gv, rv)
		}
		for _, v := range append(rv, "missing") {
			gk, gerr := ours.IndexKeys(name, v)
			rk, rerr := ref.IndexKeys(name, v)
			if !slices.Equal(gk, rk) || fmt.Sprint(gerr) != fmt.Sprint(rerr) {
				fail("IndexKeys "+name+" "+v, fmt.Sprint(gk, gerr), fmt.Sprint(rk, rerr))
			}
			gb, gerr := ours.ByIndex(name, v)
			rb, rerr := ref.ByIndex(name, v)
			if !sameObjects(gb, rb) || fmt.Sprint(gerr) != fmt.Sprint(rerr) {
				fail("ByIndex "+name+" "+v, fmt.Sprint(describe(gb), gerr), fmt.Sprint(describe(rb), rerr))
			}
		}
		for _, obj := range []any{w.old(), w.old(), tombstone(w.old())} {
			gi, gerr := ours.Index(name, obj)
			ri, rerr := ref.Index(name, obj)
			if !sameObjects(gi, ri) || fmt.Sprint(gerr) != fmt.Sprint(rerr) {
				fail("Index "+name, fmt.Sprint(describe(gi), gerr), fmt.Sprint(describe(ri), rerr))
			}
		}
	}
}

func TestStoreReadsReturnFreshSlices(t *testing.T) {
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range []*corev1.Pod{pod("a", "x", "1"), pod("a", "y", "1")} {
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	l := s.List()
	l[0] = nil
	ks, _ := s.IndexKeys(cache.NamespaceIndex, "a")
	ks[0] = "mutated"
	idx := s.GetIndexers()
	delete(idx, cache.NamespaceIndex)
	if got := describe(s.List()); got == "" || s.Len() != 2 {
		t.Fatalf("List after mutating a returned slice: %q", got)
	}
	if ks, _ := s.IndexKeys(cache.NamespaceIndex, "a"); !slices.Equal(ks, []string{"a/x", "a/y"}) {
		t.Fatalf("IndexKeys = %v", ks)
	}
	if _, ok := s.GetIndexers()[cache.NamespaceIndex]; !ok {
		t.Fatal("GetIndexers returned the store's own map")
	}
}

func TestStoreAppendReads(t *testing.T) {
	s := NewStore(nil, nil)
	if l, k := s.List(), s.ListKeys(); l == nil || k == nil || len(l) != 0 || len(k) != 0 {
		t.Fatalf("an empty store's List %#v, ListKeys %#v; want empty, non-nil slices as client-go's", l, k)
	}
	for _, p := range []*corev1.Pod{pod("a", "x", "1"), pod("a", "y", "1")} {
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	keys := s.AppendKeys([]string{"kept"})
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a/x", "a/y", "kept"}) {
		t.Fatalf("AppendKeys = %v", keys)
	}
	objs := s.AppendList([]any{"kept"})
	if len(objs) != 3 || objs[0] != "kept" || describe(objs[1:]) != describe(s.List()) {
		t.Fatalf("AppendList = %v", objs)
	}
	// A slice with room is filled in place.
	room := make([]string, 1, 8)
	if got := testing.AllocsPerRun(10, func() { _ = s.AppendKeys(room[:1]) }); got != 0 {
		t.Fatalf("AppendKeys into a slice with room allocated %v times", got)
	}
}

func TestStoreKeyError(t *testing.T) {
	s := NewStore(nil, nil)
	for name, err := range map[string]error{
		"Add":    s.Add("no meta"),
		"Update": s.Update("no meta"),
		"Delete": s.Delete("no meta"),
	} {
		var ke cache.KeyError
		if !errors.As(err, &ke) {
			t.Errorf("%s: error %v is not a cache.KeyError", name, err)
		}
	}
	if _, _, err := s.Get(42); err == nil {
		t.Error("Get: no error for an object without key")
	}
}

func TestStoreSealed(t *testing.T) {
	s := NewStore(nil, nil)
	p := pod("a", "x", "1")
	if err := s.Add(p); err != nil {
		t.Fatal(err)
	}
	s.Bookmark("7")
	s.Seal()
	for name, err := range map[string]error{
		"Add":     s.Add(pod("a", "y", "1")),
		"Update":  s.Update(p),
		"Delete":  s.Delete(p),
		"Replace": s.Replace(nil, "9"),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s after Seal: error %v, want ErrReadOnly", name, err)
		}
	}
	if err := s.Resync(); err != nil {
		t.Errorf("Resync: %v", err)
	}
	s.Bookmark("8")
	if rv := s.LastStoreSyncResourceVersion(); rv != "7" {
		t.Errorf("Bookmark after Seal changed the version to %q", rv)
	}
	if s.Len() != 1 || !s.Sealed() {
		t.Fatalf("Len = %d, Sealed = %v", s.Len(), s.Sealed())
	}

	// Sealed without an actor: AddIndexers still works, under the lock.
	if err := s.AddIndexers(cache.Indexers{"ns": cache.MetaNamespaceIndexFunc}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.IndexKeys("ns", "a"); !slices.Equal(keys, []string{"a/x"}) {
		t.Fatalf("IndexKeys = %v", keys)
	}
	// With a hook: AddIndexers goes through it only.
	var got cache.Indexers
	hookErr := errors.New("from hook")
	s.Writer().Seal(func(idx cache.Indexers) error { got = idx; return hookErr })
	if err := s.AddIndexers(cache.Indexers{"other": podIPIndex}); err != hookErr {
		t.Fatalf("AddIndexers = %v, want the hook's error", err)
	}
	if _, ok := got["other"]; !ok {
		t.Fatal("hook did not receive the indexers")
	}
	if _, ok := s.GetIndexers()["other"]; ok {
		t.Fatal("AddIndexers bypassed the hook")
	}
}

// TestStoreIndexFuncFailure checks that an index function failing (or
// panicking) on an object leaves it cached, out of that index, reported and
// counted, where client-go would panic.
func TestStoreIndexFuncFailure(t *testing.T) {
	failing := cache.Indexers{
		"ip": podIPIndex,
		"err": func(obj any) ([]string, error) {
			return nil, fmt.Errorf("cannot index %T", obj)
		},
		"panic": func(obj any) ([]string, error) {
			return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
		},
		// computed by the store itself (isMetaNamespaceIndexFunc): it fails
		// on objects without metadata like the function does
		"ns": cache.MetaNamespaceIndexFunc,
	}
	s := NewStore(nil, failing)
	c := NewCore(s.Writer(), Config{})
	var reported []string
	c.w.SetIndexErrorHandler(func(key, index string, err error) { reported = append(reported, key+"@"+index) })
	c.applyAll([]fifo.Delta{{Type: fifo.Added, Key: "k", Object: "not a pod"}})
	if _, ok, _ := s.GetByKey("k"); !ok {
		t.Fatal("object whose indexing failed was not cached")
	}
	slices.Sort(reported)
	if want := []string{"k@err", "k@ip", "k@ns", "k@panic"}; !slices.Equal(reported, want) {
		t.Fatalf("reported %v, want %v", reported, want)
	}
	if vals := s.ListIndexFuncValues("err"); len(vals) != 0 {
		t.Fatalf("failed object indexed under %v", vals)
	}

	// The values an object is indexed under are computed again from the old
	// object on update and delete: a failing old object is in no index, and
	// its failure is not reported a second time.
	reported = nil
	c.applyAll([]fifo.Delta{{Type: fifo.Updated, Key: "k", Object: podIP("ns", "k", "2", "10.0.0.1")}})
	if keys, _ := s.IndexKeys("ip", "10.0.0.1"); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("after updating the failing object to a pod: ip index holds %v", keys)
	}
	if keys, _ := s.IndexKeys("ns", "ns"); !slices.Equal(keys, []string{"k"}) {
		t.Fatalf("after updating the failing object to a pod: ns index holds %v", keys)
	}
	if want := []string{"k@err"}; !slices.Equal(reported, want) {
		t.Fatalf("reported %v, want %v", reported, want)
	}
	reported = nil
	c.applyAll([]fifo.Delta{{Type: fifo.Updated, Key: "k", Object: "not a pod again"}})
	if vals := s.ListIndexFuncValues("ip"); len(vals) != 0 {
		t.Fatalf("after updating the pod to a failing object: ip index holds %v", vals)
	}
	slices.Sort(reported)
	if want := []string{"k@err", "k@ip", "k@ns", "k@panic"}; !slices.Equal(reported, want) {
		t.Fatalf("reported %v, want %v", reported, want)
	}
	if vals := s.ListIndexFuncValues("ns"); len(vals) != 0 {
		t.Fatalf("after updating the pod to a failing object: ns index holds %v", vals)
	}
	reported = nil
	c.applyAll([]fifo.Delta{{Type: fifo.Deleted, Key: "k", Object: "not a pod again"}})
	if _, ok, _ := s.GetByKey("k"); ok {
		t.Fatal("deleted object still cached")
	}
	if len(reported) != 0 {
		t.Fatalf("delete reported %v", reported)
	}
	for _, name := range []string{"ip", "err", "panic", "ns"} {
		if vals := s.ListIndexFuncValues(name); len(vals) != 0 {
			t.Fatalf("after the delete, index %s holds %v", name, vals)
		}
	}

	if err := s.Add(pod("a", "b", "1")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.GetByKey("a/b"); !ok {
		t.Fatal("store unusable after an index failure")
	}
}

// TestStoreNamespaceIndexWithoutAllocations: the store recognizes
// cache.MetaNamespaceIndexFunc and moves an updated object in that index
// without allocating (the function itself allocates a slice per call); a
// function wrapping it is run as it is. Both index the same.
func TestStoreNamespaceIndexWithoutAllocations(t *testing.T) {
	wrapped := func(obj any) ([]string, error) { return cache.MetaNamespaceIndexFunc(obj) }
	for _, bc := range []struct {
		name   string
		fn     cache.IndexFunc
		allocs float64
	}{
		{"MetaNamespaceIndexFunc", cache.MetaNamespaceIndexFunc, 0},
		{"wrapped", wrapped, 2}, // the old object's values and the new one's
	} {
		t.Run(bc.name, func(t *testing.T) {
			s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: bc.fn})
			if got, want := s.defs[0].namespace, bc.allocs == 0; got != want {
				t.Fatalf("recognized as the namespace index: %v, want %v", got, want)
			}
			a, b := pod("ns1", "p", "1"), pod("ns1", "p", "2")
			if err := s.Add(a); err != nil {
				t.Fatal(err)
			}
			objs := []any{a, b}
			i := 0
			allocs := testing.AllocsPerRun(100, func() {
				s.mu.Lock()
				s.upsertLocked("ns1/p", objs[i%2])
				s.mu.Unlock()
				i++
			})
			if allocs != bc.allocs {
				t.Fatalf("%v allocations per update, want %v", allocs, bc.allocs)
			}
			if keys, err := s.IndexKeys(cache.NamespaceIndex, "ns1"); err != nil || !slices.Equal(keys, []string{"ns1/p"}) {
				t.Fatalf("namespace index: %v %v", keys, err)
			}
			if err := s.Delete(b); err != nil {
				t.Fatal(err)
			}
			if vals := s.ListIndexFuncValues(cache.NamespaceIndex); len(vals) != 0 {
				t.Fatalf("after the delete the index holds %v", vals)
			}
		})
	}
}

// TestStoreConcurrentReads reads the store from several goroutines while the
// core applies batches; run it with -race. Every object an index returns
// must be cached and belong to the index value asked for.
func TestStoreConcurrentReads(t *testing.T) {
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "labels": labelValues})
	c := NewCore(s.Writer(), Config{})
	c.subscribe(&Subscribe{ID: 1})
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				ns := worldNamespaces[(i+r)%len(worldNamespaces)]
				objs, err := s.ByIndex(cache.NamespaceIndex, ns)
				if err != nil {
					errs <- err
					return
				}
				for _, o := range objs {
					if p, ok := o.(*corev1.Pod); !ok || p.Namespace != ns {
						errs <- fmt.Errorf("ByIndex(%q) returned %#v", ns, o)
						return
					}
				}
				for _, k := range s.ListKeys() {
					_, _, _ = s.GetByKey(k)
				}
				_ = s.List()
				_, _ = s.IndexKeys("labels", "app=x")
				_ = s.ListIndexFuncValues("labels")
				_, _ = s.Index(cache.NamespaceIndex, pod(ns, "z", ""))
				_ = s.LastStoreSyncResourceVersion()
				_ = s.GetIndexers()
				_ = s.Len()
			}
		})
	}
	w := &world{rng: rand.New(rand.NewPCG(7, 7))}
	for i := range 100 {
		deltas := make([]fifo.Delta, 0, 500)
		for range 500 {
			if w.rng.IntN(5) == 0 {
				deltas = append(deltas, delta(fifo.Deleted, w.old()))
			} else {
				deltas = append(deltas, delta(fifo.Updated, w.pod()))
			}
		}
		c.applyAll(deltas)
		if i == 50 {
			if err := c.addIndexers(cache.Indexers{"byIP": podIPIndex}); err != nil {
				t.Error(err)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
