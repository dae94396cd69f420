package fifo

import (
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// op is one step of a script run against a queue.
type op func(t *testing.T, q *Queue)

func add(ds ...Delta) op { return func(_ *testing.T, q *Queue) { q.add(ds) } }
func replace(ds ...Delta) op {
	return func(_ *testing.T, q *Queue) { q.replace(ds, "1", nil) }
}
func resync() op { return func(_ *testing.T, q *Queue) { q.resync() } }

// inflight pops one batch and leaves it in flight; the batch is checked
// against want.
func inflight(want ...Delta) op {
	return func(t *testing.T, q *Queue) {
		t.Helper()
		wantDeltas(t, popOne(t, q), want)
	}
}
func done() op {
	return func(t *testing.T, q *Queue) {
		t.Helper()
		if q.head == q.lo {
			t.Fatalf("done: nothing in flight")
		}
		q.done(q.head - q.lo)
	}
}

type script struct {
	name   string
	known  []obj
	ops    []op
	want   []Delta // what popAll returns after the ops
	merged int64
}

func runScripts(t *testing.T, scripts []script) {
	t.Helper()
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			tel := telemetry.Nop()
			q := New(Config{Known: newKnown(sc.known...), Telemetry: tel})
			for _, step := range sc.ops {
				step(t, q)
			}
			if q.head > q.lo {
				q.done(q.head - q.lo)
			}
			wantDeltas(t, popAll(t, q), sc.want)
			if got := tel.Metrics.QueueMerged.Load(); got != sc.merged {
				t.Errorf("merged = %d, want %d", got, sc.merged)
			}
			if n := q.pendingKeys(); n != 0 {
				t.Errorf("%d keys pending after drain", n)
			}
			if got := tel.Metrics.QueueBacklog.Load(); got != 0 {
				t.Errorf("backlog = %d after drain", got)
			}
		})
	}
}

// TestQueue_detectLineJumpers is RealFIFO's: every delta in arrival order,
// a re-added key does not jump the line.
func TestQueue_detectLineJumpers(t *testing.T) {
	q := New(Config{MaxBatch: 1})
	q.add([]Delta{added("foo", 10), added("bar", 1), added("foo", 11), added("foo", 13), added("zab", 30)})
	got := popOne(t, q)
	q.done(1)
	q.add([]Delta{added("foo", 14)}) // must not jump ahead of bar, zab
	got = append(got, popAll(t, q)...)
	wantDeltas(t, got, []Delta{
		added("foo", 10), added("bar", 1), added("foo", 11), added("foo", 13), added("zab", 30), added("foo", 14),
	})
}

func TestQueue_addUpdateDelete(t *testing.T) {
	runScripts(t, []script{{
		name: "all deltas of a key, in order",
		ops:  []op{add(added("foo", 10), updated("foo", 12), added("bar", 1), deleted("foo", 15))},
		want: []Delta{added("foo", 10), updated("foo", 12), added("bar", 1), deleted("foo", 15)},
	}})
}

func TestQueue_deletes(t *testing.T) {
	runScripts(t, []script{
		{
			name:   "consecutive deletes collapse, tombstone then object keeps the object",
			known:  []obj{o("foo", 1)},
			ops:    []op{add(tomb("foo", o("foo", 1)), deleted("foo", 2))},
			want:   []Delta{deleted("foo", 2)},
			merged: 1,
		},
		{
			name:   "consecutive deletes collapse, object then tombstone keeps the object",
			known:  []obj{o("foo", 1)},
			ops:    []op{add(deleted("foo", 2), tomb("foo", o("foo", 1)))},
			want:   []Delta{deleted("foo", 2)},
			merged: 1,
		},
		{
			name:   "consecutive deletes collapse, both objects keeps the first",
			known:  []obj{o("foo", 1)},
			ops:    []op{add(deleted("foo", 2)), add(deleted("foo", 3))},
			want:   []Delta{deleted("foo", 2)},
			merged: 1,
		},
		{
			name:   "consecutive tombstones collapse",
			known:  []obj{o("foo", 1)},
			ops:    []op{add(tomb("foo", o("foo", 1)), tomb("foo", nil))},
			want:   []Delta{tomb("foo", o("foo", 1))},
			merged: 1,
		},
		{
			name:   "collapse keeps the queued delta's position",
			known:  []obj{o("foo", 1), o("bar", 1)},
			ops:    []op{add(tomb("foo", nil), updated("bar", 2), deleted("foo", 3))},
			want:   []Delta{deleted("foo", 3), updated("bar", 2)},
			merged: 1,
		},
		{
			name:   "add, delete, delete",
			ops:    []op{add(added("foo", 1), deleted("foo", 1), deleted("foo", 1))},
			want:   []Delta{added("foo", 1), deleted("foo", 1)},
			merged: 1,
		},
		{
			name: "deletes separated by an add do not collapse",
			ops:  []op{add(added("foo", 1), deleted("foo", 1), added("foo", 2), deleted("foo", 2))},
			want: []Delta{added("foo", 1), deleted("foo", 1), added("foo", 2), deleted("foo", 2)},
		},
		{
			name:   "delete of an unknown key is ignored",
			ops:    []op{add(deleted("foo", 1), added("bar", 1))},
			want:   []Delta{added("bar", 1)},
			merged: 1,
		},
		{
			name:  "delete of a cached key is queued",
			known: []obj{o("foo", 1)},
			ops:   []op{add(deleted("foo", 1))},
			want:  []Delta{deleted("foo", 1)},
		},
		{
			name:   "delete of a key added in the in-flight batch is queued",
			ops:    []op{add(added("foo", 1)), inflight(added("foo", 1)), add(deleted("foo", 1))},
			want:   []Delta{deleted("foo", 1)},
			merged: 0,
		},
		{
			name:   "delete of a key deleted in the in-flight batch is ignored, though still cached",
			known:  []obj{o("foo", 1)},
			ops:    []op{add(deleted("foo", 1)), inflight(deleted("foo", 1)), add(deleted("foo", 1), tomb("foo", nil))},
			merged: 2,
		},
		{
			name:  "delete after the in-flight delete and a re-add is queued",
			known: []obj{o("foo", 1)},
			ops: []op{add(deleted("foo", 1)), inflight(deleted("foo", 1)),
				add(added("foo", 2), deleted("foo", 2))},
			want: []Delta{added("foo", 2), deleted("foo", 2)},
		},
	})
}

