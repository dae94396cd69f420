package listener

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/stage"
)

// note parses one notification of object ns/a: "add 1", "add 1 initial",
// "update 1 2", "delete 2", "tomb 2" (a delete with a
// DeletedFinalStateUnknown), where the numbers are resourceVersions; a
// number ending in ' is of the recreated object (another UID), as a
// relist that finds it recreated sends "update 1 2'".
func note(s string) indexer.Notification {
	f := strings.Fields(s)
	o := func(rv string) *corev1.Pod {
		if v, ok := strings.CutSuffix(rv, "'"); ok {
			p := pod("a", v)
			p.UID = "uid-a'"
			return p
		}
		return pod("a", rv)
	}
	switch f[0] {
	case "add":
		return indexer.Notification{Type: indexer.NotifyAdd, New: o(f[1]), InitialList: len(f) > 2}
	case "update":
		return indexer.Notification{Type: indexer.NotifyUpdate, Old: o(f[1]), New: o(f[2])}
	case "delete":
		return indexer.Notification{Type: indexer.NotifyDelete, New: o(f[1])}
	case "tomb":
		return indexer.Notification{Type: indexer.NotifyDelete, New: cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: o(f[1])}}
	}
	panic(s)
}

// TestCoalesceMerge checks the merge table (PendingKey.merge): what the
// handler is called with for one key's notifications taken in while it is
// busy, and that every notification taken in leaves the backlog once
// delivered, merged away or dropped.
func TestCoalesceMerge(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []string
		initial int64 // initial-list notifications released without a call
	}{
		{in: []string{"add 1"}, want: []string{"add ns/a 1"}},
		{in: []string{"add 1 initial", "update 1 2", "update 2 3"}, want: []string{"add ns/a 3 initial"}},
		{in: []string{"add 1", "delete 1"}, want: nil},
		{in: []string{"add 1 initial", "update 1 2", "tomb 2"}, want: nil, initial: 1},
		{in: []string{"update 1 2", "update 2 3"}, want: []string{"update ns/a 1->3"}},
		{in: []string{"update 1 1", "update 1 2"}, want: []string{"update ns/a 1->2"}},
		{in: []string{"update 1 2", "delete 2"}, want: []string{"delete ns/a 2"}},
		{in: []string{"update 1 2", "tomb 2"}, want: []string{"delete ns/a tomb(2)"}},
		// A relist found the object recreated; the new one is deleted
		// before the handler had the update: it is told of the delete of
		// the one it saw, never of one it did not.
		{in: []string{"update 1 2'"}, want: []string{"update ns/a 1->2'"}},
		{in: []string{"update 1 2'", "update 2' 3'"}, want: []string{"update ns/a 1->3'"}},
		{in: []string{"update 1 2'", "delete 3'"}, want: []string{"delete ns/a tomb(1)"}},
		{in: []string{"update 1 2'", "tomb 2'"}, want: []string{"delete ns/a tomb(1)"}},
		{in: []string{"update 1 2'", "delete 2'", "add 4"}, want: []string{"delete ns/a tomb(1)", "add ns/a 4"}},
		{in: []string{"delete 1", "add 5"}, want: []string{"delete ns/a 1", "add ns/a 5"}},
		{in: []string{"delete 1", "add 5", "update 5 6"}, want: []string{"delete ns/a 1", "add ns/a 6"}},
		{in: []string{"delete 1", "add 5", "delete 5"}, want: []string{"delete ns/a 1"}},
		{in: []string{"delete 1", "add 5", "tomb 5", "add 7"}, want: []string{"delete ns/a 1", "add ns/a 7"}},
		{in: []string{"update 1 2", "delete 2", "add 5", "update 5 6"}, want: []string{"delete ns/a 2", "add ns/a 6"}},
		{in: []string{"add 1", "delete 1", "add 2"}, want: []string{"add ns/a 2"}},
		// Not in a consistent stream: the latest object still wins.
		{in: []string{"add 1", "add 2"}, want: []string{"add ns/a 2"}},
		{in: []string{"update 1 2", "add 3"}, want: []string{"update ns/a 1->3"}},
		{in: []string{"delete 1", "update 1 2"}, want: []string{"delete ns/a 1", "add ns/a 2"}},
		{in: []string{"delete 1", "tomb 2"}, want: []string{"delete ns/a tomb(2)"}},
		{in: []string{"delete 1", "add 2", "add 3"}, want: []string{"delete ns/a 1", "add ns/a 3"}},
	} {
		t.Run(strings.Join(tc.in, ","), func(t *testing.T) {
			c, p := newCore(1, true)
			items := make([]indexer.Notification, len(tc.in))
			var initial int64
			for i, s := range tc.in {
				items[i] = note(s)
				if items[i].InitialList {
					initial++
				}
			}
			c.inflight = &PendingKey{} // the handler is busy
			if msgs := c.Step(&indexer.Notifications{Items: items}); msgs != nil {
				t.Fatalf("sent %+v while the runner is busy", msgs)
			}
			if p.initial() != tc.initial {
				t.Errorf("%d initial-list notifications released before delivery; want %d", p.initial(), tc.initial)
			}
			runAll(t, c, p, c.Step(CallsDoneMsg))
			if !reflect.DeepEqual(p.calls, tc.want) {
				t.Errorf("calls %q; want %q", p.calls, tc.want)
			}
			if p.done() != int64(len(tc.in)) || p.initial() != initial {
				t.Errorf("done %d (initial %d); want %d (%d)", p.done(), p.initial(), len(tc.in), initial)
			}
			if c.pending.Len() != 0 || len(c.pending.byKey) != 0 || len(c.pending.queue) != 0 {
				t.Errorf("left pending: %d held, %d keys, %d queued", c.pending.Len(), len(c.pending.byKey), len(c.pending.queue))
			}
		})
	}
}

