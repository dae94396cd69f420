package indexer

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
)

// ErrStopped is returned by Store.AddIndexers once the indexer actor that
// owns the store has stopped.
var ErrStopped = errors.New("indexer: indexers were not added because the informer's indexer actor has stopped")

// AddIndexersTimeout bounds how long Store.AddIndexers waits for the indexer
// actor once the store is sealed.
const AddIndexersTimeout = time.Minute

// Props returns the props of the indexer actor, the thin protoactor shell
// around core, which sends to the delta queue at queue. Keep core outside
// the props: it survives a restart of the actor, as do the listeners'
// mailboxes the shell was given (in Subscribe) and queue.
//
// The actor decodes each message, hands it to the core and delivers what
// the core returns (package stage), resolving stage.ToQueue to queue and
// stage.ToListener(id) to the Target of listener id's Subscribe:
//   - *fifo.Batch: applies the deltas, sends the resulting *Notifications,
//     one shared value, to every subscriber, then *fifo.Processed to the
//     queue (whoever sent the batch). Should applying it panic (a bug of
//     ours), the restart sends what Core.Recover returns (the
//     notifications of the part applied), and the new actor's Started
//     applies the rest and sends its notifications, then the Processed.
//   - *Drained: a listener's answer to a *DrainMarker (see Core.Drained),
//     sent or answered.
//   - *Subscribe, *Unsubscribe: (un)registers a listener; a Subscribe with
//     Initial first gets the cached objects as an initial batch.
//   - *AddIndexers: adds indexers, answering on Reply.
//   - *fifo.Listed: (re)starts the resync checks (Core.Listed), as
//     client-go's reflector does after storing a list.
//   - *ResyncTick: when a listener's resync is due, sends *fifo.Resync to the
//     queue. The core's check timer sends these, one check period after the
//     previous check; it is stopped with the actor.
//
// When it starts it seals the store (external writes now fail with
// ErrReadOnly) and routes Store.AddIndexers through itself.
func Props(core *Core, queue *actor.PID) *actor.Props {
	pids := &directory{queue: queue, listeners: map[ListenerID]*actor.PID{}}
	return actor.PropsFromProducer(func() actor.Actor { return &indexerActor{core: core, pids: pids} })
}

// directory holds the mailboxes the shell was given: it outlives the actor
// value, which a restart replaces.
type directory struct {
	queue     *actor.PID
	listeners map[ListenerID]*actor.PID
}

// indexerActor is the thin protoactor shell around a Core.
type indexerActor struct {
	core    *Core
	pids    *directory
	stopped chan struct{}
}

func (a *indexerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *fifo.Batch:
		latency := a.core.t.ProcessingLatency
		var start time.Time
		if latency != nil {
			start = time.Now()
		}
		msgs := a.core.ApplyBatch(m)
		a.deliver(ctx, msgs)
		if latency != nil {
			latency.Observe(time.Since(start).Seconds())
		}
	case *Subscribe:
		a.pids.listeners[m.ID] = m.Target
		a.deliver(ctx, a.core.Subscribe(m))
	case *Unsubscribe:
		a.deliver(ctx, a.core.Unsubscribe(m.ID))
		delete(a.pids.listeners, m.ID)
	case *Drained:
		a.deliver(ctx, a.core.Drained(m.ID))
	case *AddIndexers:
		a.deliver(ctx, a.core.AddIndexers(m))
	case *fifo.Listed:
		a.deliver(ctx, a.core.Listed())
	case *ResyncTick:
		a.deliver(ctx, a.core.ResyncTick(m))
	case *actor.Started:
		a.stopped = make(chan struct{})
		sys, self := ctx.ActorSystem(), ctx.Self()
		a.core.Seal(addIndexersHook(sys, self, a.stopped))
		// After a restart: the checks go on.
		a.deliver(ctx, a.core.Started(func(gen uint64) { sys.Root.Send(self, &ResyncTick{Gen: gen}) }))
	case *actor.Restarting:
		// Receive panicked (a bug of ours: user index functions are
		// recovered in the store). If it was applying a batch, the queue
		// waits for its acknowledgement and would stall: the core sends
		// the notifications of the part applied and acknowledges it (see
		// Core.Recover).
		a.deliver(ctx, a.core.Recover())
		a.stop()
	case *actor.Stopping, *actor.Stopped:
		a.stop()
	}
}

// deliver sends what the core returned, in order.
func (a *indexerActor) deliver(ctx actor.Context, msgs []stage.Msg) {
	for _, m := range msgs {
		var to *actor.PID
		switch m.To.Kind {
		case stage.Queue:
			to = a.pids.queue
		case stage.Listener:
			to = a.pids.listeners[ListenerID(m.To.ID)]
		}
		if to == nil {
			a.core.t.Logger.Error("indexer: no mailbox for a message's recipient; dropped",
				"informer", a.core.t.Info.Name, "to", m.To.Kind.String(), "id", m.To.ID, "type", fmt.Sprintf("%T", m.Body))
			continue
		}
		if m.Mode == stage.Request {
			ctx.Request(to, m.Body)
		} else {
			ctx.Send(to, m.Body)
		}
	}
	clear(msgs) // see stage.Msg
}

func (a *indexerActor) stop() {
	a.core.Stopped()
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
