package indexer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/pulse"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// The indexer actor accepts *fifo.Batch (acknowledged by sending the queue
// *fifo.Processed), *fifo.Listed and the messages below.

// ListenerID identifies one registered handler's listener.
type ListenerID uint64

// Input is what the indexer's core takes, in Step: the queue's
// *fifo.Batch and *fifo.Listed, the informer's *Subscribe, *Unsubscribe
// and *AddIndexers, a listener's *Drained, its timer's *ResyncTick, and
// its actor's Lifecycle. Its method is exported only because two of those
// types are package fifo's (the queue's messages, in the package the
// indexer imports); no other type implements it.
type Input interface{ IndexerInput() }

// Lifecycle tells the core of an event of its actor's life (see
// stage.Lifecycle).
type Lifecycle stage.Lifecycle

// IndexerInput marks the indexer's inputs (see Input).
func (*Subscribe) IndexerInput()   {}
func (*Unsubscribe) IndexerInput() {}
func (*AddIndexers) IndexerInput() {}
func (*Drained) IndexerInput()     {}
func (*ResyncTick) IndexerInput()  {}
func (Lifecycle) IndexerInput()    {}

// Subscribe registers a listener. When Initial is set (a handler added to a
// running informer), the listener first receives a Notifications batch with
// an OnAdd(obj, true) for every cached object, before any later change.
type Subscribe struct {
	ID ListenerID
	// Target is the listener actor's mailbox.
	Target *actor.PID
	// ResyncPeriod is the handler's resync period; 0 means never.
	ResyncPeriod time.Duration
	// Added is when the handler was added: its first resync is due one
	// period after it, as in client-go. Zero means the time of subscription.
	Added   time.Time
	Initial bool
	// Sent is where the core counts what it sends this listener (see
	// Sent); nil: not counted.
	Sent *Sent
	// Delivered is the listener's count of the notifications it has done
	// (listener.Counters.Delivered), which the core reads, and never
	// writes, to tell how far behind the listener is (see Core.route);
	// nil: never behind.
	Delivered *atomic.Int64
}

// Sent counts what the indexer has sent one listener, or keeps back for it
// (see Core.route), before it sends it. Only the indexer's core writes it;
// the informer reads it with what the listener has done
// (listener.Counters): the handler's backlog is Notifications less the
// notifications done, and its registration has synced once the listener
// has done Initial initial-list ones. The core counts before it sends, so
// that a reader who loads what was done first never finds more done than
// sent.
type Sent struct {
	// Notifications is the number of notifications sent, less those kept
	// back and then dropped (the listener removed) or left out (resyncs it
	// is not due for).
	Notifications atomic.Int64
	// Initial is the number of them that belong to the initial list
	// (InitialList set).
	Initial atomic.Int64
	// Subscribed is set once the core has subscribed the listener (and,
	// for an Initial subscription, taken its initial list): every change
	// the cache applies from then on reaches the listener
	// (MarkSubscribed).
	Subscribed atomic.Bool
	// subscribed fires as Subscribed is set (SubscribedChan).
	subscribed pulse.Pulse
}

// MarkSubscribed sets Subscribed and wakes those waiting for it.
func (s *Sent) MarkSubscribed() {
	s.Subscribed.Store(true)
	s.subscribed.Fire()
}

// SubscribedChan returns a channel closed once Subscribed is set.
func (s *Sent) SubscribedChan() <-chan struct{} {
	ch := s.subscribed.Wait()
	if s.Subscribed.Load() {
		s.subscribed.Fire() // set before the wait was taken
	}
	return ch
}

// Unsubscribe removes a listener; it receives nothing more.
type Unsubscribe struct {
	ID ListenerID
}

// DrainMarker is sent (with Request) to a listener that is far behind,
// after the last notifications it was sent: when the listener gets to it,
// it has delivered everything sent before, and answers with Drained. Until
// then the indexer keeps that listener's notifications in one compact
// array instead of sending it a batch message per small batch.
type DrainMarker struct{}

// ListenerInput makes Notifications and DrainMarker inputs of a
// listener (listener.Input), which they are sent to.
func (*Notifications) ListenerInput() {}
func (*DrainMarker) ListenerInput()   {}

// Drained answers a DrainMarker: the listener has delivered every
// notification sent to it before the marker.
type Drained struct {
	ID ListenerID
}

// AddIndexers adds indexers to the running cache, indexing the objects it
// already holds. The core answers with an *IndexersAdded to
// stage.ToInformer, carrying Reply back: the shell puts the result on it.
type AddIndexers struct {
	Indexers cache.Indexers
	// Reply is where the shell answers (buffered, capacity 1); the core
	// never touches it.
	Reply chan error
}

// IndexersAdded is the core's answer to an AddIndexers, sent to
// stage.ToInformer once the indexers are added and the cached objects
// indexed (Err nil), or nothing was added (Err says why). The indexer's
// shell performs it by putting Err on Reply, the request's, without
// blocking.
type IndexersAdded struct {
	Reply chan error
	Err   error
}