// TestCoalesceKeyOrder: keys are delivered in the order their first
// pending notification came; a key delivered and changed again goes last.
func TestCoalesceKeyOrder(t *testing.T) {
	c, p := newCore(1, true)
	batch := func(items ...indexer.Notification) []indexer.Notification { return items }
	a1, a2, a3 := pod("a", "1"), pod("a", "2"), pod("a", "3")
	b1, b2 := pod("b", "1"), pod("b", "2")
	c1 := pod("c", "1")
	c.inflight = &PendingKey{}
	c.Step(&indexer.Notifications{Items: batch(
		indexer.Notification{Type: indexer.NotifyAdd, New: a1},
		indexer.Notification{Type: indexer.NotifyAdd, New: b1},
		indexer.Notification{Type: indexer.NotifyUpdate, Old: a1, New: a2},
	)})
	msgs := c.Step(CallsDoneMsg)
	p.run(msgs[0].Body.(*Calls)) // a, then the runner is busy again
	c.Step(&indexer.Notifications{Items: batch(
		indexer.Notification{Type: indexer.NotifyUpdate, Old: a2, New: a3},
		indexer.Notification{Type: indexer.NotifyAdd, New: c1},
		indexer.Notification{Type: indexer.NotifyUpdate, Old: b1, New: b2},
	)})
	runAll(t, c, p, c.Step(CallsDoneMsg))
	want := []string{"add ns/a 2", "add ns/b 2", "update ns/a 2->3", "add ns/c 1"}
	if !reflect.DeepEqual(p.calls, want) {
		t.Errorf("calls %q; want %q", p.calls, want)
	}
}

// storyChecker is a handler that checks, beyond informertest.View, the
// story rules that involve UIDs: an update never changes the object's UID
// (a recreated object is a delete then an add), and every object the
// handler saw and that is gone was deleted for it.
type storyChecker struct {
	view    *informertest.View
	holds   map[string]types.UID // key → UID the handler holds
	saw     map[types.UID]bool   // UIDs the handler was given
	deleted map[types.UID]bool   // UIDs it was told were deleted
	// uidChanges counts, per key, the updates changing the UID that the
	// stream sent (a relist found the object recreated); only those may
	// reach the handler as updates.
	uidChanges map[string]int
	errs       []string
}

