package indexer

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

func newFakeClock() *testingclock.FakeClock {
	return testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}
func newTestCore(s *Store) (*Core, *testingclock.FakeClock) {
	c := newFakeClock()
	return NewCore(s.Writer(), Config{Clock: c}), c
}

func TestCoreApply(t *testing.T) {
	a1, a2 := pod("ns", "a", "1"), pod("ns", "a", "2")
	a1again := pod("ns", "a", "1") // a new object with the same RV: a resync
	b1 := pod("ns", "b", "1")
	type step struct {
		deltas []fifo.Delta
		want   []expected
		keys   []string // cache content after the step
	}
	cases := []struct {
		name  string
		seed  []any
		steps []step
	}{{
		name: "add to an empty cache, then update",
		steps: []step{
			{deltas: []fifo.Delta{delta(fifo.Added, a1)},
				want: []expected{{Type: NotifyAdd, Key: "ns/a", NewRV: "1"}}, keys: []string{"ns/a"}},
			{deltas: []fifo.Delta{delta(fifo.Updated, a2)},
				want: []expected{{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "2"}}, keys: []string{"ns/a"}},
		},
	}, {
		name: "Added for a cached key is an update",
		seed: []any{a1},
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Added, a2)},
			want: []expected{{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "2"}}, keys: []string{"ns/a"}}},
	}, {
		name: "Updated for an unknown key is an add",
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Updated, a2)},
			want: []expected{{Type: NotifyAdd, Key: "ns/a", NewRV: "2"}}, keys: []string{"ns/a"}}},
	}, {
		name: "Sync and Replaced with an unchanged RV are resyncs",
		seed: []any{a1, b1},
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Sync, a1), delta(fifo.Replaced, b1), delta(fifo.Replaced, a1again)},
			want: []expected{
				{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "1", Sync: true},
				{Type: NotifyUpdate, Key: "ns/b", OldRV: "1", NewRV: "1", Sync: true},
				{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "1", Sync: true},
			}, keys: []string{"ns/a", "ns/b"}}},
	}, {
		name: "Replaced with a new RV is a plain update",
		seed: []any{a1},
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Replaced, a2)},
			want: []expected{{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "2"}}, keys: []string{"ns/a"}}},
	}, {
		name: "Sync for a key no longer cached is an add",
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Sync, a1)},
			want: []expected{{Type: NotifyAdd, Key: "ns/a", NewRV: "1"}}, keys: []string{"ns/a"}}},
	}, {
		name: "delete, and tombstone delete",
		seed: []any{a1, b1},
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Deleted, a1), delta(fifo.Deleted, tombstone(b1))},
			want: []expected{
				{Type: NotifyDelete, Key: "ns/a", NewRV: "1"},
				{Type: NotifyDelete, Key: "ns/b", Tombstone: true},
			}, keys: []string{}}},
	}, {
		name: "delete of an unknown key is still notified",
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Deleted, tombstone(a1))},
			want: []expected{{Type: NotifyDelete, Key: "ns/a", Tombstone: true}}, keys: []string{}}},
	}, {
		name: "InitialList is carried on adds and deletes, not updates",
		seed: []any{a1},
		steps: []step{{deltas: []fifo.Delta{
			{Type: fifo.Replaced, Key: "ns/b", Object: b1, InitialList: true},
			{Type: fifo.Replaced, Key: "ns/a", Object: a2, InitialList: true},
			{Type: fifo.Deleted, Key: "ns/c", Object: tombstone(pod("ns", "c", "1")), InitialList: true},
		}, want: []expected{
			{Type: NotifyAdd, Key: "ns/b", NewRV: "1", InitialList: true},
			{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "2"},
			{Type: NotifyDelete, Key: "ns/c", Tombstone: true, InitialList: true},
		}, keys: []string{"ns/a", "ns/b"}}},
	}, {
		name: "objects without metadata never count as resyncs",
		steps: []step{
			{deltas: []fifo.Delta{{Type: fifo.Added, Key: "x", Object: "v1"}}, want: []expected{{Type: NotifyAdd}}, keys: []string{"x"}},
			{deltas: []fifo.Delta{{Type: fifo.Sync, Key: "x", Object: "v1"}}, want: []expected{{Type: NotifyUpdate}}, keys: []string{"x"}},
		},
	}, {
		name: "unknown delta types are skipped",
		steps: []step{{deltas: []fifo.Delta{{Type: 0, Key: "ns/a", Object: a1}, delta(fifo.Added, b1)},
			want: []expected{{Type: NotifyAdd, Key: "ns/b", NewRV: "1"}}, keys: []string{"ns/b"}}},
	}, {
		name: "a key added and deleted in one batch",
		steps: []step{{deltas: []fifo.Delta{delta(fifo.Added, a1), delta(fifo.Updated, a2), delta(fifo.Deleted, a2), delta(fifo.Added, a1)},
			want: []expected{
				{Type: NotifyAdd, Key: "ns/a", NewRV: "1"},
				{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "2"},
				{Type: NotifyDelete, Key: "ns/a", NewRV: "2"},
				{Type: NotifyAdd, Key: "ns/a", NewRV: "1"},
			}, keys: []string{"ns/a"}}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore(nil, nil)
			for _, o := range tc.seed {
				if err := s.Add(o); err != nil {
					t.Fatal(err)
				}
			}
			c, _ := newTestCore(s)
			c.subscribe(&Subscribe{ID: 1})
			for i, st := range tc.steps {
				n := c.applyAll(st.deltas)
				if n == nil {
					t.Fatalf("step %d: no notifications", i)
				}
				if got := summarize(n.Items); !reflect.DeepEqual(got, st.want) {
					t.Fatalf("step %d:\n got %+v\nwant %+v", i, got, st.want)
				}
				if n.Initial {
					t.Errorf("step %d: batch marked Initial", i)
				}
				if got := sorted(s.ListKeys()); !slices.Equal(got, st.keys) {
					t.Fatalf("step %d: cache keys %v, want %v", i, got, st.keys)
				}
			}
		})
	}
}

