package shard

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/shard/shardtest"
)

func TestPositionsRoundTrip(t *testing.T) {
	ps := map[int]position{3: {token: 1042, version: 5871}, 0: {token: 7, version: 12}}
	s := encodePositions(ps)
	if s != "0=7:12,3=1042:5871" {
		t.Fatalf("encoded %q", s)
	}
	got, err := decodePositions(s)
	if err != nil || len(got) != 2 || got[3] != ps[3] || got[0] != ps[0] {
		t.Fatalf("decoded %v, %v; want %v", got, err, ps)
	}
	if got, err := decodePositions(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"3", "3=1", "x=1:2", "3=1:x", "-1=1:2", "3=1:0"} {
		if _, err := decodePositions(bad); err == nil || !strings.Contains(err.Error(), AnnotationPositions) {
			t.Errorf("%q: err %v, want one naming the annotation", bad, err)
		}
	}
}

func leaseWith(positions string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationPositions: positions}}}
}

// Per kind and range, the newest delivery's position wins (the highest
// token, then the highest version), whichever lease says it, and what was
// learned stays when a lease goes. New's kind's entries have no kind; the
// others' name theirs.
func TestLearnPositionsKeepsTheNewestDelivery(t *testing.T) {
	kp := kindPositions{}
	bad := learnPositions(kp, []any{leaseWith("0=10:100,1=10:100,secrets/1=10:95"), leaseWith("0=12:90,1=10:120,2=5:50,secrets/1=9:200"),
		leaseWith("nonsense"), leaseWith("9=1:1"), leaseWith("/1=1:1")}, 4)
	if len(bad) != 2 {
		t.Fatalf("malformed: %v, want the two", bad)
	}
	known := kp[""]
	want := map[int]position{0: {12, 90}, 1: {10, 120}, 2: {5, 50}}
	if len(known) != len(want) {
		t.Fatalf("known %v, want %v (a range out of the group's count ignored)", known, want)
	}
	for i, p := range want {
		if known[i] != p {
			t.Errorf("range %d: %v, want %v", i, known[i], p)
		}
	}
	if len(kp) != 2 || len(kp["secrets"]) != 1 || kp["secrets"][1] != (position{10, 95}) {
		t.Errorf("the secrets' positions: %v, want range 1's 10:95 alone", kp["secrets"])
	}
	learnPositions(kp, []any{leaseWith("0=11:500")}, 4)
	if known[0] != (position{12, 90}) {
		t.Errorf("an older delivery replaced a newer one: %v", known[0])
	}
	if got := kp.encode(); got != "0=12:90,1=10:120,2=5:50,secrets/1=10:95" {
		t.Errorf("encoded: %s", got)
	}
}

func cmAt(name, uid, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// scriptedWatches answers each watch with the next script's events (a
// nil script: an error), recording the versions asked for.
type scriptedWatches struct {
	scripts [][]watch.Event
	errs    []error
	from    []string
}

func (s *scriptedWatches) lw() *cache.ListWatch {
	return &cache.ListWatch{WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
		s.from = append(s.from, o.ResourceVersion)
		i := len(s.from) - 1
		if i < len(s.errs) && s.errs[i] != nil {
			return nil, s.errs[i]
		}
		fw := watch.NewFakeWithChanSize(len(s.scripts[i]), false)
		for _, e := range s.scripts[i] {
			fw.Action(e.Type, e.Object)
		}
		fw.Stop() // the stream ends after its events, as at the server's timeout
		return fw, nil
	}}
}

func testRangeLW(inner cache.ListerWatcher) *rangeLW {
	return newRangeLW(inner, Range{Index: 0, Count: 1}, &filter{field: UID, log: slog.New(slog.DiscardHandler)})
}