func newStoryChecker() *storyChecker {
	return &storyChecker{view: informertest.NewView(), holds: map[string]types.UID{}, saw: map[types.UID]bool{}, deleted: map[types.UID]bool{}}
}

func uidOf(obj any) types.UID {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	return obj.(*corev1.Pod).UID
}

func (s *storyChecker) handler() cache.ResourceEventHandler {
	v := s.view.Handler()
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			v.AddFunc(obj, initial)
			s.holds[informertest.Key(obj)] = uidOf(obj)
			s.saw[uidOf(obj)] = true
		},
		UpdateFunc: func(old, obj any) {
			v.UpdateFunc(old, obj)
			if k := informertest.Key(obj); uidOf(old) != uidOf(obj) {
				if s.uidChanges == nil || s.uidChanges[k] == 0 {
					s.errs = append(s.errs, fmt.Sprintf("update of %s changes UID %s to %s", k, uidOf(old), uidOf(obj)))
				} else {
					s.uidChanges[k]--
				}
				// The object it saw is gone: the update told it so.
				s.deleted[uidOf(old)] = true
			}
			if h := s.holds[informertest.Key(obj)]; h != uidOf(old) {
				s.errs = append(s.errs, fmt.Sprintf("update of %s from UID %s; handler held UID %q", informertest.Key(obj), uidOf(old), h))
			}
			s.holds[informertest.Key(obj)] = uidOf(obj)
			s.saw[uidOf(obj)] = true
		},
		DeleteFunc: func(obj any) {
			v.DeleteFunc(obj)
			k := informertest.Key(obj)
			if h := s.holds[k]; h != uidOf(obj) {
				s.errs = append(s.errs, fmt.Sprintf("delete of %s UID %s; handler held UID %q", k, uidOf(obj), h))
			}
			delete(s.holds, k)
			s.deleted[uidOf(obj)] = true
		},
	}
}

// streamModel makes a random consistent notification stream, as the
// indexer sends one, over a few keys, and keeps the cache it describes.
type streamModel struct {
	rng  *rand.Rand
	keys int
	objs map[string]*corev1.Pod
	rv   int
	uid  int
	// live lists the UIDs that are in the cache.
	live map[types.UID]bool
	// uidChanges counts, per key, the updates that changed the UID.
	uidChanges map[string]int
}

func (m *streamModel) next() indexer.Notification {
	name := fmt.Sprint("p", m.rng.Intn(m.keys))
	key := "ns/" + name
	cur := m.objs[key]
	m.rv++
	rv := fmt.Sprint(m.rv)
	if cur == nil {
		m.uid++
		o := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, UID: types.UID(fmt.Sprint("u", m.uid))}}
		m.objs[key] = o
		m.live[o.UID] = true
		return indexer.Notification{Type: indexer.NotifyAdd, New: o}
	}
	switch r := m.rng.Intn(11); {
	case r == 10:
		// A relist found the object recreated: the indexer sends an
		// update from the old object to the new one.
		m.uid++
		o := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, UID: types.UID(fmt.Sprint("u", m.uid))}}
		m.objs[key] = o
		delete(m.live, cur.UID)
		m.live[o.UID] = true
		m.uidChanges[key]++
		return indexer.Notification{Type: indexer.NotifyUpdate, Old: cur, New: o}
	case r < 6:
		o := cur.DeepCopy()
		o.ResourceVersion = rv
		m.objs[key] = o
		return indexer.Notification{Type: indexer.NotifyUpdate, Old: cur, New: o}
	case r < 7: // resync
		return indexer.Notification{Type: indexer.NotifyUpdate, Old: cur, New: cur, Sync: true}
	default:
		delete(m.objs, key)
		delete(m.live, cur.UID)
		if r == 9 {
			return indexer.Notification{Type: indexer.NotifyDelete, New: cache.DeletedFinalStateUnknown{Key: key, Obj: cur}}
		}
		return indexer.Notification{Type: indexer.NotifyDelete, New: cur}
	}
}