func TestCoreApplyNotificationObjects(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	c.subscribe(&Subscribe{ID: 1})
	a1, a2 := pod("ns", "a", "1"), pod("ns", "a", "2")
	ts := tombstone(a2)
	n := c.applyAll([]fifo.Delta{delta(fifo.Added, a1), delta(fifo.Updated, a2), delta(fifo.Deleted, ts)})
	if n.Items[0].New != any(a1) || n.Items[0].Old != nil {
		t.Errorf("add carries %v/%v", n.Items[0].Old, n.Items[0].New)
	}
	if n.Items[1].Old != any(a1) || n.Items[1].New != any(a2) {
		t.Errorf("update carries %v/%v", n.Items[1].Old, n.Items[1].New)
	}
	if n.Items[2].New != any(ts) {
		t.Errorf("delete carries %v", n.Items[2].New)
	}
}

// TestCoreApplyCarriesStamps checks that notifications carry their delta's
// Received stamp, for the handler event age.
func TestCoreApplyCarriesStamps(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	c.subscribe(&Subscribe{ID: 1})
	now := time.Now()
	ds := []fifo.Delta{delta(fifo.Added, pod("ns", "a", "1")), delta(fifo.Updated, pod("ns", "a", "2")),
		delta(fifo.Deleted, pod("ns", "a", "3")), delta(fifo.Added, pod("ns", "b", "4"))}
	for i := range ds[:3] {
		ds[i].Received = telemetry.StampAt(now.Add(-time.Duration(i+1) * time.Second))
	}
	n := c.applyAll(ds)
	for i, it := range n.Items {
		if it.Received != ds[i].Received {
			t.Errorf("notification %d (%s): stamp %v, want its delta's %v", i, it.Type, it.Received, ds[i].Received)
		}
	}
	if !n.Items[3].Received.IsZero() {
		t.Error("unstamped delta's notification stamped")
	}
}

func TestCoreApplyLargeBatch(t *testing.T) {
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	c, _ := newTestCore(s)
	c.subscribe(&Subscribe{ID: 1})
	const n = 3*applyChunk + 17
	deltas := make([]fifo.Delta, n)
	for i := range deltas {
		deltas[i] = delta(fifo.Added, pod("ns", strconv.Itoa(i), strconv.Itoa(i)))
	}
	got := c.applyAll(deltas)
	if len(got.Items) != n || s.Len() != n {
		t.Fatalf("%d notifications, %d cached, want %d", len(got.Items), s.Len(), n)
	}
	for i, it := range got.Items {
		if it.Key() != deltas[i].Key {
			t.Fatalf("item %d is %s, want %s: order lost", i, it.Key(), deltas[i].Key)
		}
	}
	if keys, _ := s.IndexKeys(cache.NamespaceIndex, "ns"); len(keys) != n {
		t.Fatalf("namespace index has %d keys", len(keys))
	}
	if rv := s.LastStoreSyncResourceVersion(); rv != strconv.Itoa(n-1) {
		t.Fatalf("LastStoreSyncResourceVersion = %q", rv)
	}
}

func TestCoreLastStoreSyncResourceVersion(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "5"))})
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "y", "6")), delta(fifo.Deleted, tombstone(pod("a", "x", "5")))})
	if rv := s.LastStoreSyncResourceVersion(); rv != "6" {
		t.Fatalf("LastStoreSyncResourceVersion = %q, want 6: a tombstone has no version", rv)
	}
}

