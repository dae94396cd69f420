package actors

import (
	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/stage"
)

// handlerPath is what a listener core drives: the handler call path (which
// isolates panics, records spans and metrics) and the listener's counters.
// The listener implements it; the core's tests use a recording fake.
type handlerPath interface {
	// active is false once the handler was removed or the informer
	// stopped: nothing more is called.
	active() bool
	// call makes one handler call.
	call(it *indexer.Notification)
	// progress accounts for done notifications off the backlog (delivered,
	// skipped or merged into another), initial of which were initial-list
	// ones.
	progress(done, initial int64)
	// initialBatchDone is told once the synthetic initial batch has been
	// taken in.
	initialBatchDone()
}

// listenerCore is a listener's plain core: its input methods take one
// message the listener actor received, decide which handler calls to make
// (through a handlerPath) and return what must be sent because of it (see
// package stage). It is not safe for concurrent use: only the listener's
// actor calls it.
type listenerCore struct {
	id  indexer.ListenerID
	out stage.Outbox
}

// Notifications takes in one batch: each notification meant for this
// listener (a Sync one only if the batch syncs to it) is handed to the
// handler, until the handler is no longer active.
func (c *listenerCore) Notifications(n *indexer.Notifications, p handlerPath) []stage.Msg {
	c.out.Reset()
	var done, initial int64
	for i := range n.Items {
		it := &n.Items[i]
		if it.InitialList {
			initial++
		}
		if (!it.Sync || n.SyncsTo(c.id)) && p.active() {
			p.call(it)
		}
		done++
		if n.Owned {
			// Ours alone: let go of the objects as soon as they are
			// delivered rather than when the whole batch is.
			*it = indexer.Notification{}
		}
		if done == counterFlush {
			p.progress(done, initial)
			done, initial = 0, 0
		}
	}
	p.progress(done, initial)
	if n.Initial {
		p.initialBatchDone()
	}
	return c.out.Msgs()
}

// DrainMarker answers the indexer: every notification sent before the
// marker has been delivered.
func (c *listenerCore) DrainMarker() []stage.Msg {
	c.out.Reset()
	c.out.Send(stage.ToIndexer, &indexer.Drained{ID: c.id})
	return c.out.Msgs()
}
