package listener

import (
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// CounterFlush bounds how stale the backlog gauge gets inside one large batch.
const CounterFlush = 256

// Counters are a listener's progress, which other goroutines read (the
// registration's HasSynced, Stats, the backlog gauge). Only the listener
// writes them, as it does notifications: delivers them (by the handler's
// calls), skips them or merges them into others. What it was sent is the
// indexer's count, Sent, which the listener only reads: the backlog is
// what was sent less what was done.
type Counters struct {
	// Sent is the indexer's count of what it sent this listener (see
	// indexer.Sent), which Backlog and Pending read (the listener too, in
	// Done); nil: nothing sent.
	Sent *indexer.Sent
	// Delivered counts the notifications done: delivered, skipped or
	// merged. The indexer reads it to tell how far behind the listener is.
	Delivered atomic.Int64
	// DeliveredInitial counts those of them of the initial list.
	DeliveredInitial atomic.Int64
	// InitialDone is set once the listener has taken in every object the
	// cache held when it subscribed: at once for a handler added before
	// the informer ran, after the synthetic initial batch for the others.
	InitialDone atomic.Bool
	// Panics counts the handler's panics (see Handler).
	Panics atomic.Int64
	// Metrics and Attrs, when set, count the delivered notifications.
	Metrics *telemetry.Metrics
	Attrs   metric.MeasurementOption
}

// Done accounts for done notifications, initial of which are initial-list
// ones. It reports whether that brought Pending to zero: the handler's
// registration may have synced.
func (c *Counters) Done(done, initial int64) bool {
	if done > 0 {
		c.Delivered.Add(done)
		if c.Metrics != nil {
			c.Metrics.Delivered(int(done), c.Attrs)
		}
	}
	if initial > 0 {
		c.DeliveredInitial.Add(initial)
		return c.Pending() == 0
	}
	return false
}

// Backlog returns the number of notifications sent to the listener and
// not yet done.
func (c *Counters) Backlog() int64 {
	d := c.Delivered.Load() // first: never more done than sent
	if c.Sent == nil {
		return 0
	}
	return c.Sent.Notifications.Load() - d
}

// Pending returns the number of initial-list notifications sent to the
// listener and not yet done: its registration has synced once the
// informer has, InitialDone is set, and Pending is zero.
func (c *Counters) Pending() int64 {
	d := c.DeliveredInitial.Load() // first: never more done than sent
	if c.Sent == nil {
		return 0
	}
	return c.Sent.Initial.Load() - d
}

// Config configures a Core.
type Config struct {
	// ID is the listener's: its address is stage.ToListener(ID), its
	// handler's stage.ToHandler(ID).
	ID indexer.ListenerID
	// Coalesce merges the notifications pending for the handler per key
	// (see Coalescer), keyed by cache.DeletionHandlingMetaNamespaceKeyFunc;
	// its calls are then made one key at a time by a handler runner.
	Coalesce bool
	// Counters are the listener's; nil: counted nowhere.
	Counters *Counters
}

// Core is a listener's plain core: it decides which handler calls to make
// for the notifications the indexer sends, and sends them to its handler
// (stage.ToHandler) as Calls, one message per batch (per pending key for
// a Coalesced handler) that is a view of it, nothing allocated per call.
// It is not safe for concurrent use: only the listener's actor calls it.
type Core struct {
	id       indexer.ListenerID
	out      stage.Outbox
	counters *Counters
	// calls is the one Calls value of a listener that does not coalesce:
	// its handler's calls are made at once, before the next Step.
	calls Calls
	// pending is set for a Coalesced handler: notifications are merged
	// there per key, and handed to the handler runner one key at a time.
	pending *Coalescer
	// inflight is the key handed to the runner, until it answers
	// CallsDone; nil while the runner is idle.
	inflight *PendingKey
}

// NewCore returns a listener's core.
func NewCore(cfg Config) *Core {
	c := &Core{id: cfg.ID, counters: cfg.Counters}
	if c.counters == nil {
		c.counters = &Counters{}
	}
	if cfg.Coalesce {
		c.pending = NewCoalescer(cache.DeletionHandlingMetaNamespaceKeyFunc)
	}
	return c
}

// Coalesced reports whether the core merges pending notifications.
func (c *Core) Coalesced() bool { return c.pending != nil }

// Step is the core's one input (see package stage): it takes one message
// and returns what must be sent because of it, valid until the next Step.
//
//   - *indexer.Notifications: a listener that does not coalesce sends the
//     batch to its handler as one Calls (the handler's side skips the Sync
//     notifications the batch does not sync to it), whose Handler.Call
//     releases the batch. A Coalesced one merges each notification meant
//     for it (a Sync one only if the batch syncs to it) into the pending
//     ones, releases the batch, and sends the oldest pending key to the
//     handler runner if it is idle.
//   - *indexer.DrainMarker: answers the indexer with *indexer.Drained:
//     every notification sent before the marker has been delivered (for a
//     Coalesced handler: delivered or merged into the pending ones, which
//     are bounded by the number of keys).
//   - *CallsDone: the handler runner made the calls it was given; the next
//     pending key goes to it.
//   - Lifecycle(stage.Started): the listener actor (re)started with a new
//     handler runner (see started). The other events do nothing.
//
// A *Synced goes to stage.ToInformer when the listener has taken in its
// initial batch, or brought its Pending count to zero, itself.
func (c *Core) Step(in Input) []stage.Msg {
	c.out.Reset()
	switch m := in.(type) {
	case *indexer.Notifications:
		if c.pending == nil {
			c.calls = Calls{Items: m.Items, Syncs: m.SyncsTo(c.id), Owned: m.Owned, InitialBatch: m.Initial, batch: m}
			c.out.Send(stage.ToHandler(uint64(c.id)), &c.calls)
			break
		}
		c.merge(m)
		m.Release() // merged: the pending notifications are copies
		c.schedule()
	case *indexer.DrainMarker:
		c.out.Send(stage.ToIndexer, &indexer.Drained{ID: c.id})
	case *CallsDone:
		c.inflight = nil
		c.schedule()
	case Lifecycle:
		if stage.Lifecycle(m) == stage.Started {
			c.started()
		}
	}
	return c.out.Msgs()
}

// merge takes a batch into a Coalesced handler's pending notifications.
func (c *Core) merge(n *indexer.Notifications) {
	var done, initial int64
	synced := false
	for i := range n.Items {
		it := &n.Items[i]
		if it.Sync && !n.SyncsTo(c.id) {
			if it.InitialList {
				initial++
			}
			done++
		} else {
			// Initial-list notifications stay counted while pending.
			d, i := c.pending.add(it)
			done += d
			initial += i
		}
		if n.Owned {
			// Ours alone: let go of the objects now.
			*it = indexer.Notification{}
		}
		if done >= CounterFlush {
			synced = c.counters.Done(done, initial) || synced
			done, initial = 0, 0
		}
	}
	synced = c.counters.Done(done, initial) || synced
	if n.Initial {
		c.counters.InitialDone.Store(true)
		synced = true
	}
	if synced {
		c.out.Send(stage.ToInformer, syncedMsg)
	}
}

// started is told when the listener actor has (re)started, and with it
// its handler runner. A runner is stopped before its listener restarts (it
// is the listener's child), after the calls it is making, if any, and
// dropping what its mailbox holds: a key it had taken (Calls.Take) was
// run, and its CallsDone is on its way; a key it had not taken is handed
// to the new runner, so that the handler still gets its calls.
func (c *Core) started() {
	if c.pending == nil {
		return
	}
	if e := c.inflight; e != nil {
		if !e.calls.taken.Load() {
			c.out.Send(stage.ToHandler(uint64(c.id)), &e.calls)
		}
		return
	}
	c.schedule()
}

// Held calls f for the keys of a Coalesced handler whose calls are still
// to make, oldest first: the one handed to the runner, if the runner has
// not taken it yet, then those pending.
func (c *Core) Held(f func(e *PendingKey)) {
	if e := c.inflight; e != nil && !e.calls.taken.Load() {
		f(e)
	}
	if c.pending != nil {
		c.pending.Each(f)
	}
}

// schedule hands the oldest pending key to the handler runner if it is
// idle.
func (c *Core) schedule() {
	if c.inflight != nil {
		return
	}
	if e := c.pending.pop(); e != nil {
		c.inflight = e
		e.calls = Calls{Items: e.n[:e.len], Syncs: true}
		c.out.Send(stage.ToHandler(uint64(c.id)), &e.calls)
	}
}

// syncedMsg is the one Synced value sent.
var syncedMsg = &Synced{}
