package indexer

import (
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// applyChunk bounds how many deltas of a batch that is not Atomic (watch
// events, the first list) are applied per write-lock hold, so that readers
// are not held up by a large batch. An Atomic batch (a relist) is applied in
// one hold, so that readers never see it half applied.
const applyChunk = 256

// A listener whose backlog is above compactAbove notifications gets
// batches of fewer than compactBelow notifications compacted (see route).
// Compacted notifications are kept in arrays of compactChunk: each becomes
// one batch, so that nothing is copied as the backlog grows and a listener
// releases what it has delivered a chunk at a time.
const (
	compactAbove = 1024
	compactBelow = 64
	compactChunk = 256
)

// Core is the indexer's state machine: it applies batches of deltas to the
// Store through its Writer, turns them into notifications for the
// subscribed listeners, and keeps the listeners' resync schedule. It has no
// goroutine of its own and knows no actor: following package stage, each
// input method returns the messages to deliver, addressed to stage.ToQueue
// or stage.ToListener(id), valid until the next input method.
//
// Core is not safe for concurrent use: one goroutine (the indexer actor)
// calls its methods. It is the Store's only writer once the Store is sealed.
type Core struct {
	w     *Writer
	t     *telemetry.T
	now   func() time.Time
	clock clock.WithDelayedExecution
	out   stage.Outbox
	// latency is client-go's processing-latency histogram; nil: none.
	latency telemetry.HistogramMetric

	subs []subscriber
	// syncing: listeners due for a resync, plus those subscribed since the
	// last resync check. Replaced, never modified: batches share it.
	syncing []ListenerID

	// The resync checks, client-go's reflector resync timer: checkPeriod is
	// the informer's resync check period (0: no checks); the timer
	// (checkTimer), while armed, sends a ResyncTick with checkGen; a tick
	// of another generation is stale. checking is set once a list was
	// reported (fifo.Listed).
	checkPeriod time.Duration
	checkGen    uint64
	armed       bool
	checking    bool

	traced []tracedApply // scratch, reused across batches

	// processed is the acknowledgement sent to the queue: one value, as the
	// queue has read it before it sends the next batch.
	processed fifo.Processed

	// cur is the progress of the batch being applied, kept here rather than
	// in apply's locals so that Recover can finish a batch whose apply
	// panicked.
	cur batchProgress

	// detector, when set, gets every object written to the cache (client-go's
	// KUBE_CACHE_MUTATION_DETECTOR). Nil, the default, costs one check per
	// delta.
	detector cache.MutationDetector
}

type subscriber struct {
	id     ListenerID
	period time.Duration
	next   time.Time
	// sent is the listener's count of what the core sent it, which only
	// the core writes; delivered is the listener's own count of what it
	// has done, which the core only reads (see behind).
	sent      *Sent
	delivered *atomic.Int64
	// chunks (full, ready to send) then compact (being filled) hold the
	// notifications kept back for a listener that is far behind; marked is
	// set while a DrainMarker sent to it is unanswered. Compaction is on
	// while marked is set.
	chunks  []*Notifications
	compact []Notification
	marked  bool
}

// batchProgress is what applyBatch has done of a batch so far: the
// deltas before next were handled (next-1 is the one being applied, should
// it panic), the notifications built for them and not yet sent (items, of
// which initial are of the first list), and what recording their spans
// needs. active is set from the start of a batch until its acknowledgement
// is queued. chunk is the batch's write-lock hold (see applyBatch).
type batchProgress struct {
	active     bool
	deltas     []fifo.Delta
	next       int
	chunk      int
	items      []Notification
	batch      *Notifications // holds items' array (see newNotifications)
	initial    int
	tracing    bool
	batchStart time.Time
}

// tracedApply remembers when a traced delta was applied, so that its spans
// are recorded after the write lock is released.
type tracedApply struct {
	delta, item int // item is -1 when no notification was built
	typ         NotificationType
	start, end  time.Time
}

// Config configures a Core.
type Config struct {
	// Telemetry records the core's metrics, spans and logs; nil records
	// nothing.
	Telemetry *telemetry.T
	// Clock gives the time (resync schedule, span times) and runs the
	// resync check timer; nil means clock.RealClock{}.
	Clock clock.WithDelayedExecution
	// ResyncCheckPeriod is how often the listeners' resync schedule is
	// checked once checks have started: client-go's resyncCheckPeriod (the
	// informer's default resync period, lowered by handlers added before it
	// ran). With 0, no check ever runs, and every listener stays in the
	// syncing set.
	ResyncCheckPeriod time.Duration
	// MutationDetector, when set, gets every object the core writes to the
	// cache (adds, updates, replacements and resyncs, not deletes), as
	// client-go's informer feeds its cache mutation detector
	// (KUBE_CACHE_MUTATION_DETECTOR). Nil, the default, costs one check per
	// delta.
	MutationDetector cache.MutationDetector
}

// NewCore returns a core writing the cache through w.
func NewCore(w *Writer, cfg Config) *Core {
	t := cfg.Telemetry
	if t == nil {
		t = telemetry.Nop()
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	w.SetIndexErrorHandler(func(key, index string, err error) {
		t.Metrics.Drop("index_error")
		t.Logger.Error("index function failed; the object is cached but left out of this index",
			"informer", t.Info.Name, "key", key, "index", index, "err", err)
	})
	return &Core{w: w, t: t, now: clk.Now, clock: clk, checkPeriod: cfg.ResyncCheckPeriod, detector: cfg.MutationDetector, latency: t.ProcessingLatency}
}

// Seal seals the cache (external writes now fail with ErrReadOnly) and
// routes Store.AddIndexers through addIndexers: see Writer.Seal. The shell
// calls it when it starts.
func (c *Core) Seal(addIndexers func(cache.Indexers) error) { c.w.Seal(addIndexers) }

// checkTimer is the address of the resync check timer.
var checkTimer = stage.TimerOf(stage.Indexer, 0)

// Step is the core's one input (see package stage): it takes one message
// and returns what must be sent because of it, valid until the next Step.
//
//   - *fifo.Batch: applies the deltas (applyBatch) and sends the resulting
//     *Notifications, one shared value, to every subscriber, then
//     *fifo.Processed to the queue.
//   - *Subscribe, *Unsubscribe: (un)registers a listener; a Subscribe with
//     Initial first gets the cached objects as an initial batch.
//   - *Drained: a listener's answer to a *DrainMarker (see drained).
//   - *AddIndexers: adds indexers and answers with *IndexersAdded to
//     stage.ToInformer.
//   - *fifo.Listed: (re)starts the resync checks, as client-go's reflector
//     does after storing a list.
//   - *ResyncTick: when a listener's resync is due, sends *fifo.Resync to
//     the queue. The check timer (stage.TimerOf(stage.Indexer, 0)) sends
//     these, one check period after the previous check.
//   - Lifecycle(stage.Started): re-arms the check timer if checks had
//     started, and finishes a batch whose apply panicked (see
//     recoverBatch).
//   - Lifecycle(stage.Restarting): the actor panicked: sends what
//     recoverBatch returns, and stops the timer. Stopping stops the timer.
func (c *Core) Step(in Input) []stage.Msg {
	c.out.Reset()
	switch m := in.(type) {
	case *fifo.Batch:
		c.applyBatch(m)
	case *Subscribe:
		c.onSubscribe(m)
	case *Unsubscribe:
		c.unsubscribe(m.ID)
	case *Drained:
		c.drained(m.ID)
	case *AddIndexers:
		c.addIndexersNow(m)
	case *fifo.Listed:
		c.checking = true
		c.armCheck()
	case *ResyncTick:
		c.resyncTick(m)
	case Lifecycle:
		switch stage.Lifecycle(m) {
		case stage.Started:
			c.started()
		case stage.Restarting:
			c.recoverBatch()
			c.stopChecks()
		case stage.Stopping:
			c.stopChecks()
		}
	}
	return c.out.Msgs()
}

// started (re)starts the core after its actor started: after a restart,
// checks that had started go on, and the rest of a batch whose apply
// panicked (see recoverBatch) is applied: its notifications are sent, then
// the acknowledgement of the whole batch.
func (c *Core) started() {
	if c.checking {
		c.armCheck()
	}
	if c.cur.active {
		c.apply()
		c.endBatch()
	}
}

// stopChecks stops the resync check timer (the actor stops or restarts);
// a tick already sent becomes stale.
func (c *Core) stopChecks() {
	c.stopCheckTimer()
	c.checkGen++
}

// applyBatch applies a batch of the queue to the cache, in order, as
// client-go's processDeltas, and returns the notifications to send to the
// listeners (see route) followed by the batch's acknowledgement, a
// *fifo.Processed sent to the queue. An Atomic batch (a relist) is applied
// in one write-lock hold; other batches a chunk of deltas at a time. A batch
// of the first list (InitialRemaining) sizes an empty cache at once.
//
// As client-go's processDeltas: Added, Updated, Replaced and Sync update
// the object if its key is cached (an update notification, marked Sync when
// the resource version did not change) and add it otherwise; Deleted removes
// the key and notifies the deleted object; Bookmark notifies nothing. Every
// subscriber gets the same batch value, counted in its Sent before it is
// sent; nothing is sent to listeners when there
// is no subscriber or no delta that notifies. applyBatch does not retain the
// deltas.
//
// The cache's resource version (LastStoreSyncResourceVersion) moves as in
// client-go's AtomicFIFO informer: to the object's version on Added, Updated
// and Deleted (not for a tombstone, which has none), and to a Bookmark's;
// Replaced and Sync deltas leave it (a list sets it with the Bookmark the
// queue ends it with, a resync never moves it).
func (c *Core) applyBatch(b *fifo.Batch) {
	if c.latency != nil {
		start := c.now()
		defer func() { c.latency.Observe(c.now().Sub(start).Seconds()) }()
	}
	c.w.Expect(b.InitialRemaining)
	chunk := applyChunk
	if b.Atomic {
		chunk = max(len(b.Deltas), 1)
	}
	c.cur = batchProgress{active: true, deltas: b.Deltas, chunk: chunk}
	c.apply()
	c.endBatch()
}

// recoverBatch is the first half of finishing a batch whose applyBatch
// panicked (a bug of ours; user index functions are recovered in the
// store): the actor's Restarting, and started, when the new actor starts,
// does the rest. recoverBatch logs an error naming the delta that panicked
// and sends the notifications of the deltas handled before the panic,
// routed as any batch's, with the subscribers' counters raised. started
// then applies the deltas after the one that panicked and sends their
// notifications and the acknowledgement of the whole batch: nothing of the
// batch is lost but the delta that panicked, which is skipped, so that a
// delta that always panics cannot stop the pipeline. A delta that panicked
// after its write to the cache was done (the mutation detector, which runs
// last) is notified too; one that panicked inside the write leaves the
// cache as the write left it. Should the rest panic again, the next
// restart does the same from there. With no batch in progress it sends
// nothing.
func (c *Core) recoverBatch() {
	p := &c.cur
	if !p.active {
		return
	}
	key := ""
	if p.next > 0 {
		key = p.deltas[p.next-1].Key
	}
	c.t.Logger.Error("indexer: applying a batch panicked; the batch is partly applied: the deltas before the one that panicked are notified now, the rest are applied when the actor restarts",
		"informer", c.t.Info.Name, "deltas", len(p.deltas), "applied", p.next, "key", key, "notifications", len(p.items))
	c.sendApplied()
}

// endBatch sends the notifications of the batch in progress and its
// acknowledgement, then forgets the batch.
func (c *Core) endBatch() {
	c.sendApplied()
	c.processed = fifo.Processed{Count: len(c.cur.deltas)}
	c.out.Send(stage.ToQueue, &c.processed)
	c.cur = batchProgress{}
}

// sendApplied records the spans of the traced deltas handled so far and
// routes their notifications (see route). What it hands on is taken out
// of c.cur first, so that should it panic, a restart does not send it
// twice.
func (c *Core) sendApplied() {
	p := &c.cur
	items, batch, initial := p.items, p.batch, p.initial
	p.items, p.batch, p.initial = nil, nil, 0
	if p.tracing {
		c.recordSpans(p.deltas, items, p.batchStart)
	}
	if n := c.notifications(batch, items, initial); n != nil {
		c.route(n)
	}
}

// apply applies the deltas of the batch in progress from c.cur.next on,
// c.cur.chunk at a time per write-lock hold, building their notifications
// in c.cur.items (none when there is no subscriber).
func (c *Core) apply() {
	p := &c.cur
	deltas, chunk := p.deltas, p.chunk
	if p.next >= len(deltas) {
		return
	}
	c.t.Metrics.Applied(len(deltas) - p.next)

	tracing := false
	if c.t.Tracing() {
		for i := p.next; i < len(deltas); i++ {
			if deltas[i].Trace != nil {
				tracing = true
				if !p.tracing {
					p.tracing, p.batchStart = true, c.now()
				}
				break
			}
		}
	}

	if len(c.subs) > 0 {
		p.batch = newNotifications(len(deltas) - p.next)
		p.items = p.batch.Items
	}
	c.traced = c.traced[:0]
	for start := p.next; start < len(deltas); start += chunk {
		end := min(start+chunk, len(deltas))
		c.applyChunk(deltas, start, end, tracing)
	}
}

// notifications raises the subscribers' counters for items, initial of
// which are of the first list, and returns the batch to send every
// subscriber, b (which holds items' array) or, if b is nil, a new one; nil
// when nothing notifies.
func (c *Core) notifications(b *Notifications, items []Notification, initial int) *Notifications {
	if len(items) == 0 {
		if b != nil {
			b.hold(0)
		}
		return nil
	}
	for i := range c.subs {
		c.subs[i].count(len(items), initial)
	}
	if b == nil {
		b = &Notifications{}
	}
	b.Items, b.Syncing = items, c.syncing
	return b
}

// applyChunk applies deltas[start:end] under one write lock hold, appending
// their notifications to c.cur.items, and moves the cache's version on. The
// progress is stored back, and the version moved, when the chunk ends, also
// when a delta panics (one defer per chunk, none per delta): then for the
// deltas written to the cache before the panic.
func (c *Core) applyChunk(deltas []fifo.Delta, start, end int, tracing bool) {
	w := c.w
	items, initial := c.cur.items, c.cur.initial
	written := start // deltas[start:written] are in the cache
	next := start    // deltas[start:next] are handled or being handled
	w.Lock()
	defer func() {
		c.cur.items, c.cur.initial, c.cur.next = items, initial, next
		setVersion(w, deltas[start:written])
		w.Unlock()
	}()
	for i := start; i < end; i++ {
		next = i + 1
		d := &deltas[i]
		var t0 time.Time
		traced := tracing && d.Trace != nil
		if traced {
			t0 = c.now()
		}
		var n Notification
		switch d.Type {
		case fifo.Added, fifo.Updated, fifo.Replaced, fifo.Sync:
			old, existed := w.Upsert(d.Key, d.Object)
			if existed {
				n = Notification{Type: NotifyUpdate, Old: old, New: d.Object, Sync: sameResourceVersion(old, d.Object), Received: d.Received}
			} else {
				n = Notification{Type: NotifyAdd, New: d.Object, InitialList: d.InitialList, Received: d.Received}
			}
		case fifo.Deleted:
			w.Delete(d.Key)
			n = Notification{Type: NotifyDelete, New: d.Object, InitialList: d.InitialList, Received: d.Received}
		case fifo.Bookmark:
			// Only moves the resource version on (setVersion).
			written = i + 1
			continue
		default:
			// Unknown types are skipped, as client-go's processDeltas does.
			written = i + 1
			continue
		}
		written = i + 1
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
		// Last, once the delta's notification is kept: should the detector
		// panic, Recover sends it.
		if c.detector != nil && n.Type != NotifyDelete {
			c.detector.AddObject(d.Object)
		}
	}
}

// setVersion sets the cache's version to that of the last of deltas that
// moves it (see applyBatch), if any.
func setVersion(w *Writer, deltas []fifo.Delta) {
	for i := len(deltas) - 1; i >= 0; i-- {
		d := &deltas[i]
		switch d.Type {
		case fifo.Bookmark:
			w.SetResourceVersion(d.BookmarkRV())
		case fifo.Added, fifo.Updated, fifo.Deleted:
			rv, err := rvOf(d.Object) // fails on a tombstone
			if err != nil {
				continue
			}
			w.SetResourceVersion(rv)
		default:
			continue
		}
		break
	}
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

// onSubscribe registers a listener, addressed as stage.ToListener(s.ID)
// (the shell knows its mailbox, s.Target); it receives every batch from now
// on. A listener subscribing again with the same ID replaces its former
// subscription. When s.Initial is set it sends the listener the initial
// batch first: an add (InitialList set) for every cached object, with the
// listener's Sent counted. The batch is sent even when the
// cache is empty, so that the listener learns it has the whole cache.
func (c *Core) onSubscribe(s *Subscribe) {
	if initial := c.subscribe(s); initial != nil {
		c.out.Send(stage.ToListener(uint64(s.ID)), initial)
	}
}

func (c *Core) subscribe(s *Subscribe) (initial *Notifications) {
	c.unsubscribe(s.ID)
	sub := subscriber{id: s.ID, period: s.ResyncPeriod, sent: s.Sent, delivered: s.Delivered}
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
	if sub.sent != nil {
		defer sub.sent.MarkSubscribed()
	}
	if !s.Initial {
		return nil
	}

	items := make([]Notification, 0, c.w.Len())
	c.w.Each(func(obj any) {
		items = append(items, Notification{Type: NotifyAdd, New: obj, InitialList: true})
	})
	// An empty initial batch is still sent: it tells the listener that it
	// is subscribed and has everything the cache held.
	sub.count(len(items), len(items))
	return &Notifications{Items: items, Initial: true}
}

// route queues n, a batch apply returned, for every subscriber, in the
// order the messages must be sent: n itself to most listeners. A listener far behind (a backlog above compactAbove) costs a
// message, a batch value and an array per batch when the batches are small
// (a slow handler on a quiet stream); for it, the items of batches smaller
// than compactBelow are appended to arrays of compactChunk kept here, and a
// DrainMarker is sent; once it answers (Drained), each array goes as one
// batch. The items of later batches join the arrays while any are kept, so
// that the listener gets everything in order. Resync items the listener is not due
// for are left out of the array (and out of its Sent).
func (c *Core) route(n *Notifications) {
	sent := 0
	for i := range c.subs {
		s := &c.subs[i]
		if !s.marked && (len(n.Items) >= compactBelow || s.behind() <= compactAbove) {
			c.out.Send(s.addr(), n)
			sent++
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
		s.count(-skipped, 0)
		if !s.marked {
			s.marked = true
			c.out.Request(s.addr(), drainMarker)
		}
	}
	// The messages go after Step: the listeners release n after this.
	n.hold(sent)
}

// drainMarker is the one DrainMarker value sent.
var drainMarker = &DrainMarker{}

// drained handles a listener's answer to a DrainMarker: it has delivered
// everything sent before. The notifications kept back for it, if any, are
// sent, one batch per array, followed by a new marker; otherwise compaction
// ends for that listener.
func (c *Core) drained(id ListenerID) {
	i := c.indexOf(id)
	if i < 0 {
		return
	}
	s := &c.subs[i]
	if len(s.chunks) == 0 && len(s.compact) == 0 {
		s.marked = false
		return
	}
	to := s.addr()
	for _, b := range s.chunks {
		c.out.Send(to, b)
	}
	clear(s.chunks)
	s.chunks = s.chunks[:0]
	if len(s.compact) > 0 {
		c.out.Send(to, s.batch(s.compact))
		s.compact = nil
	}
	c.out.Request(to, drainMarker)
}

// addr is the listener's address.
func (s *subscriber) addr() stage.Addr { return stage.ToListener(uint64(s.id)) }

// count adds n notifications, initial of which are of the initial list,
// to what the listener was sent; negative counts take back notifications
// counted and kept back for it that it will not get.
func (s *subscriber) count(n, initial int) {
	if s.sent == nil {
		return
	}
	if n != 0 {
		s.sent.Notifications.Add(int64(n))
	}
	if initial != 0 {
		s.sent.Initial.Add(int64(initial))
	}
}

// behind returns how many notifications the listener has been sent (or has
// kept back for it) and has not done: what it has done is read first, so
// that the difference is never below what it was at that moment.
func (s *subscriber) behind() int64 {
	if s.sent == nil || s.delivered == nil {
		return 0
	}
	d := s.delivered.Load()
	return s.sent.Notifications.Load() - d
}

// forget takes kept-back items that will not be delivered out of what the
// listener was sent.
func (s *subscriber) forget(items []Notification) {
	initial := 0
	for _, it := range items {
		if it.InitialList {
			initial++
		}
	}
	s.count(-len(items), -initial)
}

// batch wraps notifications kept back for s as a batch for it alone.
func (s *subscriber) batch(items []Notification) *Notifications {
	return &Notifications{Items: items, Syncing: []ListenerID{s.id}, Owned: true}
}

// unsubscribe removes a listener; unknown IDs are ignored. Notifications
// kept back for it are dropped. It sends nothing.
func (c *Core) unsubscribe(id ListenerID) {
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

// resyncTick handles a tick of the resync check timer (Gen > 0; a stale
// one does nothing) or a check on demand (Gen 0, which leaves the timer
// alone): when a listener is due for a resync, it sends a *fifo.Resync to
// the queue.
func (c *Core) resyncTick(m *ResyncTick) {
	var due bool
	if m.Gen == 0 {
		due = c.resyncDue(c.now())
	} else {
		due = c.resyncCheck(m.Gen)
	}
	if due {
		c.out.Send(stage.ToQueue, &fifo.Resync{})
	}
}

// resyncDue decides, like client-go's shouldResync, which listeners resync
// now: those with a resync period whose next resync time has come. Their
// next time becomes now plus their period. The result is the syncing set of
// every following batch, until the next call. It reports whether any
// listener is due, in which case the queue should be asked for a Resync.
func (c *Core) resyncDue(now time.Time) bool {
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

// resyncCheck runs the check that the timer of generation gen asked for:
// resyncDue at the clock's current time, after which the timer is armed
// again for one check period. Like client-go's reflector, which makes a
// new timer after each check rather than running a ticker, checks are
// never less than a period apart, so a listener whose period is a multiple
// of the check period is never found just short of its time and skipped.
// A stale tick does nothing. It reports whether the queue should be asked
// for a Resync.
func (c *Core) resyncCheck(gen uint64) bool {
	if gen != c.checkGen || !c.armed {
		return false
	}
	c.armed = false
	due := c.resyncDue(c.now())
	c.armCheck()
	return due
}

// armCheck (re)sets the check timer for one check period from now, for a
// new generation (so an earlier tick is stale); with no check period, it
// only stops it.
func (c *Core) armCheck() {
	c.checkGen++
	if c.checkPeriod <= 0 {
		c.stopCheckTimer()
		return
	}
	c.armed = true
	c.out.Send(checkTimer, &stage.SetTimer{After: c.checkPeriod, Fire: &ResyncTick{Gen: c.checkGen}})
}

func (c *Core) stopCheckTimer() {
	if c.armed {
		c.armed = false
		c.out.Send(checkTimer, stage.StopTimerMsg)
	}
}

// addIndexersNow adds m.Indexers to the cache and indexes the cached
// objects (a name already in use is an error and adds nothing), and sends
// the result to the informer (an *IndexersAdded, which the shell puts on
// m.Reply).
func (c *Core) addIndexersNow(m *AddIndexers) {
	c.out.Send(stage.ToInformer, &IndexersAdded{Reply: m.Reply, Err: c.w.AddIndexers(m.Indexers)})
}