// A replay finds what was deleted between the position and the list,
// created-and-deleted objects included, and not what came back; it ends
// at the first version at or past the list's, a bookmark's included, and
// watches again from where a watch ended.
func TestReplayFindsTheDeletesSinceThePosition(t *testing.T) {
	s := &scriptedWatches{scripts: [][]watch.Event{
		{
			{Type: watch.Deleted, Object: cmAt("a", "ua", "101")},
			{Type: watch.Added, Object: cmAt("b", "ub", "102")},
			{Type: watch.Deleted, Object: cmAt("b", "ub", "103")}, // created and deleted after the position
			{Type: watch.Deleted, Object: cmAt("c", "uc", "104")},
		},
		{
			{Type: watch.Added, Object: cmAt("c", "uc2", "105")}, // back again
			{Type: watch.Bookmark, Object: cmAt("", "", "120")},
			{Type: watch.Deleted, Object: cmAt("late", "ul", "130")}, // past the list: the informer has it
		},
	}}
	deleted, complete, err := replay(context.Background(), testRangeLW(s.lw()), 100, 110)
	if err != nil || !complete {
		t.Fatalf("complete %v, err %v", complete, err)
	}
	if len(deleted) != 2 || deleted["ns/a"] == nil || deleted["ns/b"] == nil {
		t.Fatalf("deleted %v, want ns/a and ns/b", keysOf(deleted))
	}
	if got := deleted["ns/b"].(*corev1.ConfigMap).ResourceVersion; got != "103" {
		t.Errorf("ns/b's last state is at %s, want the delete's 103", got)
	}
	if strings.Join(s.from, ",") != "100,104" {
		t.Errorf("watched from %v, want 100 then 104", s.from)
	}
}

// A position that left the API server's window (410 Gone), or a watch
// that sends nothing, ends the replay short, with what it found.
func TestReplayFallsShort(t *testing.T) {
	gone := &scriptedWatches{scripts: [][]watch.Event{{{Type: watch.Deleted, Object: cmAt("a", "ua", "101")}}, nil},
		errs: []error{nil, apierrors.NewResourceExpired("too old resource version: 101 (150)")}}
	deleted, complete, err := replay(context.Background(), testRangeLW(gone.lw()), 100, 110)
	if complete || !apierrors.IsResourceExpired(err) || deleted["ns/a"] == nil {
		t.Fatalf("410: deleted %v, complete %v, err %v; want ns/a, short, Expired", keysOf(deleted), complete, err)
	}

	defer func(d time.Duration) { replayWatch = d }(replayWatch)
	replayWatch = 50 * time.Millisecond
	silent := &cache.ListWatch{WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		return watch.NewFake(), nil
	}}
	if _, complete, err := replay(context.Background(), testRangeLW(silent), 100, 110); complete || err != nil {
		t.Fatalf("silent: complete %v, err %v; want short, no error", complete, err)
	}
}

// Until its activation, a range that resumes records the deletes its
// intake takes; a key added again is not gone. Taking them ends it.
func TestRangeRecordsDeletesUntilActivation(t *testing.T) {
	fw := watch.NewFake()
	lw := testRangeLW(&cache.ListWatch{WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }})
	lw.record()
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "100"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	send := func(typ watch.EventType, obj runtime.Object) {
		go fw.Action(typ, obj)
		<-w.ResultChan()
	}
	send(watch.Deleted, cmAt("a", "ua", "101"))
	send(watch.Deleted, cmAt("b", "ub", "102"))
	send(watch.Added, cmAt("b", "ub2", "103"))
	got := lw.takeDeleted()
	if len(got) != 1 || got["ns/a"] == nil {
		t.Fatalf("recorded %v, want ns/a", keysOf(got))
	}
	send(watch.Deleted, cmAt("c", "uc", "104"))
	if got := lw.takeDeleted(); len(got) != 0 {
		t.Fatalf("recorded %v after the activation", keysOf(got))
	}
}