func TestQueue_deleteLookupError(t *testing.T) {
	k := newKnown()
	k.err["foo"] = errLookup
	q := New(Config{Known: k})
	q.add([]Delta{deleted("foo", 1)})
	wantDeltas(t, popAll(t, q), []Delta{deleted("foo", 1)})
}

// TestQueue_replaceTombstones covers the keys a Replace must tombstone: the
// ones known only to the cache, only to the queue, only to the in-flight
// batch; RealFIFO's ReplaceMakesDeletions and
// ReplaceMakesDeletionsForObjectsOnlyInQueue cases, with this queue's order
// (tombstones first, then the listed items, then the list's bookmark).
func TestQueue_replaceTombstones(t *testing.T) {
	obj1, obj2 := o("foo", 2), o("foo", 3)
	runScripts(t, []script{
		{
			name:  "keys only in the cache",
			known: []obj{o("foo", 5), o("bar", 6), o("baz", 7)},
			ops:   []op{replace(replaced("foo", 5))},
			want: []Delta{
				initial(tomb("bar", o("bar", 6))),
				initial(tomb("baz", o("baz", 7))),
				initial(replaced("foo", 5)),
				initial(bm("1")),
			},
		},
		{
			name: "key only in the queue",
			ops:  []op{add(added("foo", 2)), replace()},
			want: []Delta{added("foo", 2), tomb("foo", obj1), bm("1")},
		},
		{
			name: "key only in the in-flight batch",
			ops:  []op{add(added("foo", 2)), inflight(added("foo", 2)), replace()},
			want: []Delta{tomb("foo", obj1), bm("1")},
		},
		{
			name:  "in-flight batch wins over the cache",
			known: []obj{o("foo", 1)},
			ops:   []op{add(updated("foo", 2)), inflight(updated("foo", 2)), replace()},
			want:  []Delta{tomb("foo", obj1), bm("1")},
		},
		{
			name:  "queue wins over the cache",
			known: []obj{o("foo", 1)},
			ops:   []op{add(updated("foo", 2)), replace()},
			want:  []Delta{updated("foo", 2), tomb("foo", obj1), bm("1")},
		},
		{
			name:  "queue wins over the in-flight batch",
			known: []obj{o("foo", 1)},
			ops:   []op{add(updated("foo", 2)), inflight(updated("foo", 2)), add(updated("foo", 3)), replace()},
			want:  []Delta{updated("foo", 3), tomb("foo", obj2), bm("1")},
		},
		{
			name:  "no tombstone when the key's last queued delta is Deleted",
			known: []obj{o("foo", 1)},
			ops:   []op{add(deleted("foo", 1)), replace()},
			want:  []Delta{deleted("foo", 1), bm("1")},
		},
		{
			name: "added then deleted object has a single delete",
			ops:  []op{add(added("foo", 2), deleted("foo", 2)), replace()},
			want: []Delta{added("foo", 2), deleted("foo", 2), bm("1")},
		},
		{
			name:  "no tombstone when the key's in-flight delta is Deleted, though still cached",
			known: []obj{o("foo", 1)},
			ops:   []op{add(deleted("foo", 1)), inflight(deleted("foo", 1)), replace()},
			want:  []Delta{bm("1")},
		},
		{
			name: "added, deleted, added: tombstone of the last object",
			ops:  []op{add(added("foo", 2), deleted("foo", 2), added("foo", 3)), replace()},
			want: []Delta{added("foo", 2), deleted("foo", 2), added("foo", 3), tomb("foo", obj2), bm("1")},
		},
		{
			name: "single tombstone over several replaces",
			ops:  []op{add(added("foo", 2)), replace(), replace()},
			want: []Delta{added("foo", 2), tomb("foo", obj1), bm("1"), bm("1")},
		},
		{
			name: "replaced objects get a single tombstone",
			ops:  []op{add(added("foo", 2)), replace(replaced("foo", 2)), replace(replaced("foo", 2)), replace()},
			want: []Delta{
				added("foo", 2), replaced("foo", 2), bm("1"), replaced("foo", 2), bm("1"),
				tomb("foo", obj1), bm("1"),
			},
		},
		{
			name:  "deleted and re-added key in the queue: tombstone of the queued object",
			known: []obj{o("foo", 5), o("bar", 6), o("baz", 7)},
			ops:   []op{add(deleted("bar", 6), added("bar", 100)), replace(replaced("foo", 5))},
			want: []Delta{
				deleted("bar", 6), added("bar", 100),
				tomb("bar", o("bar", 100)), tomb("baz", o("baz", 7)), replaced("foo", 5), bm("1"),
			},
		},
		{
			name:  "second replace tombstones the first one's item",
			known: []obj{o("foo", 5), o("bar", 6), o("baz", 7)},
			ops: []op{
				replace(replaced("bar", 100), replaced("foo", 5)),
				replace(replaced("foo", 5)),
			},
			want: []Delta{
				initial(tomb("baz", o("baz", 7))), initial(replaced("bar", 100)), initial(replaced("foo", 5)), initial(bm("1")),
				tomb("bar", o("bar", 100)), replaced("foo", 5), bm("1"),
			},
		},
		{
			name: "pending tombstones in queue order",
			ops:  []op{add(added("b", 1), added("a", 1), updated("b", 2)), replace()},
			want: []Delta{added("b", 1), added("a", 1), updated("b", 2), tomb("a", o("a", 1)), tomb("b", o("b", 2)), bm("1")},
		},
	})
}

