package indexer

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/telemetry"
)

// applyChunk bounds how many deltas of a batch that is not Atomic (watch
// events, the first list) are applied per write-lock hold, so that readers
// are not held up by a large batch. An Atomic batch (a relist) is applied in
// one hold, so that readers never see it half applied.
const applyChunk = 256

// A listener whose backlog is above compactAbove notifications gets
// batches of fewer than compactBelow notifications compacted (see Route).
// Compacted notifications are kept in arrays of compactChunk: each becomes
// one batch, so that nothing is copied as the backlog grows and a listener
// releases what it has delivered a chunk at a time.
const (
	compactAbove = 1024
	compactBelow = 64
	compactChunk = 256
)

// Core is the indexer's state machine: it applies batches of deltas to the
// Store, turns them into notifications for the subscribed listeners, and
// keeps the listeners' resync schedule. It has no goroutine of its own.
//
// Core is not safe for concurrent use: one goroutine (the indexer actor)
// calls its methods. It is the Store's only writer once the Store is sealed.
type Core struct {
	store *Store
	t     *telemetry.T
	now   func() time.Time
	clock clock.WithDelayedExecution

	subs []subscriber
	// syncing: listeners due for a resync, plus those subscribed since the
	// last ResyncDue. Replaced, never modified: batches share it.
	syncing []ListenerID

	// The resync checks, client-go's reflector resync timer: checkPeriod is
	// the informer's resync check period (0: no checks); checkTimer, when
	// armed, calls fire with checkGen; a tick of another generation is stale.
	// checking is set once StartResyncChecks was called.
	checkPeriod time.Duration
	checkTimer  clock.Timer
	checkGen    uint64
	checking    bool
	fire        func(gen uint64)

	traced []tracedApply // scratch, reused across batches

	// detector, when set, gets every object written to the cache (client-go's
	// KUBE_CACHE_MUTATION_DETECTOR). Nil, the default, costs one check per
	// delta.
	detector cache.MutationDetector
}

type subscriber struct {
	id               ListenerID
	target           *actor.PID
	period           time.Duration
	next             time.Time
	pending, backlog *atomic.Int64
	// chunks (full, ready to send) then compact (being filled) hold the
	// notifications kept back for a listener that is far behind; marked is
	// set while a DrainMarker sent to it is unanswered. Compaction is on
	// while marked is set.
	chunks  []*Notifications
	compact []Notification
	marked  bool
}

// tracedApply remembers when a traced delta was applied, so that its spans
// are recorded after the write lock is released.
type tracedApply struct {
	delta, item int // item is -1 when no notification was built
	typ         NotificationType
	start, end  time.Time
}

// NewCore returns a core writing to store. A nil t records nothing; a nil
// now means time.Now. The resync check timer runs on the real clock (see
// SetClock).
func NewCore(store *Store, t *telemetry.T, now func() time.Time) *Core {
	if t == nil {
		t = telemetry.Nop()
	}
	if now == nil {
		now = time.Now
	}
	store.SetIndexErrorHandler(func(key, index string, err error) {
		t.Metrics.Drop("index_error")
		t.Logger.Error("index function failed; the object is cached but left out of this index",
			"informer", t.Info.Name, "key", key, "index", index, "err", err)
	})
	return &Core{store: store, t: t, now: now, clock: clock.RealClock{}}
}

// SetClock makes the core read the time from clk and arm its resync check
// timer on it. Call it before anything else.
func (c *Core) SetClock(clk clock.WithDelayedExecution) {
	c.clock = clk
	c.now = clk.Now
}

// SetMutationDetector hands every object the core writes to the cache
// (adds, updates, replacements and resyncs, not deletes) to d, which keeps a
// copy and fails the process if a cached object changes: client-go's
// informer feeds its cache mutation detector the same objects. Call it
// before the first Apply; nil turns detection off.
func (c *Core) SetMutationDetector(d cache.MutationDetector) { c.detector = d }

// Store returns the cache the core writes.
func (c *Core) Store() *Store { return c.store }

