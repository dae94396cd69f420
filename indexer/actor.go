package indexer

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
)

// ErrStopped is returned by Store.AddIndexers once the indexer actor that
// owns the store has stopped.
var ErrStopped = errors.New("indexer: indexers were not added because the informer's indexer actor has stopped")

// AddIndexersTimeout bounds how long Store.AddIndexers waits for the indexer
// actor once the store is sealed.
const AddIndexersTimeout = time.Minute

// indexerActor is the thin protoactor shell around a Core.
type indexerActor struct {
	core  *Core
	store *Store
	// queue is the delta queue, learned from the sender of batches.
	queue *actor.PID
	// inflight is the length of the batch being applied, 0 between batches:
	// if applying it panics, the restart acknowledges it (see Receive).
	inflight int
	// ctx and send: the send function handed to the core, bound once (a
	// closure per batch would be an allocation per batch).
	ctx     actor.Context
	send    func(*actor.PID, any)
	stopped chan struct{}
	// fire is the core's resync check timer callback: it sends the tick.
	fire func(gen uint64)
}

// NewActor returns the indexer actor for core, whose cache is store. Give it
// a producer that returns a new value each time, e.g.
//
//	actor.PropsFromProducer(func() actor.Actor { return indexer.NewActor(core, store) })
//
// and keep core and store outside it: they survive a restart.
//
// The actor handles:
//   - *fifo.Batch (sent with Request by the queue): applies the deltas, sends
//     the resulting *Notifications, one shared value, to every subscriber,
//     then answers the sender with *fifo.Processed. The sender is remembered
//     as the queue.
//   - *Drained: a listener's answer to a *DrainMarker (see Core.Route).
//   - *Subscribe, *Unsubscribe: (un)registers a listener; a Subscribe with
//     Initial first gets the cached objects as an initial batch.
//   - *AddIndexers: adds indexers, answering on Reply.
//   - *fifo.Listed (sent with Request by the queue when it got a list):
//     (re)starts the resync checks (Core.StartResyncChecks), as client-go's
//     reflector does after storing a list. The sender is remembered as the
//     queue.
//   - *ResyncTick: when a listener's resync is due, sends *fifo.Resync to the
//     queue. The core's check timer sends these, one check period after the
//     previous check; it is stopped with the actor.
//
// When it starts it seals store (external writes now fail with ErrReadOnly)
// and routes Store.AddIndexers through itself.
func NewActor(core *Core, store *Store) actor.Actor {
	return &indexerActor{core: core, store: store}
}

func (a *indexerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *fifo.Batch:
		if s := ctx.Sender(); s != nil {
			a.queue = s
		}
		a.core.Expect(m.InitialRemaining)
		a.inflight = len(m.Deltas)
		latency := a.core.t.ProcessingLatency
		var start time.Time
		if latency != nil {
			start = time.Now()
		}
		if n := a.core.ApplyBatch(m); n != nil {
			a.core.Route(n, a.sender(ctx))
		}
		if latency != nil {
			latency.Observe(time.Since(start).Seconds())
		}
		a.inflight = 0
		if ctx.Sender() != nil {
			ctx.Respond(&fifo.Processed{Count: len(m.Deltas)})
		}
	case *Subscribe:
		if initial := a.core.Subscribe(m); initial != nil {
			ctx.Send(m.Target, initial)
		}
	case *Unsubscribe:
		a.core.Unsubscribe(m.ID)
	case *Drained:
		a.core.Drained(m.ID, a.sender(ctx))
	case *AddIndexers:
		err := a.core.AddIndexers(m.Indexers)
		select {
		case m.Reply <- err:
		default: // Reply must be buffered; never block the actor on it.
		}
	case *fifo.Listed:
		if s := ctx.Sender(); s != nil {
			a.queue = s
		}
		a.core.StartResyncChecks(a.fire)
	case *ResyncTick:
		var due bool
		if m.Gen == 0 {
			due = a.queue != nil && a.core.ResyncDue(a.core.now())
		} else {
			due = a.core.ResyncCheck(m.Gen)
		}
		if due && a.queue != nil {
			ctx.Send(a.queue, &fifo.Resync{})
		}
	case *actor.Started:
		a.stopped = make(chan struct{})
		a.store.Seal()
		a.store.SetAddIndexersHook(addIndexersHook(ctx.ActorSystem(), ctx.Self(), a.stopped))
		sys, self := ctx.ActorSystem(), ctx.Self()
		a.fire = func(gen uint64) { sys.Root.Send(self, &ResyncTick{Gen: gen}) }
		// After a restart: the checks go on.
		a.core.ResumeResyncChecks(a.fire)
	case *actor.Restarting:
		// Receive panicked (a bug of ours: user index functions are
		// recovered in the store). If it was applying a batch, the queue
		// waits for its acknowledgement and would stall: acknowledge it. The
		// batch may be partly applied and its notifications unsent; the next
		// relist repairs the cache.
		if a.inflight > 0 && a.queue != nil {
			a.core.t.Logger.Error("indexer: applying a batch panicked; acknowledging it so that the pipeline goes on (the batch may be partly applied)",
				"informer", a.core.t.Info.Name, "deltas", a.inflight)
			ctx.Send(a.queue, &fifo.Processed{Count: a.inflight})
			a.inflight = 0
		}
		a.stop()
	case *actor.Stopping, *actor.Stopped:
		a.stop()
	}
}

// sender returns the function through which the core sends to listeners:
// a DrainMarker goes with Request, so that the listener can answer it.
func (a *indexerActor) sender(ctx actor.Context) func(*actor.PID, any) {
	a.ctx = ctx
	if a.send == nil {
		a.send = func(target *actor.PID, msg any) {
			if _, ok := msg.(*DrainMarker); ok {
				a.ctx.Request(target, msg)
				return
			}
			a.ctx.Send(target, msg)
		}
	}
	return a.send
}

func (a *indexerActor) stop() {
	a.core.StopResyncChecks()
	if a.stopped != nil {
		close(a.stopped)
		a.stopped = nil
	}
}

// addIndexersHook forwards Store.AddIndexers to the actor and waits for its
// answer, so that indexers are added between two batches.
func addIndexersHook(sys *actor.ActorSystem, self *actor.PID, stopped <-chan struct{}) func(cache.Indexers) error {
	return func(idx cache.Indexers) error {
		select {
		case <-stopped:
			return ErrStopped
		default:
		}
		m := &AddIndexers{Indexers: idx, Reply: make(chan error, 1)}
		sys.Root.Send(self, m)
		timeout := time.NewTimer(AddIndexersTimeout)
		defer timeout.Stop()
		select {
		case err := <-m.Reply:
			return err
		case <-stopped:
			// It may have been handled just before the actor stopped.
			select {
			case err := <-m.Reply:
				return err
			default:
				return ErrStopped
			}
		case <-timeout.C:
			return fmt.Errorf("indexer: AddIndexers: no answer from the indexer actor within %v", AddIndexersTimeout)
		}
	}
}
