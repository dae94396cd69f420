package fifo

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorinformer/actorinformer/stage"
)

// queueActor is the thin actor shell around a Queue: it decodes a message,
// calls the Queue's input method and delivers what it returns.
type queueActor struct {
	q        *Queue
	consumer *actor.PID
}

// NewActor returns the queue actor: it feeds *Deltas, *Replace, *Resync and
// *Processed (from any sender) to q's input methods and delivers the
// messages they return, in order, to consumer (stage.ToIndexer): the next
// *Batch, if any and if none is in flight, with ctx.Request, so the consumer
// answers with ctx.Respond(&Processed{Count: len(batch.Deltas)}) or sends a
// *Processed; after each *Replace, a *Listed (with Request, so that it
// learns the queue) before the batch.
//
// The actor owns q: nothing else may call q's methods except HasSynced and
// Len. Because the state lives in q, a restarted actor (a new value from the
// same producer) carries on where the old one stopped: on Started it sends
// what q holds if no batch is in flight.
func NewActor(q *Queue, consumer *actor.PID) actor.Actor {
	return &queueActor{q: q, consumer: consumer}
}

// Props returns props spawning NewActor(q, consumer).
func Props(q *Queue, consumer *actor.PID) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return NewActor(q, consumer) })
}

// Receive implements actor.Actor. Nothing in it blocks.
func (a *queueActor) Receive(ctx actor.Context) {
	var out []stage.Msg
	switch m := ctx.Message().(type) {
	case *Deltas:
		out = a.q.Deltas(m)
	case *Replace:
		out = a.q.Replace(m)
	case *Resync:
		out = a.q.Resync()
	case *Processed:
		out = a.q.Processed(m)
	case *actor.Started:
		// Also sent to an actor restarted after a panic.
		out = a.q.Started()
	case *actor.Stopping, *actor.Stopped, *actor.Restarting,
		*actor.ReceiveTimeout, *actor.Terminated:
	default:
		a.q.t.Logger.Warn("fifo: unexpected message", "type", fmt.Sprintf("%T", m))
	}
	for _, msg := range out {
		a.deliver(ctx, msg)
	}
	clear(out) // see stage.Msg
}

// deliver sends one of the queue's messages; it only ever addresses the
// indexer.
func (a *queueActor) deliver(ctx actor.Context, msg stage.Msg) {
	if msg.To != stage.ToIndexer {
		a.q.t.Logger.Error("fifo: undeliverable message", "to", msg.To.Kind, "type", fmt.Sprintf("%T", msg.Body))
		return
	}
	if msg.Mode == stage.Request {
		ctx.Request(a.consumer, msg.Body)
	} else {
		ctx.Send(a.consumer, msg.Body)
	}
}