// Expect sizes an empty cache for n objects, the deltas of a first list not
// yet applied (fifo.Batch.InitialRemaining), so that the cache is built at
// its final size instead of growing in steps, as client-go's Replace does.
// It does nothing when n is 0 or the cache holds objects.
func (c *Core) Expect(n int) {
	if n <= 0 {
		return
	}
	s := c.store
	s.mu.Lock()
	if len(s.items) == 0 {
		s.items = make(map[string]any, n)
	}
	s.mu.Unlock()
}

// Apply applies deltas to the cache in order, as client-go's processDeltas:
// Added, Updated, Replaced and Sync update the object if its key is cached
// (an update notification, marked Sync when the resource version did not
// change) and add it otherwise; Deleted removes the key and notifies the
// deleted object; Bookmark notifies nothing. It returns the batch to send,
// the same value, to every subscriber, with their Backlog and Pending
// counters already raised; nil when there is no subscriber or no delta that
// notifies. Apply does not retain deltas. It holds the write lock for
// applyChunk deltas at a time.
//
// The cache's resource version (LastStoreSyncResourceVersion) moves as in
// client-go's AtomicFIFO informer: to the object's version on Added, Updated
// and Deleted (not for a tombstone, which has none), and to a Bookmark's;
// Replaced and Sync deltas leave it (a list sets it with the Bookmark the
// queue ends it with, a resync never moves it).
func (c *Core) Apply(deltas []fifo.Delta) *Notifications { return c.apply(deltas, applyChunk) }

// ApplyBatch is Apply for a batch of the queue: an Atomic batch (a relist)
// is applied in one write-lock hold.
func (c *Core) ApplyBatch(b *fifo.Batch) *Notifications {
	chunk := applyChunk
	if b.Atomic {
		chunk = max(len(b.Deltas), 1)
	}
	return c.apply(b.Deltas, chunk)
}

func (c *Core) apply(deltas []fifo.Delta, chunk int) *Notifications {
	if len(deltas) == 0 {
		return nil
	}
	c.t.Metrics.Applied(len(deltas))

	tracing := false
	var batchStart time.Time
	if c.t.Tracing() {
		for i := range deltas {
			if deltas[i].Trace != nil {
				tracing = true
				batchStart = c.now()
				break
			}
		}
	}

	var items []Notification
	if len(c.subs) > 0 {
		items = make([]Notification, 0, len(deltas))
	}
	c.traced = c.traced[:0]
	initial := 0
	for start := 0; start < len(deltas); start += chunk {
		end := min(start+chunk, len(deltas))
		items, initial = c.applyChunk(deltas, start, end, items, initial, tracing)
	}

	if tracing {
		c.recordSpans(deltas, items, batchStart)
	}
	if len(items) == 0 {
		return nil
	}
	for i := range c.subs {
		s := &c.subs[i]
		if s.backlog != nil {
			s.backlog.Add(int64(len(items)))
		}
		if s.pending != nil && initial > 0 {
			s.pending.Add(int64(initial))
		}
	}
	return &Notifications{Items: items, Syncing: c.syncing}
}