// TestCoreResourceVersion: the cache's version moves as in client-go's
// AtomicFIFO informer: a list takes the list's version (the queue's
// bookmark after its items), a watch event its object's, a bookmark its
// own; a resync and a tombstone leave it.
func TestCoreResourceVersion(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	p := new(counts)
	c.subscribe(p.subscribe(1))
	rv := func(want string) {
		t.Helper()
		if got := s.LastStoreSyncResourceVersion(); got != want {
			t.Fatalf("LastStoreSyncResourceVersion = %q, want %q", got, want)
		}
	}
	initial := func(d fifo.Delta) fifo.Delta { d.InitialList = true; return d }

	// A list at RV 10 whose items are at 5 and 3.
	n := c.applyAll([]fifo.Delta{
		initial(delta(fifo.Replaced, pod("a", "x", "5"))),
		initial(delta(fifo.Replaced, pod("a", "y", "3"))),
		initial(fifo.NewBookmark("10")),
	})
	rv("10")
	if len(n.Items) != 2 || p.pending() != 2 || p.backlog() != 2 {
		t.Fatalf("%d notifications, pending %d, backlog %d: a bookmark is no notification", len(n.Items), p.pending(), p.backlog())
	}
	c.applyAll([]fifo.Delta{delta(fifo.Sync, pod("a", "x", "5"))})
	rv("10")
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "z", "11"))})
	rv("11")
	if n := c.applyAll([]fifo.Delta{fifo.NewBookmark("20")}); n != nil {
		t.Fatalf("a bookmark alone gave %d notifications", len(n.Items))
	}
	rv("20")
	c.applyAll([]fifo.Delta{delta(fifo.Deleted, pod("a", "z", "21"))})
	rv("21")
	c.applyAll([]fifo.Delta{delta(fifo.Deleted, tombstone(pod("a", "y", "3")))})
	rv("21")
	// A relist: tombstones, items, then its bookmark, in one batch.
	c.Step(&fifo.Batch{Atomic: true, Deltas: []fifo.Delta{
		delta(fifo.Deleted, tombstone(pod("a", "x", "5"))),
		delta(fifo.Replaced, pod("a", "w", "25")),
		fifo.NewBookmark("30"),
	}})
	rv("30")
	if keys := s.ListKeys(); len(keys) != 1 || keys[0] != "a/w" {
		t.Fatalf("cache %v after the relist", keys)
	}

	// An empty list at RV 7.
	s2 := NewStore(nil, nil)
	c2, _ := newTestCore(s2)
	c2.applyAll([]fifo.Delta{initial(fifo.NewBookmark("7"))})
	if got := s2.LastStoreSyncResourceVersion(); got != "7" {
		t.Fatalf("empty list: LastStoreSyncResourceVersion = %q, want 7", got)
	}
}

// TestCoreApplyBatchAtomic: an Atomic batch (a relist) is applied in one
// write-lock hold, so a reader never sees part of it, however large; the
// notifications keep the batch's order.
func TestCoreApplyBatchAtomic(t *testing.T) {
	const n = 20 * applyChunk
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	c.subscribe(&Subscribe{ID: 1})
	var old []fifo.Delta
	for i := range n {
		old = append(old, delta(fifo.Added, pod("ns", "old"+strconv.Itoa(i), "1")))
	}
	c.applyAll(old)

	// The relist: every old object goes, as many new ones come.
	var relist []fifo.Delta
	for i := range n {
		relist = append(relist, delta(fifo.Deleted, tombstone(pod("ns", "old"+strconv.Itoa(i), "1"))))
	}
	for i := range n {
		relist = append(relist, delta(fifo.Replaced, pod("ns", "new"+strconv.Itoa(i), "2")))
	}
	relist = append(relist, fifo.NewBookmark("2"))

	var mixed atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		once := sync.OnceFunc(func() { close(started) })
		for {
			var olds, news int
			for _, k := range s.ListKeys() {
				if strings.HasPrefix(k, "ns/old") {
					olds++
				} else {
					news++
				}
			}
			once()
			if !(olds == n && news == 0 || olds == 0 && news == n) {
				mixed.CompareAndSwap(nil, fmt.Sprintf("%d old, %d new", olds, news))
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	<-started
	msgs := c.Step(&fifo.Batch{Deltas: relist, Atomic: true})
	close(stop)
	<-done
	if m := mixed.Load(); m != nil {
		t.Fatalf("a reader saw part of the relist: %v", m)
	}
	// The listener's batch, then the acknowledgement to the queue.
	if len(msgs) != 2 || msgs[0].To != stage.ToListener(1) || msgs[1].To != stage.ToQueue {
		t.Fatalf("messages %+v, want a batch for listener 1 then Processed", msgs)
	}
	if p, ok := msgs[1].Body.(*fifo.Processed); !ok || p.Count != len(relist) {
		t.Fatalf("acknowledgement %+v, want Processed for %d deltas", msgs[1].Body, len(relist))
	}
	got := msgs[0].Body.(*Notifications)
	if len(got.Items) != 2*n {
		t.Fatalf("%d notifications, want %d", len(got.Items), 2*n)
	}
	for i, it := range got.Items {
		if it.Key() != relist[i].Key {
			t.Fatalf("notification %d is %s, want %s: order lost", i, it.Key(), relist[i].Key)
		}
	}
}

func TestCoreCounters(t *testing.T) {
	s := NewStore(nil, nil)
	tel := telemetry.Nop()
	c := NewCore(s.Writer(), Config{Telemetry: tel})
	p1 := new(counts)
	c.subscribe(p1.subscribe(1))
	c.subscribe(&Subscribe{ID: 2}) // nil counters are fine
	p3 := new(counts)
	c.subscribe(p3.subscribe(3))

	n := c.applyAll([]fifo.Delta{
		{Type: fifo.Replaced, Key: "a/x", Object: pod("a", "x", "1"), InitialList: true},
		{Type: fifo.Replaced, Key: "a/y", Object: pod("a", "y", "1"), InitialList: true},
		{Type: fifo.Deleted, Key: "a/z", Object: tombstone(pod("a", "z", "1")), InitialList: true},
		{Type: fifo.Updated, Key: "a/x", Object: pod("a", "x", "2")},
	})
	if len(n.Items) != 4 {
		t.Fatalf("%d items", len(n.Items))
	}
	for i, ctr := range []*counts{p1, p3} {
		if got := ctr.pending(); got != 3 {
			t.Errorf("listener %d: Pending = %d, want 3", i, got)
		}
		if got := ctr.backlog(); got != 4 {
			t.Errorf("listener %d: Backlog = %d, want 4", i, got)
		}
	}
	c.applyAll([]fifo.Delta{delta(fifo.Updated, pod("a", "x", "3"))})
	if p1.pending() != 3 || p1.backlog() != 5 {
		t.Errorf("after a second batch Pending = %d, Backlog = %d; want 3, 5", p1.pending(), p1.backlog())
	}
	if got := tel.Metrics.IndexerEvents.Load(); got != 5 {
		t.Errorf("IndexerEvents = %d, want 5", got)
	}
}

func TestCoreNoSubscribers(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	if n := c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "1"))}); n != nil {
		t.Fatalf("notifications without subscribers: %+v", n)
	}
	if s.Len() != 1 {
		t.Fatal("delta not applied")
	}
	c.subscribe(&Subscribe{ID: 1})
	if n := c.applyAll(nil); n != nil {
		t.Fatalf("notifications for an empty batch: %+v", n)
	}
	if n := c.applyAll([]fifo.Delta{{Type: 0, Key: "k", Object: "v"}}); n != nil {
		t.Fatalf("notifications for a batch of skipped deltas: %+v", n)
	}
}

