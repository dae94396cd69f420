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
// The returned slice belongs to the core: it is valid until the core's next
// Step (cores reuse one Outbox, so the per-event path does not allocate for
// it). A shell clears it (clear(msgs)) once it has delivered the messages,
// so that the outbox does not keep their bodies alive until the next input:
// a quiet reflector would otherwise hold its last list.
package stage
