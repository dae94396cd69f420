package fifo

import (
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// DefaultMaxBatch is the default maximum number of deltas in one Batch.
const DefaultMaxBatch = 4096

// Reasons recorded (as telemetry.AttrReason) on the "delta.merged" event of
// a Deleted delta the queue drops.
const (
	// ReasonDuplicateDelete: the key's last queued delta is already a
	// Deleted one; the two collapse into one.
	ReasonDuplicateDelete = "duplicate_delete"
	// ReasonAlreadyDeleted: the key is absent (its last in-flight delta is a
	// Deleted one, or the cache does not hold it and nothing is pending).
	ReasonAlreadyDeleted = "already_deleted"
)

// EventMerged is the span event recorded on a dropped delta's trace.
const EventMerged = "delta.merged"

// minCap is the smallest backing array the queue allocates.
const minCap = 64

// inPlace tells relocate to compact within the current array.
const inPlace = -1

// clearMapLen is the size from which the per-key map is emptied when the
// queue drains (smaller ones are kept: clearing a map at every drain costs
// more than its few entries hold); reuseMapLen the size from which it is dropped rather than
// cleared, so that what a drained queue keeps is at most the table of
// fewer than reuseMapLen keys (2,048 slots, ~54 KB with the keys of
// cache.MetaNamespaceKeyFunc).
const (
	clearMapLen = 512
	reuseMapLen = 1536
)

// Config configures a Queue.
type Config struct {
	// Known is the cache's read handle (the indexer's store). nil means an
	// empty cache.
	Known KnownObjects
	// MaxBatch is the maximum number of deltas in one Batch; 0 means
	// DefaultMaxBatch.
	MaxBatch int
	// Telemetry is the informer's telemetry; nil means telemetry.Nop().
	Telemetry *telemetry.T
	// Clock is the clock for the root spans of tombstones and syncs, and
	// for their Received stamps; nil means clock.RealClock{}. Every stage's
	// core takes its time this way.
	Clock clock.PassiveClock
}

// Queue is the delta queue's state machine: every delta in arrival order,
// one entry per delta, handed out in batches of at most MaxBatch deltas with
// at most one batch in flight. See the package documentation for the rules.
//
// A Queue is not safe for concurrent use, except HasSynced and Len.
type Queue struct {
	known    KnownObjects
	maxBatch int
	t        *telemetry.T
	now      func() time.Time

	// buf holds the deltas: buf[:lo] are zeroed, free slots; buf[lo:head]
	// is the in-flight batch; buf[head:] are the queued deltas. The delta at
	// buf[i] has sequence number base+i. Sequence numbers grow forever.
	buf      []Delta
	lo, head int
	base     uint64
	// last maps keys to the sequence number of their last delta, for the
	// deltas before sequence number indexed: a delta is indexed when a
	// lookup needs it (indexKeys), not when it is queued. An entry below
	// base+lo is stale: that delta has been acknowledged, so the key has
	// nothing pending. A stale entry is left in place (the key's next
	// indexed delta overwrites it: no map churn for keys that change often)
	// unless the acknowledged delta was a Deleted one; so the map holds at
	// most the cached keys plus the pending ones. When the queue drains,
	// every entry is stale: a map of clearMapLen entries or more is then
	// emptied, so an idle queue does not hold a slot per cached key. A map
	// does not shrink as entries leave it: one that has held reuseMapLen
	// entries or more (lastPeak: a burst) is dropped; a smaller one is
	// cleared, keeping its table for the keys to come (regrowing it from
	// nothing at every drain cost more than the map's other work).
	last        map[string]uint64
	indexed     uint64
	lastPeak    int
	clearMapLen int // clearMapLen, or less in tests
	// shrinkCap: when the queue drains and its backing array is larger, the
	// array is dropped so a burst does not pin memory, once no backlog
	// (peak: the most live deltas since the last drain) has needed a
	// quarter of it for keepBurst (bigAt: when one last did). Until then
	// it keeps the array its largest backlog needed, also while the
	// backlog ebbs: dropping or shrinking it at once made a busy watch,
	// whose backlog comes and goes, grow a new array from nothing every
	// few batches. The price: a queue whose events stop within keepBurst of
	// a burst keeps that array (48 bytes per delta of the burst's backlog)
	// until it drains again, when events come. An array adopted from a
	// Replace (listBuf) is dropped at the first drain whatever its size:
	// lists are rare.
	shrinkCap int
	listBuf   bool
	peak      int
	bigAt     time.Time

	// batches alternate between pops, so a Batch value is rewritten only two
	// batches later, when the consumer is long done with it.
	batches [2]Batch
	flip    int

	// relists are the sequence number spans of the queued relists, oldest
	// first: pop hands each one out whole, in a batch marked Atomic.
	relists []span

	// populated is set by the first add or replace. initialEnd is the
	// sequence number after the first Replace's last delta: the queue has
	// synced once everything before it is acknowledged.
	populated  bool
	initialEnd uint64
	synced     atomic.Bool
	length     atomic.Int64

	// Scratch space for replace, reused between calls.
	tombs []Delta

	out stage.Outbox // the messages of the current input
}

// span is the sequence numbers [start, end).
type span struct{ start, end uint64 }

// New returns an empty queue.
func New(cfg Config) *Queue {
	q := &Queue{
		known:    cfg.Known,
		maxBatch: cfg.MaxBatch,
		t:        cfg.Telemetry,
		last:     make(map[string]uint64),

		clearMapLen: clearMapLen,
	}
	if q.known == nil {
		q.known = emptyKnown{}
	}
	if q.maxBatch <= 0 {
		q.maxBatch = DefaultMaxBatch
	}
	if q.t == nil {
		q.t = telemetry.Nop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	q.now = cfg.Clock.Now
	q.shrinkCap = max(4*q.maxBatch, 1024)
	return q
}

// HasSynced reports whether the first Replace's deltas (items and
// tombstones) have all been handed out and acknowledged. As in
// client-go, an Add before the first Replace counts as synced at once, and
// an empty first Replace syncs at once. Safe for concurrent use.
func (q *Queue) HasSynced() bool { return q.synced.Load() }

// Len returns the number of queued deltas, not counting the in-flight
// batch. Safe for concurrent use.
func (q *Queue) Len() int { return int(q.length.Load()) }

// add queues watch deltas (Added, Updated, Deleted, Bookmark) in arrival
// order. A Deleted delta is dropped when the key's last queued delta is
// already a Deleted one (keeping the more informative object) or when the
// key is absent. The queue does not retain items.
func (q *Queue) add(items []Delta) {
	if len(items) == 0 {
		return
	}
	if !q.populated && slices.ContainsFunc(items, func(d Delta) bool { return d.Type != Bookmark }) {
		// client-go: an Add/Update/Delete before the first Replace means
		// there is no initial list to wait for (a bookmark does not count).
		q.populated = true
		q.markSynced()
	}
	q.reserve(len(items))
	queued, merged := 0, 0
	for i := range items {
		d := items[i]
		d.InitialList = false
		if d.Type == Deleted && q.dropDelete(&d) {
			merged++
			continue
		}
		q.push(d)
		queued++
	}
	q.record(queued, merged)
}

// dropDelete decides whether the Deleted delta d is dropped, merging it
// into a queued Deleted delta when there is one.
func (q *Queue) dropDelete(d *Delta) bool {
	if s, ok := q.pending(d.Key); ok {
		prev := &q.buf[q.index(s)]
		if prev.Type != Deleted {
			return false
		}
		reason := ReasonAlreadyDeleted
		if q.index(s) >= q.head {
			// Queued, not in flight: collapse, keeping the non-tombstone.
			reason = ReasonDuplicateDelete
			if isTombstone(prev.Object) && !isTombstone(d.Object) {
				prev.Object = d.Object
			}
		}
		q.merged(d, reason)
		return true
	}
	// Nothing pending: the cache decides. On a lookup error, keep the
	// delete (as DeltaFIFO does).
	if _, exists, err := q.known.GetByKey(d.Key); err == nil && !exists {
		q.merged(d, ReasonAlreadyDeleted)
		return true
	}
	return false
}

// merged records a dropped delta on its trace.
func (q *Queue) merged(d *Delta, reason string) {
	if d.Trace != nil { // spares building the attribute when not traced
		q.t.Event(d.Trace, telemetry.SpanQueue, EventMerged, telemetry.AttrReason.String(reason))
	}
}

// replace queues, as client-go's AtomicFIFO delivers a relist: a tombstone
// — a Deleted delta whose Object is a cache.DeletedFinalStateUnknown holding
// the last known object — for every key present in the queue's view of the
// world but missing from the list, then the list's items (Replaced deltas,
// already keyed and transformed) in list order, then a Bookmark delta with
// rv, the list's resource version. A relist (a Replace while the cache or
// the queue holds something) is handed out whole, in one batch marked
// Atomic. The deltas of the first Replace are marked InitialList. The queue
// takes ownership of items: when it holds nothing else and there is no
// tombstone it adopts the slice as its buffer instead of copying a list's
// worth of deltas.
func (q *Queue) replace(items []Delta, rv string, listTrace *telemetry.DeltaTrace) {
	first := !q.populated
	q.populated = true

	var link trace.SpanContext
	if listTrace != nil {
		link = listTrace.Parent
	}
	tracing := q.t.Tracing()
	var now time.Time
	var stamp telemetry.Stamp
	if tracing || q.t.Metrics.Enabled() {
		now = q.now()
	}
	if q.t.Metrics.Enabled() {
		stamp = telemetry.StampAt(now)
	}

	// With an empty cache and nothing pending (the first list) there is
	// nothing to tombstone, no set of listed keys to build, and no older
	// generation for readers to see mixed with this one: its deltas may be
	// applied a batch at a time.
	cached := q.known.ListKeys()
	relist := len(cached) > 0 || len(q.buf) > q.lo
	if relist {
		q.tombstones(items, cached, tracing, now, stamp, link)
	}

	n := len(q.tombs) + len(items) + 1 // + the bookmark
	start := q.seq(len(q.buf))
	if len(q.buf) == 0 && len(q.tombs) == 0 {
		// Nothing in flight or queued and no tombstone to put first: adopt
		// items as the buffer (the bookmark is appended to it).
		q.buf = slices.Grow(items, 1) // no copy if items has a spare slot
		q.listBuf = true
		for i := range q.buf {
			d := &q.buf[i]
			d.InitialList = first
			if d.Trace != nil {
				d.Trace.QueueDepth = i
			}
		}
	} else {
		q.reserve(n)
		for i := range q.tombs {
			d := q.tombs[i]
			d.InitialList = first
			q.push(d)
		}
		for i := range items {
			d := items[i]
			d.InitialList = first
			q.push(d)
		}
	}
	bm := NewBookmark(rv)
	bm.InitialList = first
	q.push(bm)
	clear(q.tombs)
	q.tombs = q.tombs[:0]

	end := q.seq(len(q.buf))
	if relist {
		q.relists = append(q.relists, span{start, end})
	}
	if first {
		// The bookmark belongs to the initial list: HasSynced waits until
		// the cache has the list's resource version, even for an empty
		// list, as client-go's AtomicFIFO waits for its ReplacedAll delta.
		q.initialEnd = end
	}
	q.record(n, 0)
}

// tombstones appends to q.tombs a tombstone for every key that is cached or
// pending, not deleted, and not among items: first the pending keys, in
// order of their last delta, then the keys only in the cache.
func (q *Queue) tombstones(items []Delta, cached []string, tracing bool, now time.Time, stamp telemetry.Stamp, link trace.SpanContext) {
	// Built for this call, at its final size, and dropped after: relists
	// are rare, and a map kept for reuse would pin a slot per listed key.
	listed := make(map[string]struct{}, len(items))
	for i := range items {
		listed[items[i].Key] = struct{}{}
	}

	// Keys with something pending, in order of their last delta.
	q.indexKeys()
	for i := q.lo; i < len(q.buf); i++ {
		d := &q.buf[i]
		if d.Type == Bookmark || q.last[d.Key] != q.seq(i) {
			continue // not the key's last delta (last is never stale here)
		}
		if _, ok := listed[d.Key]; ok || d.Type == Deleted {
			continue // still present, or already absent
		}
		q.tombs = append(q.tombs, q.tombstone(d.Key, d.Object, tracing, now, stamp, link))
	}
	// Keys only in the cache.
	for _, k := range cached {
		if _, ok := listed[k]; ok {
			continue
		}
		if _, ok := q.pending(k); ok {
			continue // handled above
		}
		obj, exists, err := q.known.GetByKey(k)
		if err != nil {
			q.t.Logger.Error("fifo: cache lookup failed during replace; queueing a tombstone without object", "key", k, "error", err)
			obj = nil
		} else if !exists {
			continue // gone since ListKeys: absent
		}
		q.tombs = append(q.tombs, q.tombstone(k, obj, tracing, now, stamp, link))
	}
}

// tombstone makes the tombstone of key; stamp is its Received (zero when
// metrics are off).
func (q *Queue) tombstone(key string, obj any, tracing bool, now time.Time, stamp telemetry.Stamp, link trace.SpanContext) Delta {
	if ts, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = ts.Obj
	}
	d := Delta{Type: Deleted, Key: key, Object: cache.DeletedFinalStateUnknown{Key: key, Obj: obj}, Received: stamp}
	if tracing {
		d.Trace = q.startDelta(d, obj, now, link)
	}
	return d
}

// resync queues a Sync delta, with the cached object, for every cached key
// that has nothing queued and nothing in flight.
func (q *Queue) resync() {
	tracing := q.t.Tracing()
	var now time.Time
	var stamp telemetry.Stamp
	if tracing || q.t.Metrics.Enabled() {
		now = q.now()
	}
	if q.t.Metrics.Enabled() {
		stamp = telemetry.StampAt(now)
	}
	n := 0
	for _, k := range q.known.ListKeys() {
		if _, ok := q.pending(k); ok {
			// Something pending would make the cached object stale.
			continue
		}
		obj, exists, err := q.known.GetByKey(k)
		if err != nil {
			q.t.Logger.Error("fifo: cache lookup failed during resync; skipping key", "key", k, "error", err)
			continue
		}
		if !exists {
			continue
		}
		d := Delta{Type: Sync, Key: k, Object: obj, Received: stamp}
		if tracing {
			d.Trace = q.startDelta(d, obj, now, trace.SpanContext{})
		}
		q.push(d)
		n++
	}
	q.record(n, 0)
}

// pop returns the next batch: at most MaxBatch queued deltas in arrival
// order, except that a relist is never split: a batch that reaches into one
// extends to its end, however long, and is marked Atomic. It returns nil
// when nothing is queued or a batch is already in flight. Until the first
// Replace's deltas are all popped, a batch does not mix them with later
// deltas.
//
// The batch's Deltas slice belongs to the queue: the consumer must only read
// it, and must not keep it after acknowledging it (Processed); the queue
// reuses it.
func (q *Queue) pop() *Batch {
	if q.head > q.lo || q.head == len(q.buf) {
		return nil
	}
	k := min(len(q.buf)-q.head, q.maxBatch)
	if !q.synced.Load() && q.initialEnd > q.seq(q.head) {
		k = min(k, int(q.initialEnd-q.seq(q.head)))
	}
	// Relists are popped whole: they start at or after head, since none is
	// ever split.
	whole := false
	for len(q.relists) > 0 && q.relists[0].start < q.seq(q.head+k) {
		k = max(k, int(q.relists[0].end-q.seq(q.head)))
		q.relists = q.relists[1:]
		whole = true
	}
	if len(q.relists) == 0 {
		q.relists = nil // let go of the array
	}
	b := &q.batches[q.flip]
	q.flip ^= 1
	b.Atomic = whole
	b.Deltas = q.buf[q.head : q.head+k : q.head+k]
	b.InitialRemaining = 0
	if !q.synced.Load() && q.initialEnd > q.seq(q.head) {
		b.InitialRemaining = int(q.initialEnd - q.seq(q.head))
	}
	q.head += k
	q.t.Metrics.Dequeued(k)
	q.setLen()
	return b
}

// done acknowledges the in-flight batch: it has been applied to the cache.
// n is the batch's length; the whole batch is acknowledged whatever n is.
func (q *Queue) done(n int) {
	if q.head == q.lo {
		q.t.Logger.Warn("fifo: Processed with no batch in flight", "count", n)
		return
	}
	if want := q.head - q.lo; n != want {
		q.t.Logger.Warn("fifo: Processed count differs from the in-flight batch", "count", n, "batch", want)
	}
	// Moving lo past the batch makes the map entries of its keys stale;
	// drop those of deleted keys (unless a later delta of the key was
	// indexed since). The map only grows until then: here is its peak.
	q.lastPeak = max(q.lastPeak, len(q.last))
	for i := q.lo; i < q.head; i++ {
		if d := &q.buf[i]; d.Type == Deleted {
			if s, ok := q.last[d.Key]; ok && s <= q.seq(i) {
				delete(q.last, d.Key)
			}
		}
	}
	clear(q.buf[q.lo:q.head])
	q.lo = q.head
	// The consumer is done with the batch: let go of its slice, which
	// would otherwise pin the array (a whole list, when the queue adopted
	// one) until the batch value is reused.
	q.batches[q.flip^1].Deltas = nil
	// Nothing is in flight now, so the array may be rearranged.
	switch live := len(q.buf) - q.lo; {
	case live == 0:
		// Drained: start again at the front of the array, or drop it if a
		// burst made it large. Every map entry is stale now.
		switch {
		case q.lastPeak >= reuseMapLen:
			q.last, q.lastPeak = make(map[string]uint64), 0
		case len(q.last) >= q.clearMapLen:
			clear(q.last)
		}
		if q.oversized() || q.listBuf {
			q.relocate(0)
		} else {
			q.relocate(inPlace)
		}
		q.peak = 0
	case q.lo >= live:
		// At least as much free space in front as live deltas: compact.
		// Each delta is moved at most once per slot freed before it, so
		// this is O(1) amortized.
		q.relocate(inPlace)
	}
	if q.populated && !q.synced.Load() && q.seq(q.lo) >= q.initialEnd {
		q.markSynced()
	}
}

// keepBurst is how long a drained queue keeps an array larger than
// shrinkCap after a backlog last needed a quarter of it.
const keepBurst = time.Second

// oversized tells, as the queue drains, whether its array is larger than
// shrinkCap and no backlog has needed a quarter of it for keepBurst: then
// it goes.
func (q *Queue) oversized() bool {
	if cap(q.buf) <= q.shrinkCap {
		return false
	}
	now := q.now()
	if 4*q.peak >= cap(q.buf) {
		q.bigAt = now
		return false
	}
	return now.Sub(q.bigAt) >= keepBurst
}

// push appends one delta, stamping its trace with the queue depth.
func (q *Queue) push(d Delta) {
	if len(q.buf) == cap(q.buf) {
		q.grow(1)
	}
	if d.Trace != nil {
		d.Trace.QueueDepth = len(q.buf) - q.head
	}
	q.buf = append(q.buf, d)
}

// pending returns the sequence number of key's last delta if it is queued
// or in flight.
func (q *Queue) pending(key string) (uint64, bool) {
	q.indexKeys()
	s, ok := q.last[key]
	return s, ok && s >= q.seq(q.lo)
}

// indexKeys brings the key map up to date with the deltas queued since it
// was last looked up. Queueing a delta does not touch the map: most are
// never looked up (only a Deleted delta, a relist and a resync look keys
// up: a stream of updates never does), so each is indexed at most once,
// and only when needed.
func (q *Queue) indexKeys() {
	end := q.seq(len(q.buf))
	if q.indexed >= end {
		return
	}
	for i := q.index(max(q.indexed, q.seq(q.lo))); i < len(q.buf); i++ {
		if d := &q.buf[i]; d.Type != Bookmark { // bookmarks have no key
			q.last[d.Key] = q.seq(i)
		}
	}
	q.indexed = end
}

// reserve makes room for n more deltas in buf.
func (q *Queue) reserve(n int) {
	if len(q.buf)+n > cap(q.buf) {
		q.grow(n)
	}
}

// grow makes room for at least n more deltas in buf, without ever moving
// the in-flight batch in place (the consumer may be reading it).
func (q *Queue) grow(n int) {
	live := len(q.buf) - q.lo
	if q.lo == q.head && q.lo > 0 && live+n <= cap(q.buf)*3/4 {
		// Nothing in flight and a useful amount of free space in front.
		q.relocate(inPlace)
		return
	}
	// Reallocate, leaving the free front behind. If a batch is in flight,
	// the old array stays intact for the consumer.
	q.relocate(max(2*live+n, minCap))
}

// relocate moves the live deltas (in flight and queued) to the front of a
// new array of capacity newCap (nil if 0), or, when newCap < 0, to the front
// of the current array, which is only allowed with nothing in flight.
func (q *Queue) relocate(newCap int) {
	live := len(q.buf) - q.lo
	switch {
	case newCap < 0:
		copy(q.buf, q.buf[q.lo:])
		clear(q.buf[max(live, q.lo):]) // zero the vacated tail; [live:lo] already is
		q.buf = q.buf[:live]
	case newCap == 0:
		q.buf = nil
		q.listBuf = false
	default:
		nb := make([]Delta, live, newCap)
		copy(nb, q.buf[q.lo:])
		q.buf = nb
		q.listBuf = false
	}
	q.base += uint64(q.lo)
	q.head -= q.lo
	q.lo = 0
}

// markSynced turns HasSynced true, telling the informer.
func (q *Queue) markSynced() {
	if !q.synced.Swap(true) {
		q.out.Send(stage.ToInformer, syncedMsg)
	}
}

func (q *Queue) seq(i int) uint64   { return q.base + uint64(i) }
func (q *Queue) index(s uint64) int { return int(s - q.base) }

func (q *Queue) record(queued, merged int) {
	if queued > 0 {
		q.t.Metrics.Queued(queued)
	}
	if merged > 0 {
		q.t.Metrics.Merged(merged)
	}
	q.setLen()
}

func (q *Queue) setLen() {
	q.peak = max(q.peak, len(q.buf)-q.lo)
	n := int64(len(q.buf) - q.head)
	q.length.Store(n)
	q.t.Metrics.QueueBacklog.Store(n)
	if g := q.t.QueuedItems; g != nil {
		g.Set(float64(n))
	}
}

func isTombstone(obj any) bool {
	_, ok := obj.(cache.DeletedFinalStateUnknown)
	return ok
}

// startDelta opens the root span of a delta the queue makes (tombstone,
// resync) if the informer's delta sampler chooses it; obj is the object
// whose metadata the span records (a tombstone's last known one, or nil).
// No writer link: these deltas come from no write.
func (q *Queue) startDelta(d Delta, obj any, now time.Time, link trace.SpanContext) *telemetry.DeltaTrace {
	m := objectMeta(d.Key, obj)
	if !q.t.Choose(telemetry.DeltaInfo{Type: d.Type.CacheType(), Key: d.Key, Object: d.Object, ResourceVersion: m.ResourceVersion}) {
		return nil
	}
	return q.t.StartDelta(d.Type.String(), m, now, link)
}

// objectMeta extracts what a root span records about obj, falling back to
// the key.
func objectMeta(key string, obj any) telemetry.ObjectMeta {
	if obj != nil {
		if m, err := meta.Accessor(obj); err == nil {
			return telemetry.ObjectMeta{
				Namespace:       m.GetNamespace(),
				Name:            m.GetName(),
				UID:             string(m.GetUID()),
				ResourceVersion: m.GetResourceVersion(),
			}
		}
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	return telemetry.ObjectMeta{Namespace: ns, Name: name}
}

type emptyKnown struct{}

func (emptyKnown) ListKeys() []string                 { return nil }
func (emptyKnown) GetByKey(string) (any, bool, error) { return nil, false, nil }