// TestQueue_replaceWithDeleteDeltaIn is DeltaFIFO's
// TestDeltaFIFO_replaceWithDeleteDeltaIn.
func TestQueue_replaceWithDeleteDeltaIn(t *testing.T) {
	runScripts(t, []script{{
		name:  "delete then replace",
		known: []obj{o("foo", 1)},
		ops:   []op{add(deleted("foo", 1)), replace(replaced("foo", 2))},
		want:  []Delta{deleted("foo", 1), replaced("foo", 2), bm("1")},
	}})
}

func TestQueue_replaceTombstoneObjects(t *testing.T) {
	t.Run("cached tombstone is unwrapped", func(t *testing.T) {
		k := newKnown()
		k.set("foo", cache.DeletedFinalStateUnknown{Key: "foo", Obj: o("foo", 1)})
		q := New(Config{Known: k})
		q.replace(nil, "1", nil)
		wantDeltas(t, popAll(t, q), []Delta{initial(tomb("foo", o("foo", 1))), initial(bm("1"))})
	})
	t.Run("lookup error gives a tombstone without object", func(t *testing.T) {
		k := newKnown(o("foo", 1), o("bar", 1))
		k.err["foo"] = errLookup
		q := New(Config{Known: k})
		q.replace(nil, "1", nil)
		wantDeltas(t, popAll(t, q), []Delta{initial(tomb("foo", nil)), initial(tomb("bar", o("bar", 1))), initial(bm("1"))})
	})
	t.Run("key gone between ListKeys and GetByKey is absent", func(t *testing.T) {
		q := New(Config{Known: vanishing{}})
		q.replace(nil, "1", nil)
		wantDeltas(t, popAll(t, q), []Delta{initial(bm("1"))})
	})
}

type vanishing struct{}

func (vanishing) ListKeys() []string                 { return []string{"foo"} }
func (vanishing) GetByKey(string) (any, bool, error) { return nil, false, nil }

// TestQueue_HasSyncedCorrectOnDeletion is DeltaFIFO's: tombstones of the
// first Replace count towards HasSynced, and HasSynced waits for Done. A
// first list against a cache that holds objects is a relist: it comes whole,
// in one Atomic batch, whatever MaxBatch.
func TestQueue_HasSyncedCorrectOnDeletion(t *testing.T) {
	q := New(Config{MaxBatch: 1, Known: newKnown(o("foo", 5), o("bar", 6), o("baz", 7))})
	if q.HasSynced() {
		t.Fatal("synced before anything happened")
	}
	q.replace([]Delta{replaced("foo", 5)}, "0", nil)
	want := []Delta{
		initial(tomb("bar", o("bar", 6))),
		initial(tomb("baz", o("baz", 7))),
		initial(replaced("foo", 5)),
		initial(bm("0")),
	}
	if q.HasSynced() {
		t.Fatal("HasSynced true before the initial list was processed")
	}
	b := q.pop()
	if b == nil || !b.Atomic {
		t.Fatalf("batch %v: want the whole list, Atomic", b)
	}
	wantDeltas(t, b.Deltas, want)
	if q.HasSynced() {
		t.Fatal("HasSynced true before Done")
	}
	q.done(len(want))
	if !q.HasSynced() {
		t.Fatal("HasSynced false after the initial list was processed")
	}
}

func TestQueue_HasSynced(t *testing.T) {
	t.Run("empty first replace syncs once its bookmark is acknowledged", func(t *testing.T) {
		// As client-go's AtomicFIFO, whose HasSynced waits for the (empty)
		// ReplacedAll delta: once synced, the cache has the list's version.
		q := New(Config{})
		q.replace(nil, "1", nil)
		if q.HasSynced() {
			t.Fatal("synced before the list's bookmark was applied")
		}
		wantDeltas(t, popAll(t, q), []Delta{initial(bm("1"))})
		if !q.HasSynced() {
			t.Fatal("not synced")
		}
	})
	t.Run("a bookmark before the first replace does not sync", func(t *testing.T) {
		q := New(Config{})
		q.add([]Delta{bm("1")})
		if q.HasSynced() {
			t.Fatal("a bookmark synced the queue")
		}
		q.replace([]Delta{replaced("a", 1)}, "2", nil)
		wantDeltas(t, popAll(t, q), []Delta{bm("1"), initial(replaced("a", 1)), initial(bm("2"))})
		if !q.HasSynced() {
			t.Fatal("not synced")
		}
	})
	t.Run("add before the first replace syncs at once, replace is not initial", func(t *testing.T) {
		q := New(Config{})
		q.add([]Delta{added("a", 1)})
		if !q.HasSynced() {
			t.Fatal("not synced")
		}
		q.replace([]Delta{replaced("a", 1)}, "1", nil)
		wantDeltas(t, popAll(t, q), []Delta{added("a", 1), replaced("a", 1), bm("1")})
	})
	t.Run("second replace does not affect HasSynced", func(t *testing.T) {
		k := newKnown()
		q := New(Config{Known: k})
		q.replace([]Delta{replaced("a", 1)}, "1", nil)
		wantDeltas(t, popAll(t, q), []Delta{initial(replaced("a", 1)), initial(bm("1"))})
		k.set("a", o("a", 1)) // the consumer applied it
		if !q.HasSynced() {
			t.Fatal("not synced after the first replace")
		}
		q.replace([]Delta{replaced("b", 1)}, "2", nil)
		if !q.HasSynced() {
			t.Fatal("second replace unsynced the queue")
		}
		wantDeltas(t, popAll(t, q), []Delta{tomb("a", o("a", 1)), replaced("b", 1), bm("2")})
	})
	t.Run("replace before the first one is processed is not initial", func(t *testing.T) {
		q := New(Config{})
		q.replace([]Delta{replaced("a", 1)}, "1", nil)
		q.replace([]Delta{replaced("a", 2)}, "2", nil)
		q.add([]Delta{initial(added("c", 1))}) // InitialList from outside is cleared
		if b := q.pop(); len(b.Deltas) != 2 {
			t.Fatalf("first batch mixes the initial list with later deltas: %s", describe(b.Deltas))
		}
		q.done(2)
		if !q.HasSynced() {
			t.Fatal("not synced")
		}
		wantDeltas(t, popAll(t, q), []Delta{replaced("a", 2), bm("2"), added("c", 1)})
	})
	t.Run("initial list split across batches", func(t *testing.T) {
		q := New(Config{MaxBatch: 2})
		q.replace([]Delta{replaced("a", 1), replaced("b", 1), replaced("c", 1)}, "1", nil)
		q.add([]Delta{added("d", 1)})
		b := popOne(t, q)
		q.done(len(b))
		if q.HasSynced() {
			t.Fatal("synced too early")
		}
		b = popOne(t, q)
		wantDeltas(t, b, []Delta{initial(replaced("c", 1)), initial(bm("1"))})
		q.done(2)
		if !q.HasSynced() {
			t.Fatal("not synced")
		}
	})
}