func TestCoreLateSubscribe(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	early := &Subscribe{ID: 1}
	c.subscribe(early)
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "1")), delta(fifo.Added, pod("a", "y", "1"))})

	ctr := new(counts)
	pid := actor.NewPID("nonhost", "late")
	sub := ctr.subscribe(2)
	sub.Target, sub.Initial = pid, true
	initial := c.subscribe(sub)
	if initial == nil || !initial.Initial {
		t.Fatalf("initial batch = %+v", initial)
	}
	got := summarize(initial.Items)
	slices.SortFunc(got, func(a, b expected) int {
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	want := []expected{
		{Type: NotifyAdd, Key: "a/x", NewRV: "1", InitialList: true},
		{Type: NotifyAdd, Key: "a/y", NewRV: "1", InitialList: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("initial batch\n got %+v\nwant %+v", got, want)
	}
	if ctr.pending() != 2 || ctr.backlog() != 2 {
		t.Fatalf("Pending = %d, Backlog = %d; want 2, 2", ctr.pending(), ctr.backlog())
	}
	if ids := c.subscribers(); !slices.Equal(ids, []ListenerID{1, 2}) {
		t.Fatalf("Subscribers = %v", ids)
	}
	n := c.applyAll([]fifo.Delta{delta(fifo.Updated, pod("a", "x", "2"))})
	if n == nil || len(n.Items) != 1 || n.Initial {
		t.Fatalf("later batch = %+v", n)
	}
	if ctr.pending() != 2 || ctr.backlog() != 3 {
		t.Fatalf("after the later batch Pending = %d, Backlog = %d; want 2, 3", ctr.pending(), ctr.backlog())
	}

	// Initial on an empty cache: an empty initial batch, nothing pending.
	c2, _ := newTestCore(NewStore(nil, nil))
	p2 := new(counts)
	sub2 := p2.subscribe(1)
	sub2.Initial = true
	if n := c2.subscribe(sub2); n == nil || !n.Initial || len(n.Items) != 0 {
		t.Fatalf("initial batch for an empty cache: %+v", n)
	}
	if p2.pending() != 0 || p2.backlog() != 0 {
		t.Fatal("counters raised for an empty initial batch")
	}
	// Without Initial nothing is sent, even with a populated cache.
	if n := c.subscribe(&Subscribe{ID: 3}); n != nil {
		t.Fatalf("initial batch without Initial: %+v", n)
	}
}

func TestCoreUnsubscribe(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	pids := []*actor.PID{actor.NewPID("h", "1"), actor.NewPID("h", "2"), actor.NewPID("h", "3")}
	backlogs := make([]*counts, 3)
	for i, p := range pids {
		backlogs[i] = new(counts)
		sub := backlogs[i].subscribe(ListenerID(i + 1))
		sub.Target = p
		c.subscribe(sub)
	}
	c.Step(&Unsubscribe{ID: 2})
	c.Step(&Unsubscribe{ID: 2})  // idempotent
	c.Step(&Unsubscribe{ID: 99}) // unknown
	if ids := c.subscribers(); !slices.Equal(ids, []ListenerID{1, 3}) {
		t.Fatalf("Subscribers = %v", ids)
	}
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "1"))})
	if backlogs[1].backlog() != 0 || backlogs[0].backlog() != 1 || backlogs[2].backlog() != 1 {
		t.Fatalf("backlogs = %d %d %d", backlogs[0].backlog(), backlogs[1].backlog(), backlogs[2].backlog())
	}
	// Subscribing again with a known ID replaces the subscription.
	c.subscribe(&Subscribe{ID: 1, Target: pids[1]})
	if ids := c.subscribers(); !slices.Equal(ids, []ListenerID{3, 1}) {
		t.Fatalf("Subscribers after re-subscribe = %v", ids)
	}
	c.Step(&Unsubscribe{ID: 1})
	c.Step(&Unsubscribe{ID: 3})
	if n := c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "y", "1"))}); n != nil {
		t.Fatal("notifications after every listener left")
	}
}

