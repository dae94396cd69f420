package fifo

import (
	"github.com/actorinformer/actorinformer/stage"
)

// Input is what the queue takes, in Step: *Deltas, *Replace, *Resync,
// *Processed, and its actor's Lifecycle. It is sealed: no other package's
// type is one, so that sending the queue anything else does not compile
// where the sender is typed.
type Input interface{ queueInput() }

// Lifecycle tells the queue of an event of its actor's life (see
// stage.Lifecycle).
type Lifecycle stage.Lifecycle

func (*Deltas) queueInput()    {}
func (*Replace) queueInput()   {}
func (*Resync) queueInput()    {}
func (*Processed) queueInput() {}
func (Lifecycle) queueInput()  {}

// Step is the queue's one input (see package stage): it takes one Input
// and returns what must be sent because of it, valid until the next Step.
//
//   - *Deltas: queues the watch deltas it carries (see add) and recycles
//     it: the queue owns it (see NewDeltas), so the caller must not touch
//     it after.
//   - *Replace: queues a list or relist (see replace), taking ownership of
//     its Items, and sends the indexer a *Listed before the next batch.
//   - *Resync: queues a Sync delta for every cached key with nothing
//     pending (see resync).
//   - *Processed: acknowledges the in-flight batch (see done), whoever
//     sends it.
//   - Lifecycle(stage.Started): the queue may hold deltas with nothing in
//     flight (its actor restarted after a panic), and no other message may
//     come to move them on. The other events do nothing.
//
// After each, the next *Batch, if deltas are queued and none is in flight,
// goes to stage.ToIndexer, which answers with *Processed. It is a Send,
// not a Request: the indexer's shell answers at the queue's mailbox, which
// it was given, and protoactor allocates an envelope for each Request.
// When HasSynced turns true, a *Synced goes to stage.ToInformer.
func (q *Queue) Step(in Input) []stage.Msg {
	q.out.Reset()
	switch m := in.(type) {
	case *Deltas:
		q.add(m.Items)
		recycle(m)
	case *Replace:
		q.replace(m.Items, m.ResourceVersion, m.ListTrace)
		q.out.Send(stage.ToIndexer, listed)
	case *Resync:
		q.resync()
	case *Processed:
		q.done(m.Count)
	case Lifecycle:
		if stage.Lifecycle(m) != stage.Started {
			return nil
		}
	}
	if b := q.pop(); b != nil {
		q.out.Send(stage.ToIndexer, b)
	}
	return q.out.Msgs()
}

// listed is the one Listed value sent.
var listed = &Listed{}

// syncedMsg is the one Synced value sent.
var syncedMsg = &Synced{}