// applyChunk applies deltas[start:end] under one write lock hold.
func (c *Core) applyChunk(deltas []fifo.Delta, start, end int, items []Notification, initial int, tracing bool) ([]Notification, int) {
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := start; i < end; i++ {
		d := &deltas[i]
		var t0 time.Time
		traced := tracing && d.Trace != nil
		if traced {
			t0 = c.now()
		}
		var n Notification
		switch d.Type {
		case fifo.Added, fifo.Updated, fifo.Replaced, fifo.Sync:
			old, existed := s.upsertLocked(d.Key, d.Object)
			if c.detector != nil {
				c.detector.AddObject(d.Object)
			}
			if existed {
				n = Notification{Type: NotifyUpdate, Old: old, New: d.Object, Sync: sameResourceVersion(old, d.Object), Received: d.Received}
			} else {
				n = Notification{Type: NotifyAdd, New: d.Object, InitialList: d.InitialList, Received: d.Received}
			}
		case fifo.Deleted:
			s.deleteLocked(d.Key)
			n = Notification{Type: NotifyDelete, New: d.Object, InitialList: d.InitialList, Received: d.Received}
		case fifo.Bookmark:
			// Only moves the resource version on (below).
			continue
		default:
			// Unknown types are skipped, as client-go's processDeltas does.
			continue
		}
		item := -1
		if items != nil {
			item = len(items)
			items = append(items, n)
			if n.InitialList {
				initial++
			}
		}
		if traced {
			c.traced = append(c.traced, tracedApply{delta: i, item: item, typ: n.Type, start: t0, end: c.now()})
		}
	}
	// The cache's version: that of the chunk's last delta that moves it
	// (see Apply).
	for i := end - 1; i >= start; i-- {
		d := &deltas[i]
		switch d.Type {
		case fifo.Bookmark:
			s.setRVLocked(d.BookmarkRV())
		case fifo.Added, fifo.Updated, fifo.Deleted:
			rv, err := rvOf(d.Object) // fails on a tombstone
			if err != nil {
				continue
			}
			s.setRVLocked(rv)
		default:
			continue
		}
		break
	}
	return items, initial
}

// recordSpans records the fifo.queue and indexer.apply spans of the traced
// deltas and stamps their notifications with the indexer span.
func (c *Core) recordSpans(deltas []fifo.Delta, items []Notification, batchStart time.Time) {
	handoff := c.now()
	batchSize := telemetry.AttrBatchSize.Int(len(deltas))
	for _, tr := range c.traced {
		d := &deltas[tr.delta]
		q := c.t.Stage(d.Trace, telemetry.SpanQueue, d.Trace.Since, batchStart,
			telemetry.AttrQueueDepth.Int(d.Trace.QueueDepth), batchSize)
		ix := c.t.Stage(q, telemetry.SpanIndexer, tr.start, tr.end,
			telemetry.AttrDeltaType.String(d.Type.String()), telemetry.AttrNotification.String(tr.typ.String()))
		ix.Since = handoff
		if tr.item >= 0 {
			items[tr.item].Trace = ix
		}
	}
	c.traced = c.traced[:0]
}

// sameResourceVersion reports whether an update is a resync: both objects
// have metadata and the same resource version.
func sameResourceVersion(old, cur any) bool {
	o, err := rvOf(old)
	if err != nil {
		return false
	}
	n, err := rvOf(cur)
	return err == nil && o == n
}

// Subscribe registers a listener; it receives every batch Apply returns from
// now on. A listener subscribing again with the same ID replaces its former
// subscription. When s.Initial is set it returns the initial batch to send the
// listener first: an add (InitialList set) for every cached object, with the
// listener's Pending and Backlog raised. The batch is returned even when the
// cache is empty, so that the listener learns it has the whole cache.
func (c *Core) Subscribe(s *Subscribe) (initial *Notifications) {
	c.Unsubscribe(s.ID)
	sub := subscriber{id: s.ID, target: s.Target, period: s.ResyncPeriod, pending: s.Pending, backlog: s.Backlog}
	if sub.period > 0 {
		// client-go's listener counts its first period from when its
		// handler was added.
		from := s.Added
		if from.IsZero() {
			from = c.now()
		}
		sub.next = from.Add(sub.period)
	}
	c.subs = append(c.subs, sub)
	// Like client-go's processor, which puts every listener it adds in its
	// syncing set until the next resync check: with no resync period at all,
	// same-resourceVersion updates (a relist) reach every handler.
	c.syncing = append(slices.Clip(c.syncing), s.ID)
	if !s.Initial {
		return nil
	}

	st := c.store
	st.mu.RLock()
	items := make([]Notification, 0, len(st.items))
	for _, obj := range st.items {
		items = append(items, Notification{Type: NotifyAdd, New: obj, InitialList: true})
	}
	st.mu.RUnlock()
	// An empty initial batch is still sent: it tells the listener that it
	// is subscribed and has everything the cache held.
	if s.Pending != nil {
		s.Pending.Add(int64(len(items)))
	}
	if s.Backlog != nil {
		s.Backlog.Add(int64(len(items)))
	}
	return &Notifications{Items: items, Initial: true}
}