func TestCoreResync(t *testing.T) {
	s := NewStore(nil, nil)
	c, clk := newTestCore(s)
	c.subscribe(&Subscribe{ID: 1, ResyncPeriod: 10 * time.Second})
	c.subscribe(&Subscribe{ID: 2, ResyncPeriod: 30 * time.Second})
	c.subscribe(&Subscribe{ID: 3})
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "1"))})
	syncBatch := func() *Notifications { return c.applyAll([]fifo.Delta{delta(fifo.Sync, pod("a", "x", "1"))}) }

	steps := []struct {
		advance time.Duration
		due     bool
		syncing []ListenerID
	}{
		{5 * time.Second, false, nil},
		{5 * time.Second, true, []ListenerID{1}}, // t=10: exactly due
		{1 * time.Second, false, nil},            // t=11: the set is replaced, now empty
		{9 * time.Second, true, []ListenerID{1}}, // t=20
		{10 * time.Second, true, []ListenerID{1, 2}},
		{0, false, nil},
	}
	var kept *Notifications
	for i, st := range steps {
		clk.Step(st.advance)
		if due := c.resyncDue(clk.Now()); due != st.due {
			t.Fatalf("step %d: ResyncDue = %v", i, due)
		}
		n := syncBatch()
		if !slices.Equal(n.Syncing, st.syncing) {
			t.Fatalf("step %d: Syncing = %v, want %v", i, n.Syncing, st.syncing)
		}
		if !n.Items[0].Sync {
			t.Fatalf("step %d: a same-RV Sync is not marked Sync", i)
		}
		for _, id := range []ListenerID{1, 2, 3} {
			if n.SyncsTo(id) != slices.Contains(st.syncing, id) {
				t.Fatalf("step %d: SyncsTo(%d) = %v", i, id, n.SyncsTo(id))
			}
		}
		if i == 1 {
			kept = n
		}
	}
	if !slices.Equal(kept.Syncing, []ListenerID{1}) {
		t.Fatalf("a sent batch's Syncing changed to %v", kept.Syncing)
	}
}

func TestCoreAddIndexers(t *testing.T) {
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	c, _ := newTestCore(s)
	c.applyAll([]fifo.Delta{
		delta(fifo.Added, podIP("a", "x", "1", "10.0.0.1")),
		delta(fifo.Added, podIP("b", "y", "1", "10.0.0.1")),
		delta(fifo.Added, podIP("b", "z", "1", "10.0.0.2")),
		delta(fifo.Added, pod("b", "w", "1")),
	})
	if err := c.addIndexers(cache.Indexers{"byPodIP": podIPIndex}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.IndexKeys("byPodIP", "10.0.0.1"); !slices.Equal(keys, []string{"a/x", "b/y"}) {
		t.Fatalf("IndexKeys = %v", keys)
	}
	if vals := sorted(s.ListIndexFuncValues("byPodIP")); !slices.Equal(vals, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("ListIndexFuncValues = %v", vals)
	}
	// Later deltas maintain the new index.
	c.applyAll([]fifo.Delta{delta(fifo.Updated, podIP("b", "y", "2", "10.0.0.3")), delta(fifo.Deleted, pod("a", "x", "1"))})
	if keys, _ := s.IndexKeys("byPodIP", "10.0.0.1"); len(keys) != 0 {
		t.Fatalf("stale keys %v", keys)
	}
	if vals := sorted(s.ListIndexFuncValues("byPodIP")); !slices.Equal(vals, []string{"10.0.0.2", "10.0.0.3"}) {
		t.Fatalf("ListIndexFuncValues = %v", vals)
	}
	if err := c.addIndexers(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "new": podIPIndex}); err == nil {
		t.Fatal("no error for a conflicting name")
	}
	if _, ok := s.GetIndexers()["new"]; ok {
		t.Fatal("a conflicting AddIndexers added an index")
	}
}

