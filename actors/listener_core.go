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

// runCalls asks a coalescing listener's handler runner to make the calls
// pending for one key; the runner answers callsDone. The runner is the
// listener's own (ToListener(its id)); the listener actor goes on merging
// while the handler runs, which is what bounds its backlog.
type runCalls struct{ e *pendingKey }

// callsDone tells a coalescing listener that its runner made the calls.
type callsDone struct{}

var callsDoneMsg = &callsDone{}

// listenerCore is a listener's plain core: its input methods take one
// message the listener actor received, decide which handler calls to make
// (through a handlerPath) and return what must be sent because of it (see
// package stage). It is not safe for concurrent use: only the listener's
// actor calls it.
type listenerCore struct {
	id  indexer.ListenerID
	out stage.Outbox
	// pending is set for a Coalesced handler: notifications are merged
	// there per key, and handed to the handler runner one key at a time.
	pending *coalescer
	// running is set while the runner has calls to make.
	running bool
}

// Notifications takes in one batch: each notification meant for this
// listener (a Sync one only if the batch syncs to it) is handed to the
// handler, until the handler is no longer active; for a Coalesced handler
// it is merged into the pending notifications instead, and the oldest
// pending key goes to the handler runner if it is idle.
func (c *listenerCore) Notifications(n *indexer.Notifications, p handlerPath) []stage.Msg {
	c.out.Reset()
	var done, initial int64
	for i := range n.Items {
		it := &n.Items[i]
		switch {
		case (it.Sync && !n.SyncsTo(c.id)) || !p.active():
			if it.InitialList {
				initial++
			}
			done++
		case c.pending != nil:
			// Initial-list notifications stay counted while pending.
			d, i := c.pending.add(it)
			done += d
			initial += i
		default:
			if it.InitialList {
				initial++
			}
			p.call(it)
			done++
		}
		if n.Owned {
			// Ours alone: let go of the objects as soon as they are
			// delivered rather than when the whole batch is.
			*it = indexer.Notification{}
		}
		if done >= counterFlush {
			p.progress(done, initial)
			done, initial = 0, 0
		}
	}
	p.progress(done, initial)
	if n.Initial {
		p.initialBatchDone()
	}
	c.schedule()
	return c.out.Msgs()
}

// CallsDone is the handler runner's answer to runCalls: the next pending
// key goes to it, or everything pending is dropped once the handler is no
// longer active.
func (c *listenerCore) CallsDone(p handlerPath) []stage.Msg {
	c.out.Reset()
	c.running = false
	if c.pending != nil && !p.active() {
		p.progress(c.pending.dropAll())
		return nil
	}
	c.schedule()
	return c.out.Msgs()
}

// RunnerStarted is told when the listener's handler runner has been
// (re)started: calls it was given before are forgotten.
func (c *listenerCore) RunnerStarted() []stage.Msg {
	c.out.Reset()
	c.running = false
	c.schedule()
	return c.out.Msgs()
}

// schedule hands the oldest pending key to the handler runner if it is
// idle.
func (c *listenerCore) schedule() {
	if c.pending == nil || c.running {
		return
	}
	if e := c.pending.pop(); e != nil {
		c.running = true
		c.out.Send(stage.ToListener(uint64(c.id)), &runCalls{e: e})
	}
}

// run makes the calls pending for one key, in order (the handler runner's
// work), and accounts for them.
func (e *pendingKey) run(p handlerPath) {
	for i := range e.len {
		if p.active() {
			p.call(&e.n[i])
		}
	}
	p.progress(int64(e.len), e.initial)
}

// DrainMarker answers the indexer: every notification sent before the
// marker has been delivered (for a Coalesced handler: delivered or merged
// into the pending ones, which are bounded by the number of keys).
func (c *listenerCore) DrainMarker() []stage.Msg {
	c.out.Reset()
	c.out.Send(stage.ToIndexer, &indexer.Drained{ID: c.id})
	return c.out.Msgs()
}