// TestQueue_UpdateResyncRace is DeltaFIFO's: a resync skips keys with
// something queued, and (here) keys with something in flight.
func TestQueue_resync(t *testing.T) {
	runScripts(t, []script{
		{
			name:  "update then resync",
			known: []obj{o("foo", 5)},
			ops:   []op{add(updated("foo", 6)), resync()},
			want:  []Delta{updated("foo", 6)},
		},
		{
			name:  "resync skips in-flight keys",
			known: []obj{o("foo", 5), o("bar", 1)},
			ops:   []op{add(updated("foo", 6)), inflight(updated("foo", 6)), resync()},
			want:  []Delta{synced("bar", 1)},
		},
		{
			name:  "resync skips queued deletes",
			known: []obj{o("foo", 5), o("bar", 1)},
			ops:   []op{add(deleted("foo", 5)), resync()},
			want:  []Delta{deleted("foo", 5), synced("bar", 1)},
		},
		{
			name:  "resync of everything cached",
			known: []obj{o("foo", 5), o("bar", 1)},
			ops:   []op{resync()},
			want:  []Delta{synced("foo", 5), synced("bar", 1)},
		},
		{
			name:  "resync twice queues twice",
			known: []obj{o("foo", 5)},
			ops:   []op{resync(), inflight(synced("foo", 5)), done(), resync()},
			want:  []Delta{synced("foo", 5)},
		},
		{
			name: "resync with an empty cache",
			ops:  []op{resync()},
		},
	})
	t.Run("lookup error skips the key", func(t *testing.T) {
		k := newKnown(o("foo", 1), o("bar", 1))
		k.err["foo"] = errLookup
		q := New(Config{Known: k})
		q.resync()
		wantDeltas(t, popAll(t, q), []Delta{synced("bar", 1)})
	})
}

func TestQueue_popInFlight(t *testing.T) {
	q := New(Config{})
	if q.pop() != nil {
		t.Fatal("Pop on an empty queue")
	}
	q.done(0) // no batch in flight: ignored
	q.add([]Delta{added("a", 1)})
	b := popOne(t, q)
	q.add([]Delta{added("b", 1)})
	if q.pop() != nil {
		t.Fatal("Pop returned a batch while one is in flight")
	}
	if q.Len() != 1 {
		t.Fatalf("Len = %d, want 1", q.Len())
	}
	q.done(5) // wrong count: still acknowledges the batch
	wantDeltas(t, b, []Delta{added("a", 1)})
	wantDeltas(t, popAll(t, q), []Delta{added("b", 1)})
}

func TestQueue_maxBatch(t *testing.T) {
	q := New(Config{MaxBatch: 3})
	var in []Delta
	for i := range 10 {
		in = append(in, added("k", i))
	}
	q.add(in)
	var sizes []int
	var out []Delta
	for b := q.pop(); b != nil; b = q.pop() {
		sizes = append(sizes, len(b.Deltas))
		out = append(out, b.Deltas...)
		q.done(len(b.Deltas))
	}
	if want := []int{3, 3, 3, 1}; len(sizes) != len(want) || sizes[0] != 3 || sizes[3] != 1 {
		t.Fatalf("batch sizes %v, want %v", sizes, want)
	}
	wantDeltas(t, out, in)
	if New(Config{}).maxBatch != DefaultMaxBatch {
		t.Fatal("default MaxBatch")
	}
}