// A relist while recording (the range's watch broke and could not resume
// from its version: 410 Gone after an etcd restart) records the objects
// handed on before that its list no longer has, in their last state: their
// deletes reach the informer as a difference, never as an event.
func TestRangeRecordsARelistsDeletes(t *testing.T) {
	lists := []*corev1.ConfigMapList{
		{ListMeta: metav1.ListMeta{ResourceVersion: "100"}, Items: []corev1.ConfigMap{*cmAt("a", "ua", "90"), *cmAt("b", "ub", "91"), *cmAt("c", "uc", "92")}},
		{ListMeta: metav1.ListMeta{ResourceVersion: "110"}, Items: []corev1.ConfigMap{*cmAt("b", "ub", "103"), *cmAt("e", "ue", "105")}},
	}
	fw := watch.NewFake()
	lw := testRangeLW(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			l := lists[0]
			lists = lists[1:]
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	})
	lw.record()
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "100"})
	if err != nil {
		t.Fatal(err)
	}
	send := func(typ watch.EventType, obj runtime.Object) {
		go fw.Action(typ, obj)
		<-w.ResultChan()
	}
	send(watch.Added, cmAt("d", "ud", "101"))
	send(watch.Modified, cmAt("c", "uc", "102"))
	send(watch.Deleted, cmAt("b", "ub", "103"))
	w.Stop()
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	got := lw.takeDeleted()
	if len(got) != 3 || got["ns/a"] == nil || got["ns/d"] == nil || got["ns/c"] == nil {
		t.Fatalf("recorded %v, want ns/a, ns/c and ns/d (ns/b is back)", keysOf(got))
	}
	if rv := got["ns/c"].(impliedDelete).Object.(*corev1.ConfigMap).ResourceVersion; rv != "102" {
		t.Fatalf("ns/c recorded at %s, want its last state handed on (102), as an implied delete", rv)
	}
	if _, ok := got["ns/d"].(impliedDelete); !ok {
		t.Fatalf("ns/d recorded as %T, want an implied delete", got["ns/d"])
	}
}

// A range's position advances to what its informer had been handed at a
// lease write once its handlers have been given that, even though more
// has come since (a steady stream keeps them a few events behind).
func TestPositionsAdvanceBehindASteadyStream(t *testing.T) {
	s := &Informer{shared: &shared{}}
	lw := testRangeLW(nil)
	ri := &rangeInformer{r: Range{Index: 3, Count: 4}, token: 7}
	ri.kinds = []*kindRange{{ri: ri, k: s, lw: lw, attached: map[*registration]*attachment{}}}
	h := &rangeHandler{}
	ri.kinds[0].attached[&registration{}] = &attachment{h: h}
	ri.activated.Store(true)
	ri.delivering.Store(true)
	s.storeDelivered([]*rangeInformer{ri})
	at := func(forwarded, object, seen int64) map[int]position {
		lw.mu.Lock()
		lw.forwarded, lw.object = forwarded, object
		lw.mu.Unlock()
		h.seen.Store(seen)
		return s.positions()
	}
	if ps := at(100, 90, 90); ps[3] != (position{token: 7, version: 100}) {
		t.Fatalf("handlers given all: %v, want 3=7:100", ps)
	}
	if ps := at(120, 120, 110); ps[3] != (position{token: 7, version: 100}) {
		t.Fatalf("handlers behind: %v, want the last position, 7:100", ps)
	}
	// Given 120 (the newest object at the previous write) but not 140:
	// everything handed on by then, 120, was given.
	if ps := at(150, 140, 130); ps[3] != (position{token: 7, version: 120}) {
		t.Fatalf("handlers past the previous write's: %v, want 7:120", ps)
	}
	if ps := at(150, 140, 135); ps[3] != (position{token: 7, version: 120}) {
		t.Fatalf("handlers short of the previous write's: %v, want 7:120", ps)
	}
}