// TestCoreNewListenerSyncing: like client-go's processor, a listener is in
// the syncing set from its subscription until the next resync check, so
// with no resync period anywhere a relist's same-resourceVersion updates
// reach every handler (client-go v0.37 delivers them; seen on a real
// apiserver in e2e).
func TestCoreNewListenerSyncing(t *testing.T) {
	s := NewStore(nil, nil)
	c, clk := newTestCore(s)
	c.subscribe(&Subscribe{ID: 1})
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "1"))})
	relist := func() *Notifications { return c.applyAll([]fifo.Delta{delta(fifo.Replaced, pod("a", "x", "1"))}) }
	if n := relist(); !n.Items[0].Sync || !n.SyncsTo(1) {
		t.Fatalf("no resync period: same-RV update Sync=%v, SyncsTo(1)=%v; want true, true", n.Items[0].Sync, n.SyncsTo(1))
	}
	c.subscribe(&Subscribe{ID: 2, ResyncPeriod: time.Minute})
	if n := relist(); !n.SyncsTo(1) || !n.SyncsTo(2) {
		t.Fatalf("before the first resync check: syncing %v, want [1 2]", n.Syncing)
	}
	kept := relist()
	// The first check leaves only the due listeners, as client-go's
	// shouldResync does.
	clk.Step(time.Second)
	c.resyncDue(clk.Now())
	if n := relist(); n.SyncsTo(1) || n.SyncsTo(2) {
		t.Fatalf("after a resync check with nobody due: syncing %v", n.Syncing)
	}
	c.subscribe(&Subscribe{ID: 3})
	if n := relist(); !slices.Equal(n.Syncing, []ListenerID{3}) {
		t.Fatalf("a listener added later: syncing %v, want [3]", n.Syncing)
	}
	c.Step(&Unsubscribe{ID: 3})
	if n := relist(); n.SyncsTo(3) {
		t.Fatalf("unsubscribed listener still syncing: %v", n.Syncing)
	}
	if !slices.Equal(kept.Syncing, []ListenerID{1, 2}) {
		t.Fatalf("a sent batch's Syncing changed to %v", kept.Syncing)
	}
}

// TestCoreExpect checks that sizing the cache for a first list keeps what
// it holds: Expect only acts on an empty cache.
func TestCoreExpect(t *testing.T) {
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	c := NewCore(s.Writer(), Config{})
	c.w.Expect(1000)
	c.applyAll([]fifo.Delta{delta(fifo.Added, pod("a", "x", "1")), delta(fifo.Added, pod("a", "y", "1"))})
	c.w.Expect(1000)
	c.w.Expect(0)
	if keys := s.ListKeys(); len(keys) != 2 {
		t.Fatalf("cache holds %v after Expect, want a/x and a/y", keys)
	}
	if keys, _ := s.IndexKeys(cache.NamespaceIndex, "a"); len(keys) != 2 {
		t.Fatalf("namespace index holds %v", keys)
	}
}

// TestNotificationKeyAndSize checks the key a notification derives (for
// logs) and that its layout stays at 48 bytes: every backlogged
// notification of a slow handler costs that.
func TestNotificationKeyAndSize(t *testing.T) {
	p := pod("a", "x", "1")
	for _, c := range []struct {
		n    Notification
		want string
	}{
		{Notification{Type: NotifyAdd, New: p}, "a/x"},
		{Notification{Type: NotifyDelete, New: cache.DeletedFinalStateUnknown{Key: "a/x", Obj: p}}, "a/x"},
		{Notification{Type: NotifyAdd, New: "no metadata"}, "<no key: object has no meta: object does not implement the Object interfaces>"},
	} {
		if got := c.n.Key(); got != c.want {
			t.Errorf("Key() = %q, want %q", got, c.want)
		}
	}
	if size := unsafe.Sizeof(Notification{}); size != 48 {
		t.Errorf("Notification takes %d bytes, want 48", size)
	}
}

// sent records the messages the core returned, per recipient.
type sent struct {
	msgs map[stage.Addr][]any
}

func (s *sent) add(msgs []stage.Msg) {
	if s.msgs == nil {
		s.msgs = map[stage.Addr][]any{}
	}
	for _, m := range msgs {
		if _, ok := m.Body.(*DrainMarker); ok != (m.Mode == stage.Request) {
			panic(fmt.Sprintf("%T sent with mode %v", m.Body, m.Mode))
		}
		s.msgs[m.To] = append(s.msgs[m.To], m.Body)
	}
}

func (s *sent) take(to stage.Addr) []any {
	m := s.msgs[to]
	delete(s.msgs, to)
	return m
}