// TestQueue_initialRemaining checks the size hint batches carry: how many
// deltas of the first Replace (tombstones included) are not yet handed out,
// and 0 for the deltas after it and for later relists.
func TestQueue_initialRemaining(t *testing.T) {
	k := newKnown()
	q := New(Config{Known: k, MaxBatch: 4})
	q.add([]Delta{added("early", 1)}) // before the first list: no hint
	var items []Delta
	for i := range 10 {
		items = append(items, replaced("k"+strconv.Itoa(i), 1))
	}
	q.replace(items, "1", nil)
	q.add([]Delta{updated("k0", 2)})
	var hints, sizes []int
	for b := q.pop(); b != nil; b = q.pop() {
		hints = append(hints, b.InitialRemaining)
		sizes = append(sizes, len(b.Deltas))
		for _, d := range b.Deltas {
			if d.Type == Deleted {
				k.del(d.Key)
			} else {
				k.set(d.Key, d.Object)
			}
		}
		q.done(len(b.Deltas))
	}
	// The Add before the list marks the queue synced at once (as in
	// client-go), so there is no first list to wait for and no hint. The
	// list is a relist (the queue holds "early"): it comes whole, with
	// the "early" delta before it (and the tombstone of "early" in it).
	if want := []int{0, 0}; !slices.Equal(hints, want) || !slices.Equal(sizes, []int{13, 1}) {
		t.Fatalf("hints %v (batch sizes %v), want %v", hints, sizes, want)
	}

	// A first list into an empty queue and cache, split into batches: its
	// bookmark counts.
	k = newKnown()
	q = New(Config{Known: k, MaxBatch: 4})
	q.replace(items[:9], "1", nil)
	q.add([]Delta{updated("k0", 2)})
	hints, sizes = nil, nil
	for b := q.pop(); b != nil; b = q.pop() {
		hints = append(hints, b.InitialRemaining)
		sizes = append(sizes, len(b.Deltas))
		for _, d := range b.Deltas {
			if d.Type != Bookmark {
				k.set(d.Key, d.Object)
			}
		}
		q.done(len(b.Deltas))
	}
	if want := []int{10, 6, 2, 0}; !slices.Equal(hints, want) {
		t.Fatalf("hints %v (batch sizes %v), want %v", hints, sizes, want)
	}

	// A first list against a cache that holds an object: the tombstone of
	// "early" counts, and the list comes whole.
	q = New(Config{Known: newKnown(obj{"early", 1}), MaxBatch: 4})
	q.replace(items[:9], "1", nil)
	q.add([]Delta{updated("k0", 2)})
	hints, sizes = nil, nil
	for b := q.pop(); b != nil; b = q.pop() {
		hints = append(hints, b.InitialRemaining)
		sizes = append(sizes, len(b.Deltas))
		q.done(len(b.Deltas))
	}
	if want := []int{11, 0}; !slices.Equal(hints, want) || !slices.Equal(sizes, []int{11, 1}) {
		t.Fatalf("hints %v (batch sizes %v), want %v", hints, sizes, want)
	}
	q.replace(items, "2", nil) // a relist: no hint
	for b := q.pop(); b != nil; b = q.pop() {
		if b.InitialRemaining != 0 {
			t.Fatalf("relist batch hints %d", b.InitialRemaining)
		}
		q.done(len(b.Deltas))
	}
}

// TestQueue_relistWhole: a relist is handed out whole, in one Atomic batch
// however long (with the deltas before it in the batch that reaches into
// it), and two relists in a row are two batches; other batches keep to
// MaxBatch.
func TestQueue_relistWhole(t *testing.T) {
	k := newKnown(o("x", 1), o("y", 1))
	q := New(Config{Known: k, MaxBatch: 2})
	q.add([]Delta{updated("x", 2), updated("x", 3), updated("x", 4)})
	q.replace([]Delta{replaced("a", 1), replaced("b", 1), replaced("c", 1)}, "10", nil)
	q.replace([]Delta{replaced("a", 2), replaced("b", 2), replaced("c", 2)}, "11", nil)
	q.add([]Delta{updated("a", 3), updated("a", 4), updated("a", 5)})

	type batch struct {
		deltas []Delta
		atomic bool
	}
	want := []batch{
		{[]Delta{updated("x", 2), updated("x", 3)}, false},
		{[]Delta{
			updated("x", 4),
			tomb("x", o("x", 4)), tomb("y", o("y", 1)), replaced("a", 1), replaced("b", 1), replaced("c", 1), bm("10"),
		}, true},
		{[]Delta{replaced("a", 2), replaced("b", 2), replaced("c", 2), bm("11")}, true},
		{[]Delta{updated("a", 3), updated("a", 4)}, false},
		{[]Delta{updated("a", 5)}, false},
	}
	for i, w := range want {
		b := q.pop()
		if b == nil {
			t.Fatalf("batch %d: nothing popped", i)
		}
		wantDeltas(t, b.Deltas, w.deltas)
		if b.Atomic != w.atomic {
			t.Fatalf("batch %d: Atomic %v, want %v", i, b.Atomic, w.atomic)
		}
		q.done(len(b.Deltas))
	}
	if b := q.pop(); b != nil {
		t.Fatalf("left over: %s", describe(b.Deltas))
	}
	if len(q.relists) != 0 {
		t.Fatalf("%d relists still recorded", len(q.relists))
	}
}

// TestQueue_bookmarks: a bookmark is queued in order, has no key (nothing
// to tombstone or resync, no map entry) and does not sync the queue.
func TestQueue_bookmarks(t *testing.T) {
	k := newKnown(o("c", 1))
	q := New(Config{Known: k})
	q.add([]Delta{bm("4"), bm("5")})
	if q.HasSynced() || q.Len() != 2 {
		t.Fatalf("synced %v, len %d", q.HasSynced(), q.Len())
	}
	q.add([]Delta{added("a", 1), bm("6"), updated("a", 2)})
	if n := q.pendingKeys(); n != 1 {
		t.Fatalf("%d pending keys, want 1 (a)", n)
	}
	q.resync()
	q.replace(nil, "7", nil)
	wantDeltas(t, popAll(t, q), []Delta{
		bm("4"), bm("5"), added("a", 1), bm("6"), updated("a", 2), synced("c", 1),
		tomb("a", o("a", 2)), tomb("c", o("c", 1)), bm("7"),
	})
}