// missingSince gives a tombstone for each recorded delete the cache no
// longer has, with its last state, except a delete at or before the
// position (the previous deliverer's handlers were given it); a relist's
// implied delete, whose version is not known, is kept whatever its last
// state's version.
func TestMissingSince(t *testing.T) {
	ix := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = ix.Add(cmAt("back", "u2", "150"))
	rs := &resumed{deleted: map[string]runtime.Object{"ns/a": cmAt("a", "ua", "101"), "ns/back": cmAt("back", "u1", "102")}}
	pre := map[string]runtime.Object{
		"ns/z":      cmAt("z", "uz", "140"),
		"ns/given":  cmAt("given", "ug", "100"), // at the position: given
		"ns/old":    cmAt("old", "uo", "99"),
		"ns/listed": impliedDelete{cmAt("listed", "ul", "90")},
	}
	finals := map[string]any{}
	got := missingSince(rs, pre, 100, ix, finals)
	var keys []string
	for _, o := range got {
		keys = append(keys, o.Key)
	}
	if !slices.Equal(keys, []string{"ns/a", "ns/listed", "ns/z"}) || got[0].UID != "ua" || got[0].Version != "101" || got[1].Version != "90" {
		t.Fatalf("missing %+v, want ns/a (at 101), ns/listed (at 90) and ns/z", got)
	}
	if finals["ns/z"].(*corev1.ConfigMap).ResourceVersion != "140" || finals["ns/listed"].(*corev1.ConfigMap).Name != "listed" || finals["ns/back"] != nil {
		t.Fatalf("finals %v", finals)
	}
}

func keysOf(m map[string]runtime.Object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The positions ride on the renewals, and the holder's release keeps the
// newest of each range, those of the last renewal included; a revoke by
// a peer leaves them as they were.
func TestLeaseCarriesPositions(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	l := newLeases(cs.CoordinationV1(), "default", "g", "a#1", "addr", 2*time.Second, time.Second)
	cur := "0=10:100,1=10:100"
	l.rec.positions = func() string { return cur }
	if _, err := l.write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.write(ctx, false); err != nil {
		t.Fatal(err)
	}
	get := func() string {
		got, err := cs.CoordinationV1().Leases("default").Get(ctx, leaseName("g", "a#1"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Annotations[AnnotationPositions]
	}
	if got := get(); got != cur {
		t.Fatalf("after a renewal: %q, want %q", got, cur)
	}
	// Fenced: the delivered ranges are gone from what it would write, only
	// a released range's final position is left.
	cur = "1=10:150"
	if err := l.release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "0=10:100,1=10:150" {
		t.Fatalf("after the release: %q, want range 0's last renewal and range 1's final position", got)
	}
}

func TestMergePositions(t *testing.T) {
	if got := mergePositions("0=10:100,1=12:5", "1=11:500,2=1:1"); got != "0=10:100,1=12:5,2=1:1" {
		t.Fatalf("merged %q", got)
	}
	if got := mergePositions("garbage", "1=11:500"); got != "1=11:500" {
		t.Fatalf("merged with a malformed one: %q", got)
	}
}

// encodePositions and decodePositions are New's kind's positions as an
// annotation, and back.
func encodePositions(ps map[int]position) string { return kindPositions{"": ps}.encode() }

func decodePositions(s string) (map[int]position, error) {
	kp, err := decodeKindPositions(s)
	if err != nil {
		return nil, err
	}
	if kp[""] == nil {
		return map[int]position{}, nil
	}
	return kp[""], nil
}

// The warm start's transform runs in the range informer's pass, which may
// run on the goroutine that reads the watch, while forward holds lw.mu
// waiting for that goroutine: it must not need lw.mu.
func TestWarmTransformDoesNotWaitForTheWatch(t *testing.T) {
	lw := testRangeLW(&cache.ListWatch{})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	lw.seeded = map[runtime.Object]struct{}{cm: {}}
	marked := func(obj any) (any, error) { return "transformed", nil }
	transform := lw.transform(marked)
	lw.mu.Lock() // as forward holds it while it hands an event on
	defer lw.mu.Unlock()
	done := make(chan [2]any)
	go func() {
		seeded, _ := transform(cm)
		other, _ := transform(cm.DeepCopy())
		done <- [2]any{seeded, other}
	}()
	select {
	case got := <-done:
		if got[0] != cm || got[1] != "transformed" {
			t.Errorf("the copy's object became %v, another %v; want it as it is, and the other transformed", got[0], got[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the transform waited for lw.mu")
	}
}