// TestCoreRouteCompactsForALaggingListener checks the compaction of small
// batches for a listener far behind: one marker, the items kept in order
// (resync items it is not due for left out, and out of its backlog), one
// batch when it answers, then back to shared batches once it has caught
// up; a listener that keeps up gets every shared batch meanwhile.
func TestCoreRouteCompactsForALaggingListener(t *testing.T) {
	s := NewStore(nil, nil)
	c := NewCore(s.Writer(), Config{})
	fast, slow := stage.ToListener(1), stage.ToListener(2)
	fastCounts, slowCounts := new(counts), new(counts)
	c.subscribe(fastCounts.subscribe(1))
	c.subscribe(slowCounts.subscribe(2))
	var out sent

	// Not behind: shared batches.
	n := c.applyAll([]fifo.Delta{delta(fifo.Added, pod("ns", "a", "1"))})
	out.add(c.routeMsgs(n))
	if got := out.take(slow); len(got) != 1 || got[0] != n {
		t.Fatalf("slow got %v, want the shared batch", got)
	}
	out.take(fast)

	slowCounts.unseen(compactAbove) // far behind now
	c.resyncDue(time.Now())         // nobody due: the syncing set is empty
	var batches []*Notifications
	for i := 2; i <= 4; i++ {
		n := c.applyAll([]fifo.Delta{delta(fifo.Updated, pod("ns", "a", strconv.Itoa(i)))})
		out.add(c.routeMsgs(n))
		batches = append(batches, n)
	}
	// A resync (same resourceVersion) for nobody: left out of the array.
	n = c.applyAll([]fifo.Delta{delta(fifo.Sync, pod("ns", "a", "4"))})
	out.add(c.routeMsgs(n))
	batches = append(batches, n)
	if got := out.take(fast); len(got) != 4 {
		t.Fatalf("fast got %d messages, want the 4 shared batches", len(got))
	}
	if got := out.take(slow); len(got) != 1 || got[0] != drainMarker {
		t.Fatalf("slow got %v, want one DrainMarker", got)
	}
	if got, want := slowCounts.backlog(), int64(1+compactAbove+3); got != want {
		t.Fatalf("slow backlog %d, want %d (the resync item left out)", got, want)
	}

	// It answers: one batch with the three updates in order, and a marker.
	out.add(c.Step(&Drained{ID: 2}))
	got := out.take(slow)
	if len(got) != 2 || got[1] != drainMarker {
		t.Fatalf("after Drained slow got %v, want a batch and a marker", got)
	}
	b := got[0].(*Notifications)
	if want := []expected{
		{Type: NotifyUpdate, Key: "ns/a", OldRV: "1", NewRV: "2"},
		{Type: NotifyUpdate, Key: "ns/a", OldRV: "2", NewRV: "3"},
		{Type: NotifyUpdate, Key: "ns/a", OldRV: "3", NewRV: "4"},
	}; !reflect.DeepEqual(summarize(b.Items), want) {
		t.Fatalf("compacted batch %+v, want %+v", summarize(b.Items), want)
	}
	if !b.SyncsTo(2) {
		t.Fatal("the compacted batch does not resync its own listener")
	}

	// While the second marker is out, even a large batch is kept back, so
	// that the order holds.
	var large []fifo.Delta
	for i := range compactBelow {
		large = append(large, delta(fifo.Added, pod("ns", "l"+strconv.Itoa(i), "1")))
	}
	out.add(c.routeMsgs(c.applyAll(large)))
	if got := out.take(slow); len(got) != 0 {
		t.Fatalf("slow got %d messages while its marker is out", len(got))
	}
	out.add(c.Step(&Drained{ID: 2}))
	if got := out.take(slow); len(got) != 2 || len(got[0].(*Notifications).Items) != compactBelow {
		t.Fatalf("after the second Drained slow got %v", got)
	}
	// Caught up: the next Drained ends compaction.
	out.add(c.Step(&Drained{ID: 2}))
	if got := out.take(slow); len(got) != 0 {
		t.Fatalf("Drained with nothing kept back sent %v", got)
	}
	slowCounts.setBacklog(0)
	n = c.applyAll([]fifo.Delta{delta(fifo.Deleted, pod("ns", "a", "4"))})
	out.add(c.routeMsgs(n))
	if got := out.take(slow); len(got) != 1 || got[0] != n {
		t.Fatalf("after catching up slow got %v, want the shared batch", got)
	}

	// Unsubscribing drops what is kept back, and its counts.
	slowCounts.setBacklog(compactAbove + 1)
	out.add(c.routeMsgs(c.applyAll([]fifo.Delta{delta(fifo.Added, pod("ns", "z", "1"))})))
	before := slowCounts.backlog()
	c.Step(&Unsubscribe{ID: 2})
	if got := slowCounts.backlog(); got != before-1 {
		t.Fatalf("backlog %d after unsubscribing, want %d", got, before-1)
	}
	out.add(c.Step(&Drained{ID: 2})) // unknown by now: ignored
	if got := out.take(slow); len(got) != 1 || got[0] != drainMarker {
		t.Fatalf("slow got %v", got)
	}
}

