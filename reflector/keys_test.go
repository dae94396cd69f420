package reflector

import (
	"testing"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// sameString reports whether a and b are one string (the same bytes in
// memory), not only equal ones.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

func TestWatchKeys(t *testing.T) {
	var k watchKeys
	a := k.key("ns", "a", false)
	b := k.key("ns", "b", false)
	if a != "ns/a" || b != "ns/b" {
		t.Fatalf("keys %q %q", a, b)
	}
	// The buffer the keys are built in is not the keys' memory.
	if a2 := k.key("ns", "a", false); a2 != "ns/a" || !sameString(a2, a) {
		t.Fatalf("second key of ns/a: %q, same string %v", a2, sameString(a2, a))
	}
	if b != "ns/b" {
		t.Fatalf("an earlier key changed: %q", b)
	}
	if c := k.key("", "c", false); c != "c" || k.len() != 2 {
		t.Fatalf("cluster-scoped key %q, %d kept (want 2: it is the name itself)", c, k.len())
	}
	// A delete returns the key and forgets it; the next one is a new string.
	if d := k.key("ns", "a", true); !sameString(d, a) || k.len() != 1 {
		t.Fatalf("deleted key %q (same string %v), %d kept", d, sameString(d, a), k.len())
	}
	if a3 := k.key("ns", "a", false); a3 != "ns/a" || sameString(a3, a) {
		t.Fatalf("key after the delete: %q, same string as before %v", a3, sameString(a3, a))
	}
	// A key deleted before it was seen is not kept.
	if d := k.key("other", "x", true); d != "other/x" || k.len() != 2 {
		t.Fatalf("deleted unseen key %q, %d kept", d, k.len())
	}
	k.reset()
	if k.len() != 0 {
		t.Fatalf("%d kept after reset", k.len())
	}
	if a4 := k.key("ns", "a", false); a4 != "ns/a" {
		t.Fatalf("key after reset %q", a4)
	}
}

func TestWatchKeysAllocateOnlyNewKeys(t *testing.T) {
	var k watchKeys
	k.key("namespace-1", "pod-1", false)
	if n := testing.AllocsPerRun(100, func() { k.key("namespace-1", "pod-1", false) }); n != 0 {
		t.Fatalf("a known key allocates %v times", n)
	}
	// Deliberately measured too: a new key costs its string (and the map's
	// growth now and then), so this cannot pass by accident.
	i := 0
	names := make([]string, 200)
	for j := range names {
		names[j] = "pod-" + string(rune('a'+j%26)) + string(rune('a'+j/26))
	}
	if n := testing.AllocsPerRun(100, func() { k.key("namespace-1", names[i], false); i++ }); n < 1 {
		t.Fatalf("new keys allocate %v times each, want at least 1", n)
	}
}

// The Machine's watch deltas: keys equal to client-go's key function's,
// one string per object across its events, forgotten on delete and on a
// relist.
func TestMachineWatchKeysReused(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10", pod("a", "1"))
	node := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cluster-scoped", ResourceVersion: "16"}}
	other := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "b", ResourceVersion: "17"}}
	events := []watch.Event{
		ev(watch.Added, pod("b", "11")),
		ev(watch.Modified, pod("b", "12")),
		ev(watch.Modified, pod("a", "13")),
		ev(watch.Deleted, pod("b", "14")),
		ev(watch.Added, pod("b", "15")),
		ev(watch.Added, node),
		ev(watch.Added, other),
		ev(watch.Modified, pod("a", "18")),
	}
	e := h.m.WatchEvents(w.Gen, events, time.Time{})
	if e.deltas() == nil {
		t.Fatalf("no deltas: %s", describe(e))
	}
	ds := e.deltas().Items
	const want = "Added:ns/b@11 Updated:ns/b@12 Updated:ns/a@13 Deleted:ns/b@14 Added:ns/b@15 Added:cluster-scoped@16 Added:other/b@17 Updated:ns/a@18"
	if got := deltasString(ds); got != want {
		t.Fatalf("deltas\n got %s\nwant %s", got, want)
	}
	for i, d := range ds {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(events[i].Object); err != nil || d.Key != k {
			t.Fatalf("delta %d: key %q, client-go's %q (%v)", i, d.Key, k, err)
		}
	}
	if !sameString(ds[0].Key, ds[1].Key) || !sameString(ds[0].Key, ds[3].Key) || !sameString(ds[2].Key, ds[7].Key) {
		t.Fatal("an object's later events did not reuse its key")
	}
	if sameString(ds[3].Key, ds[4].Key) {
		t.Fatal("an object added again after its delete reused the deleted key")
	}
	if n := h.m.keys.len(); n != 3 { // ns/a, ns/b, other/b
		t.Fatalf("%d keys kept, want 3", n)
	}
	// A relist replaces the cache: the keys are forgotten.
	e = h.m.WatchEvents(w.Gen, []watch.Event{errEvent(apierrors.NewGone("gone"))}, time.Time{})
	wt := h.expectWait(e, time.Second)
	l := h.expectList(h.m.BackoffElapsed(wt.Gen), "18", 0)
	e = h.m.ListDone(l.Gen, ListResult{List: podList("20", pod("a", "19"))})
	if e.replace() == nil || deltasString(e.replace().Items) != "Replaced:ns/a@19" {
		t.Fatalf("relist: %s", describe(e))
	}
	if n := h.m.keys.len(); n != 0 {
		t.Fatalf("%d keys kept after the relist", n)
	}
}