// TestQueue_batchReuse checks that a batch's slice is left alone while in
// flight, whatever is added, and reused once acknowledged.
func TestQueue_batchReuse(t *testing.T) {
	q := New(Config{})
	q.add([]Delta{added("a", 1), added("b", 1)})
	b := q.pop()
	s := b.Deltas
	snap := append([]Delta(nil), s...)
	if cap(s) != len(s) {
		t.Fatalf("batch slice has spare capacity %d: a consumer append would clobber the queue", cap(s)-len(s))
	}
	// Grow the queue a lot while the batch is in flight.
	for i := range 1000 {
		q.add([]Delta{updated("c", i)})
		q.resync()
		q.replace([]Delta{replaced("a", 1), replaced("b", 1), replaced("c", i)}, "", nil)
	}
	wantDeltas(t, s, snap)
	q.done(len(s))
	popAll(t, q)

	// Drained: the next batch reuses the previous batch's memory.
	q.add([]Delta{added("x", 1)})
	b1 := q.pop()
	s1 := b1.Deltas
	p := &s1[0]
	q.done(1)
	if s1[0] != (Delta{}) {
		t.Fatal("acknowledged slot not zeroed")
	}
	if b1.Deltas != nil {
		t.Fatal("an acknowledged batch still holds its slice (it pins the queue's array)")
	}
	q.add([]Delta{added("y", 1)})
	b2 := q.pop()
	if &b2.Deltas[0] != p {
		t.Fatal("batch memory not reused after Done")
	}
	if b2 == b1 {
		t.Fatal("consecutive batches share a Batch value")
	}
	q.done(1)
}

// TestQueue_bounded checks the array does not grow without bound, both when
// the queue drains between batches and when a batch is always in flight.
func TestQueue_bounded(t *testing.T) {
	t.Run("drains", func(t *testing.T) {
		q := New(Config{MaxBatch: 16})
		for i := range 10000 {
			q.add([]Delta{added("a", i), added("b", i), added("c", i)})
			popAll(t, q)
		}
		if c := cap(q.buf); c > minCap {
			t.Fatalf("cap %d", c)
		}
	})
	t.Run("always in flight", func(t *testing.T) {
		q := New(Config{MaxBatch: 10})
		q.add([]Delta{added("x", 0)})
		q.pop()
		maxCap := 0
		for i := range 100000 {
			q.add([]Delta{added("a", i), added("b", i), added("c", i)})
			if i%3 == 0 {
				q.add([]Delta{added("d", i)})
			}
			if i%4 == 3 {
				q.done(q.head - q.lo)
				if q.pop() == nil {
					t.Fatal("nothing to pop")
				}
			}
			maxCap = max(maxCap, cap(q.buf))
		}
		// The backlog grows steadily (13.3 deltas in, 10 out, per 4 steps),
		// so the peak is now.
		peak := len(q.buf) - q.lo
		for b := q.pop(); b != nil || q.head > q.lo; b = q.pop() {
			q.done(q.head - q.lo)
		}
		if maxCap > 4*peak+minCap {
			t.Fatalf("cap %d for a peak of %d live deltas", maxCap, peak)
		}
		if q.pendingKeys() != 0 || q.Len() != 0 {
			t.Fatalf("not drained: %d keys, len %d", q.pendingKeys(), q.Len())
		}
	})
	t.Run("steady backlog with a batch always in flight", func(t *testing.T) {
		q := New(Config{MaxBatch: 10})
		q.add(make10(0))
		q.add(make10(0))
		q.pop()
		maxCap := 0
		for i := range 100000 {
			q.add(make10(i))
			q.done(q.head - q.lo)
			q.pop()
			maxCap = max(maxCap, cap(q.buf))
		}
		if maxCap > 64 {
			t.Fatalf("cap %d for ~20 live deltas", maxCap)
		}
	})
	t.Run("burst, kept for a second", func(t *testing.T) {
		clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
		q := New(Config{MaxBatch: 10, Clock: clk})
		burst := func() {
			for i := range 100000 {
				q.add([]Delta{added("a", i)})
			}
		}
		small := func() {
			q.add([]Delta{added("a", 0)})
			popAll(t, q)
		}
		burst()
		for range 9000 {
			q.pop()
			q.done(q.head - q.lo)
		}
		// Not shrunk while the burst drains, nor dropped when it has: a
		// backlog that comes and goes would only grow it again.
		c := cap(q.buf)
		if c < 100000 {
			t.Fatalf("cap %d for a burst of 100,000", c)
		}
		popAll(t, q)
		clk.SetTime(clk.Now().Add(keepBurst / 2))
		small()
		if cap(q.buf) != c {
			t.Fatalf("cap %d, then %d within a second of the burst", c, cap(q.buf))
		}
		// A burst within the second starts it again.
		burst()
		popAll(t, q)
		clk.SetTime(clk.Now().Add(keepBurst / 2))
		small()
		if cap(q.buf) != c {
			t.Fatalf("cap %d, then %d within a second of the second burst", c, cap(q.buf))
		}
		clk.SetTime(clk.Now().Add(keepBurst / 2))
		small()
		if cap(q.buf) > q.shrinkCap {
			t.Fatalf("cap %d kept a second after the last burst", cap(q.buf))
		}
	})
}

var keys10 = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}

func make10(v int) []Delta {
	ds := make([]Delta, 10)
	for i := range ds {
		ds[i] = Delta{Type: Updated, Key: keys10[i], Object: v}
	}
	return ds
}