func (m *streamModel) snapshot() map[string]string {
	out := map[string]string{}
	for k, o := range m.objs {
		out[k] = o.ResourceVersion
	}
	return out
}

// TestCoalesceRandomStreams feeds random consistent streams (an initial
// list, then adds, updates, resyncs, deletes, tombstones and recreations)
// to a coalescing core in random batches, the handler taking a random
// number of pending keys between batches. The handler must end with the
// final cache, see a correct story (informertest.View and storyChecker),
// and the core must never hold more than one notification per key (two
// for a recreated one) nor leave anything counted.
func TestCoalesceRandomStreams(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		m := &streamModel{rng: rng, keys: 1 + rng.Intn(20), objs: map[string]*corev1.Pod{}, live: map[types.UID]bool{}, uidChanges: map[string]int{}}
		s := newStoryChecker()
		s.uidChanges = m.uidChanges
		h := s.handler()
		c, l := newCore(1, true)
		l.h = h
		var in, initial int64
		var running *Calls // what the runner was given
		took := func(msgs []stage.Msg) {
			for _, c := range handlerCalls(t, 1, msgs) {
				running = c
			}
		}
		// The initial list.
		var items []indexer.Notification
		for i := 0; i < m.keys/2; i++ {
			it := m.next()
			if it.Type == indexer.NotifyAdd {
				it.InitialList = true
				initial++
			}
			items = append(items, it)
		}
		for step := 0; step < 50; step++ {
			for n := rng.Intn(40); n > 0; n-- {
				items = append(items, m.next())
			}
			in += int64(len(items))
			took(c.Step(&indexer.Notifications{Items: items, Syncing: []indexer.ListenerID{1}, Owned: rng.Intn(2) == 0}))
			items = nil
			if held, max := c.pending.Len(), len(c.pending.byKey); held > 2*max || len(c.pending.byKey) > m.keys {
				t.Fatalf("seed %d: %d held for %d keys (stream over %d)", seed, held, max, m.keys)
			}
			for n := rng.Intn(m.keys + 1); n > 0 && running != nil; n-- {
				r := running
				running = nil
				l.run(r)
				took(c.Step(CallsDoneMsg))
			}
		}
		for running != nil {
			r := running
			running = nil
			l.run(r)
			took(c.Step(CallsDoneMsg))
		}
		if c.pending.Len() != 0 {
			t.Fatalf("seed %d: %d left pending", seed, c.pending.Len())
		}
		if diff := informertest.Diff(m.snapshot(), s.view.Snapshot()); diff != "" {
			t.Fatalf("seed %d: handler's view differs from the cache: %s", seed, diff)
		}
		if errs := append(s.view.Errors(), s.errs...); len(errs) > 0 {
			t.Fatalf("seed %d: story broken: %q", seed, errs)
		}
		for uid := range s.saw {
			if !m.live[uid] && !s.deleted[uid] {
				t.Fatalf("seed %d: handler saw %s, which is gone, and got no delete of it", seed, uid)
			}
		}
		if l.done() != in || l.initial() != initial {
			t.Fatalf("seed %d: done %d (initial %d); want %d (%d)", seed, l.done(), l.initial(), in, initial)
		}
	}
}

// runAll plays the handler runner: it makes the calls the core sent,
// answers, and so on until the core sends nothing more.
func runAll(t *testing.T, c *Core, p *pathLog, msgs []stage.Msg) {
	t.Helper()
	for len(msgs) > 0 {
		calls := handlerCalls(t, c.id, msgs)
		if len(calls) != 1 {
			t.Fatalf("sent %+v; want one Calls to the handler runner", msgs)
		}
		calls[0].Take()
		p.run(calls[0])
		msgs = c.Step(CallsDoneMsg)
	}
}