// ResyncTick asks the indexer which listeners are due for a resync; if any
// are, it asks the queue for a Resync. The indexer's check timer sends them
// with the timer's generation (see Core.ResyncCheck); a tick with Gen 0 is
// a check on demand, which does not touch the timer.
type ResyncTick struct {
	Gen uint64
}

// NotificationType is what a handler is told.
type NotificationType uint8

const (
	NotifyAdd NotificationType = iota + 1
	NotifyUpdate
	NotifyDelete
)

func (t NotificationType) String() string {
	switch t {
	case NotifyAdd:
		return "add"
	case NotifyUpdate:
		return "update"
	case NotifyDelete:
		return "delete"
	}
	return "unknown"
}

// Notification is one call to make on a handler.
//
// A Notification takes 48 bytes on 64-bit machines (a handler's backlog
// costs that per notification, plus the objects): it carries no key (Key
// derives it) and its flags share a word with Type.
type Notification struct {
	Type NotificationType
	// InitialList marks OnAdd calls that belong to the initial list.
	InitialList bool
	// Sync marks an update whose resourceVersion did not change (a resync):
	// only listeners in the batch's Syncing set receive it.
	Sync bool
	// Received is the delta's fifo.Delta.Received (zero when not stamped),
	// for the handler event age metric. It fits in the padding after the
	// flags.
	Received telemetry.Stamp
	// Old is set for updates.
	Old any
	// New is the object added or updated, or the deleted object (possibly a
	// cache.DeletedFinalStateUnknown).
	New any
	// Trace is the parent (the indexer span) for the listener spans; nil
	// when the delta is not sampled.
	Trace *telemetry.DeltaTrace
}

// Key returns the cache key of the notification's object (tombstones
// included), or a description of the error when it has none. It is
// computed on each call: for logs and errors, not for the hot path.
func (n *Notification) Key() string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(n.New)
	if err != nil {
		return fmt.Sprintf("<no key: %v>", err)
	}
	return k
}

// Notifications is one batch sent to listeners. The same batch value is
// shared by every listener: it is read-only once sent. A listener calls
// Release once it is done with it (its calls made, or merged into its own
// pending ones): the batches of the cache's changes, and their arrays, are
// reused once every listener they were sent to has released them.
type Notifications struct {
	Items []Notification
	// Syncing lists the listeners due for a resync; Sync notifications
	// go only to them.
	Syncing []ListenerID
	// Initial marks the synthetic initial batch sent to one new listener.
	Initial bool
	// Owned marks a batch sent to one listener only (the notifications the
	// indexer kept back for it, see Core.Drained): the listener may clear
	// each notification once it has delivered it.
	Owned bool
	// pooled marks a value of notificationsPool (newNotifications); refs
	// counts the listeners it was sent to that have not released it.
	pooled bool
	refs   atomic.Int32
}

// Release tells that a listener the batch was sent to is done with it: it
// must not read the batch after. Once every one has, a batch the core took
// from its pool goes back there. A listener that never releases a batch
// only keeps it from being reused.
func (n *Notifications) Release() {
	if n.pooled && n.refs.Add(-1) == 0 {
		n.recycle()
	}
}

// notificationsPool recycles the batches of the cache's changes (see
// Core.apply): a value and an array per batch would otherwise cost 48
// bytes per notification.
var notificationsPool = sync.Pool{New: func() any { return &Notifications{pooled: true} }}

// maxPooledNotifications: a batch whose array grew larger (a relist
// applied at once) is left to the garbage collector rather than pinned in
// the pool.
const maxPooledNotifications = fifo.DefaultMaxBatch

// newNotifications returns an empty batch of the pool with room for n
// items.
func newNotifications(n int) *Notifications {
	b := notificationsPool.Get().(*Notifications)
	if cap(b.Items) < n {
		b.Items = make([]Notification, 0, n)
	}
	return b
}

// hold makes the pooled batch n wait for the Release of the listeners
// it is sent to, k of them, before it is reused; with none, it is reused at
// once.
func (n *Notifications) hold(k int) {
	if !n.pooled {
		return
	}
	if k == 0 {
		n.recycle()
		return
	}
	n.refs.Store(int32(k))
}

// recycle gives n back to the pool, without the objects its notifications
// reference.
func (n *Notifications) recycle() {
	if cap(n.Items) > maxPooledNotifications {
		return
	}
	clear(n.Items)
	n.Items, n.Syncing = n.Items[:0], nil
	n.Initial, n.Owned = false, false
	notificationsPool.Put(n)
}

// SyncsTo reports whether Sync notifications of this batch go to id.
func (n *Notifications) SyncsTo(id ListenerID) bool {
	for _, s := range n.Syncing {
		if s == id {
			return true
		}
	}
	return false
}
