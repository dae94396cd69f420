package listener

import (
	"sync/atomic"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/stage"
)

// Input is what a listener's core takes, in Step: the indexer's
// *indexer.Notifications and *indexer.DrainMarker, a Coalesced handler's
// runner's *CallsDone, and its actor's Lifecycle. Its method is exported
// only because two of those types are package indexer's (the indexer's
// messages, in the package the listener imports); no other type
// implements it.
type Input interface{ ListenerInput() }

// Lifecycle tells the core of an event of its actor's life (see
// stage.Lifecycle).
type Lifecycle stage.Lifecycle

// ListenerInput marks the listener's inputs (see Input).
func (*CallsDone) ListenerInput() {}
func (Lifecycle) ListenerInput()  {}

// Calls asks a listener's handler (stage.ToHandler) to make calls: one
// per notification of Items, in order, skipping the Sync ones unless Syncs
// is set, and nothing once the handler is removed or the informer stopped;
// each notification counts as done (Counters.Done) once called or skipped.
// It is a view of a batch (or of one key's pending notifications), valid
// until the calls are made.
type Calls struct {
	Items []indexer.Notification
	// Syncs: the batch's Sync notifications are for this handler (it is
	// due for a resync).
	Syncs bool
	// Owned: the items are this listener's alone (the indexer kept them
	// back for it); each may be cleared once called, so that the objects
	// are let go of as soon as they are delivered.
	Owned bool
	// InitialBatch marks the synthetic initial batch of a handler added to
	// a running informer: once it is done, the handler has had every
	// object the cache held (Counters.InitialDone).
	InitialBatch bool
	// batch is the indexer's batch Items views, released once the calls
	// are made (see indexer.Notifications.Release); nil for a Coalesced
	// handler's pending key.
	batch *indexer.Notifications
	// taken is set by Take.
	taken atomic.Bool
}

// Take is what a Coalesced handler's runner calls before it makes the
// calls: should the listener restart meanwhile, its core then knows that
// the old runner made them (see Core.Step on Lifecycle(stage.Started)).
func (c *Calls) Take() { c.taken.Store(true) }

// CallsDone tells a Coalesced handler's listener that its runner made the
// calls it was given.
type CallsDone struct{}

// CallsDoneMsg is the one CallsDone the runner sends.
var CallsDoneMsg = &CallsDone{}

// Synced is what a listener reports to the informer (stage.ToInformer)
// when its handler's registration may have synced: it took in its initial
// batch, or brought its Pending count to zero.
type Synced struct{}