// TestCoreRouteCompactsInChunks checks that notifications kept back for a
// lagging listener go out in chunks of compactChunk, in order, and that
// unsubscribing takes all of them out of its counters.
func TestCoreRouteCompactsInChunks(t *testing.T) {
	c := NewCore(NewStore(nil, nil).Writer(), Config{})
	slow := stage.ToListener(1)
	ctr := new(counts)
	c.subscribe(ctr.subscribe(1))
	ctr.unseen(compactAbove + 1)
	var out sent
	const n = 2*compactChunk + 88
	for i := range n {
		out.add(c.routeMsgs(c.applyAll([]fifo.Delta{delta(fifo.Added, pod("ns", "p"+strconv.Itoa(i), "1"))})))
	}
	if got := out.take(slow); len(got) != 1 || got[0] != drainMarker {
		t.Fatalf("got %v, want one marker", got)
	}
	out.add(c.Step(&Drained{ID: 1}))
	got := out.take(slow)
	if len(got) != 4 || got[3] != drainMarker {
		t.Fatalf("got %d messages, want 3 batches and a marker", len(got))
	}
	i := 0
	for j, size := range []int{compactChunk, compactChunk, 88} {
		b := got[j].(*Notifications)
		if len(b.Items) != size {
			t.Fatalf("batch %d has %d items, want %d", j, len(b.Items), size)
		}
		for _, it := range b.Items {
			if k := it.Key(); k != "ns/p"+strconv.Itoa(i) {
				t.Fatalf("item %d is %s: order lost", i, k)
			}
			i++
		}
	}
	// Kept back again, then unsubscribed: the counters lose those items.
	for i := range compactChunk + 10 {
		out.add(c.routeMsgs(c.applyAll([]fifo.Delta{delta(fifo.Added, pod("ns", "q"+strconv.Itoa(i), "1"))})))
	}
	before := ctr.backlog()
	c.Step(&Unsubscribe{ID: 1})
	if got, want := ctr.backlog(), before-int64(compactChunk+10); got != want {
		t.Fatalf("backlog %d after unsubscribing, want %d", got, want)
	}
}

// recordingDetector is a cache.MutationDetector that records what it is fed.
type recordingDetector struct{ added []any }

func (d *recordingDetector) AddObject(obj any)   { d.added = append(d.added, obj) }
func (d *recordingDetector) Run(<-chan struct{}) {}

// TestCoreFeedsMutationDetector: every object written to the cache (add,
// update, resync) goes to the mutation detector, as client-go's informer
// feeds it from OnAdd and OnUpdate; deletes do not.
func TestCoreFeedsMutationDetector(t *testing.T) {
	a1, a2, b1 := pod("ns", "a", "1"), pod("ns", "a", "2"), pod("ns", "b", "1")
	c, _ := newTestCore(NewStore(nil, nil))
	c.applyAll([]fifo.Delta{delta(fifo.Added, a1)})
	d := &recordingDetector{}
	c.detector = d
	c.applyAll([]fifo.Delta{delta(fifo.Updated, a2), delta(fifo.Added, b1), delta(fifo.Sync, b1), delta(fifo.Deleted, a2)})
	want := []any{a2, b1, b1}
	if len(d.added) != len(want) {
		t.Fatalf("detector got %d objects, want %d", len(d.added), len(want))
	}
	for i := range want {
		if d.added[i] != want[i] {
			t.Fatalf("object %d: got %v, want %v (the cached object itself)", i, d.added[i], want[i])
		}
	}
}

// Subscribed is set by the Step that subscribes the listener, the one that
// takes its initial list, and not before.
func TestSubscribedSetWithTheInitialList(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	c.Step(&fifo.Batch{Deltas: []fifo.Delta{delta(fifo.Added, pod("ns", "a", "1"))}})
	var n counts
	sub := n.subscribe(1)
	sub.Initial = true
	if n.sent.Subscribed.Load() {
		t.Fatal("subscribed before the Subscribe was stepped")
	}
	c.Step(sub)
	if !n.sent.Subscribed.Load() || n.sent.Initial.Load() != 1 {
		t.Fatalf("after the Subscribe: subscribed %v, initial list %d; want true, 1", n.sent.Subscribed.Load(), n.sent.Initial.Load())
	}
}

// TestCoreBatchReleased: the batch of the cache's changes sent to two
// listeners is reused only once both have released it, and then without
// the objects it referenced; a listener kept back (far behind) is not
// waited for, and an initial batch (not pooled) is left as it is.
func TestCoreBatchReleased(t *testing.T) {
	s := NewStore(nil, nil)
	c, _ := newTestCore(s)
	var one, two, far counts
	c.subscribe(one.subscribe(1))
	c.subscribe(two.subscribe(2))
	c.subscribe(far.subscribe(3))
	far.unseen(compactAbove + 1)
	n := c.applyAll([]fifo.Delta{delta(fifo.Added, pod("ns", "a", "1")), delta(fifo.Added, pod("ns", "b", "1"))})
	sentTo := 0
	for _, m := range c.routeMsgs(n) {
		if m.Body == any(n) {
			sentTo++
		}
	}
	if sentTo != 2 || !n.pooled || n.refs.Load() != 2 {
		t.Fatalf("sent to %d listeners, pooled %v, refs %d; want 2, true, 2", sentTo, n.pooled, n.refs.Load())
	}
	items := n.Items
	n.Release()
	if len(n.Items) != 2 || items[0].New == nil {
		t.Fatalf("reused after one release of two: %d items", len(n.Items))
	}
	n.Release()
	if len(n.Items) != 0 || items[0].New != nil || items[1].New != nil || n.Syncing != nil {
		t.Fatalf("not recycled after the last release: %d items, first %v", len(n.Items), items[0].New)
	}

	initial := c.subscribe(&Subscribe{ID: 4, Initial: true})
	initial.Release()
	if len(initial.Items) != 2 || initial.pooled {
		t.Fatalf("an initial batch was recycled: %d items", len(initial.Items))
	}
}