func TestQueue_queueDepthAndMetrics(t *testing.T) {
	tel := telemetry.Nop()
	q := New(Config{Telemetry: tel, Known: newKnown(o("k", 1))})
	traces := make([]*telemetry.DeltaTrace, 4)
	for i := range traces {
		traces[i] = &telemetry.DeltaTrace{}
	}
	d := func(i int) Delta { return Delta{Type: Updated, Key: "a", Object: i, Trace: traces[i]} }
	q.add([]Delta{d(0), d(1)})
	if traces[0].QueueDepth != 0 || traces[1].QueueDepth != 1 {
		t.Fatalf("depths %d %d", traces[0].QueueDepth, traces[1].QueueDepth)
	}
	q.pop() // two in flight, not counted
	q.add([]Delta{d(2), d(3)})
	if traces[2].QueueDepth != 0 || traces[3].QueueDepth != 1 {
		t.Fatalf("depths %d %d", traces[2].QueueDepth, traces[3].QueueDepth)
	}
	if got := tel.Metrics.QueueBacklog.Load(); got != 2 || q.Len() != 2 {
		t.Fatalf("backlog %d len %d, want 2", got, q.Len())
	}
	q.add([]Delta{deleted("zz", 1), deleted("k", 1), deleted("k", 1)})
	m := &tel.Metrics.Counters
	if m.QueueIn.Load() != 5 || m.QueueOut.Load() != 2 || m.QueueMerged.Load() != 2 {
		t.Fatalf("in %d out %d merged %d", m.QueueIn.Load(), m.QueueOut.Load(), m.QueueMerged.Load())
	}
	q.done(2)
	popAll(t, q)
	if m.QueueOut.Load() != 5 || m.QueueBacklog.Load() != 0 {
		t.Fatalf("out %d backlog %d", m.QueueOut.Load(), m.QueueBacklog.Load())
	}
}

// TestQueue_keyChurn checks the bookkeeping map forgets deleted keys: it
// holds at most the cached keys plus the pending ones, and nothing (from
// clearMapLen entries up) once the queue drains.
func TestQueue_keyChurn(t *testing.T) {
	q := New(Config{MaxBatch: 7})
	maxMap := 0
	for i := range 100000 {
		k := "k" + strconv.Itoa(i)
		q.add([]Delta{{Type: Added, Key: k}, {Type: Updated, Key: k}, {Type: Deleted, Key: k}})
		if i%3 == 0 {
			popAll(t, q)
		}
		maxMap = max(maxMap, len(q.last))
	}
	popAll(t, q)
	if maxMap > 3 || len(q.last) != 0 {
		t.Fatalf("bookkeeping map reached %d entries, %d left", maxMap, len(q.last))
	}

	// Kept for live keys (no churn), dropped by tombstones.
	k := newKnown()
	q = New(Config{Known: k})
	for i := range 5000 {
		q.add([]Delta{{Type: Added, Key: "k" + strconv.Itoa(i)}})
	}
	if n := q.pendingKeys(); n != 5000 {
		t.Fatalf("%d pending keys, want 5000", n)
	}
	// Drain all but the last batch: the entries stay while keys are pending.
	for q.Len() > 0 {
		b := q.pop()
		for _, d := range b.Deltas {
			k.set(d.Key, d.Object) // the consumer applies them
		}
		if q.Len() == 0 {
			break // leave it in flight
		}
		q.done(len(b.Deltas))
	}
	if n := len(q.last); n != 5000 {
		t.Fatalf("%d entries for 5000 live keys, some pending", n)
	}
	q.done(q.head - q.lo)
	if n := len(q.last); n != 0 {
		t.Fatalf("%d entries for 5000 live keys after the queue drained", n)
	}
	// A key with nothing pending is still "known" through the cache: a
	// delete of it is queued, and a Replace tombstones every key.
	q.add([]Delta{{Type: Deleted, Key: "k1"}})
	if q.Len() != 1 {
		t.Fatalf("delete of a cached key after the drain: Len %d, want 1", q.Len())
	}
	for _, d := range popAll(t, q) {
		k.del(d.Key)
	}
	q.replace(nil, "", nil)
	if q.Len() != 5000 {
		t.Fatalf("Len %d, want 4999 tombstones and the bookmark", q.Len())
	}
	popAll(t, q)
	if n := len(q.last); n != 0 {
		t.Fatalf("%d entries after every key was deleted", n)
	}
}

// TestQueue_keyMapReuse checks the per-key map: a stream of updates does
// not fill it (nothing looks its keys up); when the queue drains, one that
// holds clearMapLen entries or more is emptied, and its table is kept (the
// same map, cleared) unless the map ever held reuseMapLen entries, also
// when deletes have shrunk it since.
func TestQueue_keyMapReuse(t *testing.T) {
	same := func(a, b map[string]uint64) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	q := New(Config{Known: newKnown()})
	for i := range 2 * reuseMapLen {
		q.add([]Delta{{Type: Updated, Key: "k" + strconv.Itoa(i)}})
	}
	popAll(t, q)
	if len(q.last) != 0 {
		t.Fatalf("a stream of updates left %d entries in the map, want none", len(q.last))
	}
	// From here on the deltas are indexed as they come, as lookups (deletes,
	// a relist, a resync) would have them.
	add := func(n, from int, typ DeltaType) {
		for i := range n {
			q.add([]Delta{{Type: typ, Key: "k" + strconv.Itoa(from+i)}})
			q.indexKeys()
		}
	}

	// A watch stream's keys: kept below clearMapLen, emptied from it, with
	// the same table.
	add(clearMapLen-1, 0, Updated)
	m := q.last
	popAll(t, q)
	if len(q.last) != clearMapLen-1 || !same(q.last, m) {
		t.Fatalf("below clearMapLen: %d entries, same map %v; want them kept", len(q.last), same(q.last, m))
	}
	add(1, clearMapLen, Updated)
	popAll(t, q)
	if len(q.last) != 0 || !same(q.last, m) {
		t.Fatalf("at clearMapLen: %d entries, same map %v; want it cleared", len(q.last), same(q.last, m))
	}

	// A burst: dropped.
	add(reuseMapLen, 0, Updated)
	popAll(t, q)
	if len(q.last) != 0 || same(q.last, m) {
		t.Fatalf("after a burst of reuseMapLen keys: %d entries, same map %v; want a new map", len(q.last), same(q.last, m))
	}

	// A burst whose keys were then deleted (their entries leave the map
	// one by one): dropped too, though it holds fewer than clearMapLen.
	m = q.last
	add(reuseMapLen, 0, Updated)
	add(reuseMapLen, 0, Deleted)
	popAll(t, q)
	if len(q.last) != 0 || same(q.last, m) {
		t.Fatalf("after a burst deleted: %d entries, same map %v; want a new map", len(q.last), same(q.last, m))
	}
}

