package fifo

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// listed is the one Listed value sent.
var listed = &Listed{}

// queueActor is the thin actor shell around a Queue.
type queueActor struct {
	q        *Queue
	consumer *actor.PID
}

// NewActor returns the queue actor: it feeds *Deltas, *Replace, *Resync and
// *Processed to q (recycling each *Deltas: see NewDeltas) and, after each,
// sends the next batch (if any and if none is in flight) to consumer with
// ctx.Request, so the consumer answers with
// ctx.Respond(&Processed{Count: len(batch.Deltas)}). After each *Replace it
// also sends the consumer a *Listed (with Request, so that it learns the
// queue), before the batch.
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
	switch m := ctx.Message().(type) {
	case *Deltas:
		a.q.Add(m.Items)
		recycle(m) // the queue owns m and has copied its items
	case *Replace:
		a.q.Replace(m.Items, m.ResourceVersion, m.ListTrace)
		ctx.Request(a.consumer, listed)
	case *Resync:
		a.q.Resync()
	case *Processed:
		a.q.Done(m.Count)
	case *actor.Started:
		// Also sent to an actor restarted after a panic: the queue may hold
		// deltas with nothing in flight, and no message may come to move
		// them on.
	case *actor.Stopping, *actor.Stopped, *actor.Restarting,
		*actor.ReceiveTimeout, *actor.Terminated:
		return
	default:
		a.q.t.Logger.Warn("fifo: unexpected message", "type", fmt.Sprintf("%T", m))
		return
	}
	if b := a.q.Pop(); b != nil {
		ctx.Request(a.consumer, b)
	}
}
