package listener

import (
	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/stage"
)

// Path is what a listener core drives: the handler call path (which
// isolates panics, records spans and metrics) and the listener's counters.
// The listener implements it; the core's tests use a recording fake.
type Path interface {
	// Active is false once the handler was removed or the informer
	// stopped: nothing more is called.
	Active() bool
	// Call makes one handler call.
	Call(it *indexer.Notification)
	// Progress accounts for done notifications off the backlog (delivered,
	// skipped or merged into another), initial of which were initial-list
	// ones.
	Progress(done, initial int64)
	// InitialBatchDone is told once the synthetic initial batch has been
	// taken in.
	InitialBatchDone()
}

// RunCalls asks a coalescing listener's handler runner to make the calls
// pending for one key; the runner answers CallsDone. The runner is the
// listener's own (ToListener(its id)); the listener actor goes on merging
// while the handler runs, which is what bounds its backlog.
type RunCalls struct{ Key *PendingKey }

// CallsDone tells a coalescing listener that its runner made the calls.
type CallsDone struct{}

// CallsDoneMsg is the one CallsDone the runner sends.
var CallsDoneMsg = &CallsDone{}

// CounterFlush bounds how stale the backlog gauge gets inside one large batch.
const CounterFlush = 256

// Core is a listener's plain core: its input methods take one
// message the listener actor received, decide which handler calls to make
// (through a Path) and return what must be sent because of it (see
// package stage). It is not safe for concurrent use: only the listener's
// actor calls it.
type Core struct {
	ID  indexer.ListenerID
	out stage.Outbox
	// Pending is set for a Coalesced handler: notifications are merged
	// there per key, and handed to the handler runner one key at a time.
	Pending *Coalescer
	// inflight is the key handed to the runner, until it answers
	// CallsDone; nil while the runner is idle.
	inflight *PendingKey
}

// Notifications takes in one batch: each notification meant for this
// listener (a Sync one only if the batch syncs to it) is handed to the
// handler, until the handler is no longer active; for a Coalesced handler
// it is merged into the pending notifications instead, and the oldest
// pending key goes to the handler runner if it is idle.
func (c *Core) Notifications(n *indexer.Notifications, p Path) []stage.Msg {
	c.out.Reset()
	var done, initial int64
	for i := range n.Items {
		it := &n.Items[i]
		switch {
		case (it.Sync && !n.SyncsTo(c.ID)) || !p.Active():
			if it.InitialList {
				initial++
			}
			done++
		case c.Pending != nil:
			// Initial-list notifications stay counted while pending.
			d, i := c.Pending.add(it)
			done += d
			initial += i
		default:
			if it.InitialList {
				initial++
			}
			p.Call(it)
			done++
		}
		if n.Owned {
			// Ours alone: let go of the objects as soon as they are
			// delivered rather than when the whole batch is.
			*it = indexer.Notification{}
		}
		if done >= CounterFlush {
			p.Progress(done, initial)
			done, initial = 0, 0
		}
	}
	p.Progress(done, initial)
	if n.Initial {
		p.InitialBatchDone()
	}
	c.schedule()
	return c.out.Msgs()
}

// CallsDone is the handler runner's answer to RunCalls: the next pending
// key goes to it, or everything pending is dropped once the handler is no
// longer active.
func (c *Core) CallsDone(p Path) []stage.Msg {
	c.out.Reset()
	c.inflight = nil
	if c.Pending != nil && !p.Active() {
		p.Progress(c.Pending.dropAll())
		return nil
	}
	c.schedule()
	return c.out.Msgs()
}

// RunnerStarted is told when the listener's handler runner has been
// (re)started. A runner is stopped before its listener restarts (it is the
// listener's child), after the call it is making, if any, and dropping
// what its mailbox holds: a key it had taken (PendingKey.Run) was run,
// and its CallsDone is on its way; a key it had not taken is handed to
// the new runner, so that the handler still gets its calls.
func (c *Core) RunnerStarted() []stage.Msg {
	c.out.Reset()
	if e := c.inflight; e != nil {
		if !e.taken.Load() {
			c.out.Send(stage.ToListener(uint64(c.ID)), &RunCalls{Key: e})
		}
		return c.out.Msgs()
	}
	c.schedule()
	return c.out.Msgs()
}

// Held calls f for the keys whose calls are still to make, oldest first:
// the one handed to the runner, if the runner has not taken it yet, then
// those pending.
func (c *Core) Held(f func(e *PendingKey)) {
	if e := c.inflight; e != nil && !e.taken.Load() {
		f(e)
	}
	if c.Pending != nil {
		c.Pending.Each(f)
	}
}

// schedule hands the oldest pending key to the handler runner if it is
// idle.
func (c *Core) schedule() {
	if c.Pending == nil || c.inflight != nil {
		return
	}
	if e := c.Pending.pop(); e != nil {
		c.inflight = e
		c.out.Send(stage.ToListener(uint64(c.ID)), &RunCalls{Key: e})
	}
}

// Run makes the calls pending for one key, in order (the handler runner's
// work), and accounts for them. It marks the key taken first: should the
// listener restart meanwhile, its core knows that the old runner made
// these calls.
func (e *PendingKey) Run(p Path) {
	e.taken.Store(true)
	for i := range e.len {
		if p.Active() {
			p.Call(&e.n[i])
		}
	}
	p.Progress(int64(e.len), e.initial)
}

// DrainMarker answers the indexer: every notification sent before the
// marker has been delivered (for a Coalesced handler: delivered or merged
// into the pending ones, which are bounded by the number of keys).
func (c *Core) DrainMarker() []stage.Msg {
	c.out.Reset()
	c.out.Send(stage.ToIndexer, &indexer.Drained{ID: c.ID})
	return c.out.Msgs()
}