// TestDeltaSize checks that a Delta's layout stays at 48 bytes: the queue's
// buffer holds one per queued delta.
func TestDeltaSize(t *testing.T) {
	if size := unsafe.Sizeof(Delta{}); size != 48 {
		t.Errorf("Delta takes %d bytes, want 48", size)
	}
}

// TestQueue_listBufferReleased checks that a list adopted as the queue's
// buffer is let go once the queue drains (an idle informer holds no
// list-sized array), while the small array of ordinary traffic is kept.
func TestQueue_listBufferReleased(t *testing.T) {
	k := newKnown()
	// shrinkCap (4 × MaxBatch) above the list's size: only the list rule
	// can drop the array.
	q := New(Config{Known: k, MaxBatch: 1000})
	items := make([]Delta, 2000, 2001) // a spare slot for the bookmark, as the reflector leaves
	for i := range items {
		items[i] = replaced("k"+strconv.Itoa(i), 1)
	}
	q.replace(items, "1", nil)
	if &q.buf[0] != &items[0] {
		t.Fatal("the list was copied, not adopted")
	}
	for _, d := range popAll(t, q) {
		if d.Type != Bookmark {
			k.set(d.Key, d.Object)
		}
	}
	if cap(q.buf) != 0 || len(q.last) != 0 {
		t.Fatalf("after the list drained: buffer cap %d, %d key entries", cap(q.buf), len(q.last))
	}
	// Without a spare slot the list is copied once, and dropped likewise.
	k = newKnown()
	q = New(Config{Known: k, MaxBatch: 1000})
	items = make([]Delta, 2000)
	for i := range items {
		items[i] = replaced("k"+strconv.Itoa(i), 1)
	}
	q.replace(items, "1", nil)
	for _, d := range popAll(t, q) {
		if d.Type != Bookmark {
			k.set(d.Key, d.Object)
		}
	}
	if cap(q.buf) != 0 || len(q.last) != 0 {
		t.Fatalf("after the list drained: buffer cap %d, %d key entries", cap(q.buf), len(q.last))
	}
	q.add([]Delta{updated("k1", 2)})
	popAll(t, q)
	if cap(q.buf) == 0 {
		t.Fatal("the array of ordinary traffic was dropped at the drain")
	}
	if !q.HasSynced() {
		t.Fatal("not synced")
	}
}

// TestQueue_synced checks that a *Synced is sent to the informer once,
// when HasSynced turns true: after the first list's last delta is
// acknowledged.
func TestQueue_synced(t *testing.T) {
	var q *Queue
	// The internal inputs below do not reset the outbox: it collects.
	calls := func() int {
		n := 0
		for _, m := range q.out.Msgs() {
			if _, ok := m.Body.(*Synced); ok && m.To == stage.ToInformer {
				n++
			}
		}
		return n
	}
	q = New(Config{MaxBatch: 2})
	q.replace([]Delta{replaced("a", 1), replaced("b", 1), replaced("c", 1)}, "1", nil)
	b := q.pop()
	q.done(len(b.Deltas))
	if calls() != 0 || q.HasSynced() {
		t.Fatalf("after the first batch: %d sent, synced %v", calls(), q.HasSynced())
	}
	popAll(t, q)
	if calls() != 1 || !q.HasSynced() {
		t.Fatalf("after the list: %d sent, synced %v", calls(), q.HasSynced())
	}
	q.replace([]Delta{replaced("a", 2)}, "2", nil)
	q.add([]Delta{updated("a", 3)})
	popAll(t, q)
	if calls() != 1 {
		t.Fatalf("%d sent after a relist, want 1", calls())
	}

	// An Add before any list syncs at once; an empty first list once its
	// bookmark is acknowledged.
	q = New(Config{})
	q.add([]Delta{added("a", 1)})
	if calls() != 1 || !q.HasSynced() {
		t.Fatalf("add: %d sent, synced %v", calls(), q.HasSynced())
	}
	q = New(Config{})
	q.replace(nil, "1", nil)
	if calls() != 0 || q.HasSynced() {
		t.Fatalf("empty list, before its bookmark is acknowledged: %d sent, synced %v", calls(), q.HasSynced())
	}
	popAll(t, q)
	if calls() != 1 || !q.HasSynced() {
		t.Fatalf("empty list: %d sent, synced %v", calls(), q.HasSynced())
	}
	// Through Step: the message of the input that synced.
	q = New(Config{})
	if got := msgsString(q.Step(deltasMsg(added("a", 1)))); got != "informer/send/*fifo.Synced indexer/send/*fifo.Batch(1)" {
		t.Fatalf("Step: %s", got)
	}
}