// Route hands n, a batch Apply returned, to every subscriber, calling send
// for each message in the order they must be sent: n itself to most
// listeners. A listener far behind (a backlog above compactAbove) costs a
// message, a batch value and an array per batch when the batches are small
// (a slow handler on a quiet stream); for it, the items of batches smaller
// than compactBelow are appended to arrays of compactChunk kept here, and a
// DrainMarker is sent; once it answers (Drained), each array goes as one
// batch. The items of later batches join the arrays while any are kept, so
// that the listener gets everything in order. Resync items the listener is not due
// for are left out of the array (and out of its backlog).
func (c *Core) Route(n *Notifications, send func(target *actor.PID, msg any)) {
	for i := range c.subs {
		s := &c.subs[i]
		if !s.marked && (len(n.Items) >= compactBelow || s.backlog == nil || s.backlog.Load() <= compactAbove) {
			send(s.target, n)
			continue
		}
		skipped := 0
		for _, it := range n.Items {
			if it.Sync && !n.SyncsTo(s.id) {
				skipped++
				continue
			}
			if len(s.compact) == compactChunk {
				s.chunks = append(s.chunks, s.batch(s.compact))
				s.compact = nil
			}
			if s.compact == nil {
				s.compact = make([]Notification, 0, compactChunk)
			}
			s.compact = append(s.compact, it)
		}
		if skipped > 0 && s.backlog != nil {
			s.backlog.Add(-int64(skipped))
		}
		if !s.marked {
			s.marked = true
			send(s.target, drainMarker)
		}
	}
}

// drainMarker is the one DrainMarker value sent.
var drainMarker = &DrainMarker{}

// Drained handles a listener's answer to a DrainMarker: it has delivered
// everything sent before. The notifications kept back for it, if any, are
// sent, one batch per array, followed by a new marker; otherwise compaction ends
// for that listener.
func (c *Core) Drained(id ListenerID, send func(target *actor.PID, msg any)) {
	i := c.indexOf(id)
	if i < 0 {
		return
	}
	s := &c.subs[i]
	if len(s.chunks) == 0 && len(s.compact) == 0 {
		s.marked = false
		return
	}
	for _, b := range s.chunks {
		send(s.target, b)
	}
	clear(s.chunks)
	s.chunks = s.chunks[:0]
	if len(s.compact) > 0 {
		send(s.target, s.batch(s.compact))
		s.compact = nil
	}
	send(s.target, drainMarker)
}

// forget takes kept-back items that will not be delivered out of s's
// counters.
func (s *subscriber) forget(items []Notification) {
	if s.backlog != nil {
		s.backlog.Add(-int64(len(items)))
	}
	if s.pending != nil {
		initial := 0
		for _, it := range items {
			if it.InitialList {
				initial++
			}
		}
		s.pending.Add(-int64(initial))
	}
}

// batch wraps notifications kept back for s as a batch for it alone.
func (s *subscriber) batch(items []Notification) *Notifications {
	return &Notifications{Items: items, Syncing: []ListenerID{s.id}, Owned: true}
}

// Unsubscribe removes a listener; unknown IDs are ignored. Notifications
// kept back for it are dropped.
func (c *Core) Unsubscribe(id ListenerID) {
	i := c.indexOf(id)
	if i < 0 {
		return
	}
	s := &c.subs[i]
	for _, b := range s.chunks {
		s.forget(b.Items)
	}
	s.forget(s.compact)
	c.subs = slices.Delete(c.subs, i, i+1)
	if j := slices.Index(c.syncing, id); j >= 0 {
		c.syncing = slices.Delete(slices.Clone(c.syncing), j, j+1)
	}
}

// indexOf returns the index of listener id in c.subs, or -1.
func (c *Core) indexOf(id ListenerID) int {
	return slices.IndexFunc(c.subs, func(s subscriber) bool { return s.id == id })
}

