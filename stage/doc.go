// Package stage is the contract between each pipeline stage's plain core and
// its actor shell.
//
// A core (fifo.Queue, the indexer's Core, the reflector's Machine, a
// listener's Core) is a plain struct that imports no actor library and
// does no I/O. It has one input, Step, whose parameter is the core's
// input type: a sealed interface of its package (fifo.Input, …) that
// exactly the messages it takes implement, its Lifecycle among them. Step
// returns the messages that must be sent because of the input, as a
// []Msg: whom to (an Addr), how (Send, or Request when the recipient must
// be able to answer the sender) and what. Its decoding switch lives in
// Step, in its own package; the shell (package shell), with the one type
// assertion at the actor's boundary, and the simulator (internal/sim)
// both call Step and deliver what it returned, in order.
//
// An Addr names either a stage (ToReflector, ToQueue, ToIndexer,
// ToListener(id)), whose mailbox the shell resolves, or an effect that the
// sending stage's shell performs at once, before the next message is
// delivered (in the simulator, a scripted environment): a handler's calls
// (ToHandler), the stage's timers (TimerOf), the reflector's calls to the
// API server (ToSource), and what the stage reports to the informer that
// runs it (ToInformer: status, errors). A core learns of its actor's
// lifecycle (Started, Restarting, Stopping: a Lifecycle) as an input of
// its own type (fifo.Lifecycle, …), which the shell makes.
//
// Package stage knows only the pipeline. A package above it whose core
// runs in a shell names its own
// effects with the kinds reserved for it, from Ext up, and gives them to
// its shell's Env; IsEffect is true for all of them.
//
// Stages talk only through messages, with these exceptions, where memory
// shared is written by one stage and only read by the others
// (docs/architecture.md, "The exceptions", gives each one's reason and
// measured cost in full):
//
//   - The delta queue reads the cache (fifo.KnownObjects, the indexer's
//     Store, its read handle) for a Replace, a Resync and a delete of a key
//     with nothing queued, as client-go's FIFO reads its knownObjects: by
//     message it would wait behind the batch the indexer applies, for the
//     same keys (4.6-33 ms for 100,000, once per relist).
//   - The indexer reads a listener's count of what it has done
//     (listener.Counters.Delivered) against its own indexer.Sent, to tell
//     how far behind the listener is before it sends each batch: one
//     atomic load, where a progress message would cost one more message
//     per batch per listener (90-210 ns each).
//   - A listener reads the indexer's Sent.Initial, to tell the informer
//     only when no initial-list notification is pending: one atomic load
//     per 256 of them, against up to 400 re-checks of the informer's sync
//     signals per handler for a list of 100,000.
//   - The informer reads the stages' progress (the queue's HasSynced and
//     Len, the listeners' counters and whether they are subscribed, the
//     reflector's Status) and its users
//     the cache, from any goroutine, as cache.SharedIndexInformer promises:
//     atomics and the cache's read lock, nothing per event.
//   - Message bodies change hands without a copy: pooled ones go back to
//     their pool, a Batch is lent to the indexer until Processed, one
//     Notifications is read by every listener, a listener.Calls is a view
//     of it (a Coalesced handler's runner marks the Calls it takes, which
//     the listener's core reads after a restart), and a delta's trace
//     state travels with it: no copy or allocation per event.
//   - Cores record their own telemetry (spans at the stage's decision
//     points, metric counters, logs of faults): with the default no-op
//     providers the pipeline runs at 1.000x its speed with tracing compiled
//     out, where a span as an effect would cost a message body per traced
//     delta per stage.
//   - The cache mutation detector (off by default) gets every object the
//     indexer writes, for its goroutine to compare with a copy, as
//     client-go's does: one nil check per delta when off.
//
// The returned slice belongs to the core: it is valid until the core's next
// Step (cores reuse one Outbox, so the per-event path does not allocate for
// it). A shell clears it (clear(msgs)) once it has delivered the messages,
// so that the outbox does not keep their bodies alive until the next input:
// a quiet reflector would otherwise hold its last list.
package stage