// A WatchList sync's objects are not kept (their keys come with the
// sync, which empties the kept keys); the watch's events after it are.
func TestMachineWatchListKeys(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	e := h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Added, pod("a", "1")),
		ev(watch.Bookmark, bookmark("2", true)),
		ev(watch.Modified, pod("a", "3")),
	}, time.Time{})
	if e.replace() == nil || e.deltas() == nil || deltasString(e.deltas().Items) != "Updated:ns/a@3" {
		t.Fatalf("watch-list: %s", describe(e))
	}
	if n := h.m.keys.len(); n != 1 {
		t.Fatalf("%d keys kept, want 1", n)
	}
}

// A transform's object is keyed as client-go keys it: by its own metadata
// (reused like the untransformed ones), or, when it has none, by
// cache.DeletionHandlingMetaNamespaceKeyFunc.
func TestMachineTransformedKeys(t *testing.T) {
	transform := func(obj any) (any, error) {
		p := obj.(*v1.Pod)
		switch p.Name {
		case "explicit":
			return cache.ExplicitKey("explicit-key"), nil
		case "tombstone":
			return cache.DeletedFinalStateUnknown{Key: "tombstone-key", Obj: p}, nil
		case "nometa":
			return struct{ Name string }{p.Name}, nil
		}
		q := p.DeepCopy()
		q.Namespace = "renamed"
		return q, nil
	}
	h := newHarness(t, func(c *Config) { c.Transform = transform })
	w := h.startWatching("10")
	e := h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Added, pod("a", "11")),
		ev(watch.Modified, pod("a", "12")),
		ev(watch.Added, pod("explicit", "13")),
		ev(watch.Added, pod("tombstone", "14")),
		ev(watch.Added, pod("nometa", "15")),
	}, time.Time{})
	if e.deltas() == nil {
		t.Fatalf("no deltas: %s", describe(e))
	}
	ds := e.deltas().Items
	var keys []string
	for _, d := range ds {
		keys = append(keys, d.Key)
	}
	// The last object has no metadata: client-go's key function fails on
	// it, and it is dropped.
	if len(ds) != 4 || keys[0] != "renamed/a" || keys[1] != "renamed/a" || keys[2] != "explicit-key" || keys[3] != "tombstone-key" {
		t.Fatalf("keys %q", keys)
	}
	if !sameString(keys[0], keys[1]) {
		t.Fatal("the transformed object's key was not reused")
	}
	if n := h.counters().Dropped.Load(); n != 1 {
		t.Fatalf("dropped %d, want 1", n)
	}
}