// Subscribers returns the subscribed listeners' IDs in subscription order.
func (c *Core) Subscribers() []ListenerID {
	ids := make([]ListenerID, len(c.subs))
	for i := range c.subs {
		ids[i] = c.subs[i].id
	}
	return ids
}

// Targets returns the subscribed listeners' mailboxes in subscription order,
// in a new slice.
func (c *Core) Targets() []*actor.PID {
	pids := make([]*actor.PID, len(c.subs))
	for i := range c.subs {
		pids[i] = c.subs[i].target
	}
	return pids
}

// ResyncDue decides, like client-go's shouldResync, which listeners resync
// now: those with a resync period whose next resync time has come. Their
// next time becomes now plus their period. The result is the syncing set of
// every following batch, until the next call. It reports whether any
// listener is due, in which case the queue should be asked for a Resync.
func (c *Core) ResyncDue(now time.Time) bool {
	var syncing []ListenerID
	for i := range c.subs {
		s := &c.subs[i]
		if s.period > 0 && !now.Before(s.next) {
			syncing = append(syncing, s.id)
			s.next = now.Add(s.period)
		}
	}
	c.syncing = syncing
	return len(syncing) > 0
}

// SetResyncCheckPeriod sets how often the listeners' resync schedule is
// checked once checks have started: client-go's resyncCheckPeriod (the
// informer's default resync period, lowered by handlers added before it
// ran). With 0, no check ever runs, and every listener stays in the
// syncing set. Call it before StartResyncChecks.
func (c *Core) SetResyncCheckPeriod(d time.Duration) { c.checkPeriod = d }

// ResyncCheckPeriod is the period set by SetResyncCheckPeriod.
func (c *Core) ResyncCheckPeriod() time.Duration { return c.checkPeriod }

// StartResyncChecks (re)starts the resync checks, as client-go's reflector
// does each time it has stored a list: the first check comes one check
// period from now. A timer already armed is stopped and a tick it already
// sent becomes stale. When a check is due the clock calls fire (from its
// own goroutine) with the generation to hand back to ResyncCheck; fire must
// do nothing but pass it on to the core's goroutine.
func (c *Core) StartResyncChecks(fire func(gen uint64)) {
	c.fire = fire
	c.checking = true
	c.armCheck()
}

// ResumeResyncChecks re-arms the check timer after StopResyncChecks (an
// actor restart) if checks had started; otherwise it does nothing.
func (c *Core) ResumeResyncChecks(fire func(gen uint64)) {
	if c.checking {
		c.StartResyncChecks(fire)
	}
}

// StopResyncChecks stops the check timer; a tick already sent becomes
// stale.
func (c *Core) StopResyncChecks() {
	c.stopCheckTimer()
	c.checkGen++
}

// ResyncCheck runs the check that the timer of generation gen asked for:
// ResyncDue at the clock's current time, after which the timer is armed
// again for one check period. Like client-go's reflector, which makes a
// new timer after each check rather than running a ticker, checks are
// never less than a period apart, so a listener whose period is a multiple
// of the check period is never found just short of its time and skipped.
// A stale tick does nothing. It reports whether the queue should be asked
// for a Resync.
func (c *Core) ResyncCheck(gen uint64) bool {
	if gen != c.checkGen || c.checkTimer == nil {
		return false
	}
	c.checkTimer = nil
	due := c.ResyncDue(c.now())
	c.armCheck()
	return due
}

func (c *Core) armCheck() {
	c.stopCheckTimer()
	c.checkGen++
	if c.checkPeriod <= 0 || c.fire == nil {
		return
	}
	gen, fire := c.checkGen, c.fire
	c.checkTimer = c.clock.AfterFunc(c.checkPeriod, func() { fire(gen) })
}

func (c *Core) stopCheckTimer() {
	if c.checkTimer != nil {
		c.checkTimer.Stop()
		c.checkTimer = nil
	}
}

// AddIndexers adds indexers to the cache and indexes the cached objects; a
// name already in use is an error and adds nothing.
func (c *Core) AddIndexers(idx cache.Indexers) error { return c.store.addIndexers(idx) }