// TestCoalesceRunnerRestart: when the listener restarts, its runner (a
// child) is stopped first. A key it had not taken (its mailbox is dropped)
// goes to the new runner; a key it had taken was run, and its CallsDone
// comes: the new runner gets the next key after it, and nothing twice.
func TestCoalesceRunnerRestart(t *testing.T) {
	for _, taken := range []bool{false, true} {
		t.Run(fmt.Sprint("taken=", taken), func(t *testing.T) {
			c, p := newCore(1, true)
			msgs := c.Step(&indexer.Notifications{Items: []indexer.Notification{
				{Type: indexer.NotifyAdd, New: pod("a", "1")},
				{Type: indexer.NotifyAdd, New: pod("b", "1")},
			}})
			calls := handlerCalls(t, 1, msgs)
			if len(calls) != 1 {
				t.Fatalf("sent %v, want a's Calls", msgs)
			}
			first := calls[0]
			if taken {
				first.Take()
				p.run(first) // the old runner made a's calls, then stopped
			}
			held := 0
			c.Held(func(*PendingKey) { held++ })
			if want := map[bool]int{false: 2, true: 1}[taken]; held != want {
				t.Errorf("Held: %d keys, want %d", held, want)
			}
			c.Step(Lifecycle(stage.Restarting))
			msgs = c.Step(Lifecycle(stage.Started))
			if taken {
				if msgs != nil {
					t.Fatalf("Started sent %v while a's CallsDone is on its way", msgs)
				}
				msgs = c.Step(CallsDoneMsg) // the old runner's answer
			} else if calls := handlerCalls(t, 1, msgs); len(calls) != 1 || calls[0] != first {
				t.Fatalf("Started sent %v, want a's Calls again", msgs)
			}
			runAll(t, c, p, msgs)
			if want := []string{"add ns/a 1", "add ns/b 1"}; !reflect.DeepEqual(p.calls, want) {
				t.Errorf("calls %q, want %q", p.calls, want)
			}
			if p.done() != 2 {
				t.Errorf("done %d, want 2", p.done())
			}
		})
	}
}

// TestCoalesceReportsSynced: a Coalesced handler's listener takes its
// initial batch in itself: it sets InitialDone and reports to the
// informer that the registration may have synced; so it does when merging
// brings Pending to zero (an initial add cancelled by a delete).
func TestCoalesceReportsSynced(t *testing.T) {
	c, p := newCore(1, true)
	p.ctr.Sent.Initial.Add(1)
	msgs := c.Step(&indexer.Notifications{Initial: true, Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: pod("a", "1"), InitialList: true}}})
	if len(msgs) != 2 || msgs[0].To != stage.ToInformer || msgs[1].To != stage.ToHandler(1) || !p.ctr.InitialDone.Load() {
		t.Fatalf("initial batch: sent %+v, InitialDone %v; want Synced, then the Calls", msgs, p.ctr.InitialDone.Load())
	}
	if _, ok := msgs[0].Body.(*Synced); !ok {
		t.Fatalf("reported %T", msgs[0].Body)
	}
	c, p = newCore(1, true)
	c.inflight = &PendingKey{} // the runner is busy
	p.ctr.Sent.Initial.Add(1)
	c.Step(&indexer.Notifications{Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: pod("a", "1"), InitialList: true}}})
	msgs = c.Step(&indexer.Notifications{Items: []indexer.Notification{{Type: indexer.NotifyDelete, New: pod("a", "2")}}})
	if len(msgs) != 1 || msgs[0].To != stage.ToInformer || p.ctr.Pending() != 0 {
		t.Fatalf("add and delete merged away: sent %+v, Pending %d; want Synced, 0", msgs, p.ctr.Pending())
	}
}
