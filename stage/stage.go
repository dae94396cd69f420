// Package stage is the contract between each pipeline stage's plain core and
// its actor shell.
//
// A core (fifo.Queue, the indexer's Core, the reflector's Machine, a
// listener's Core) is a plain struct that imports no actor library and
// does no I/O. It has one input, Step: it takes one message and returns
// the messages that must be sent because of it, as a []Msg: whom to (an
// Addr), how (Send, or Request when the recipient must be able to answer
// the sender) and what. Its decoding switch lives in Step, in its own
// package; the shell (package shell) and the simulator (internal/sim) both
// call Step and deliver what it returned, in order.
//
// An Addr names either a stage (ToReflector, ToQueue, ToIndexer,
// ToListener(id)), whose mailbox the shell resolves, or an effect that the
// sending stage's shell performs at once, before the next message is
// delivered (in the simulator, a scripted environment): a handler's calls
// (ToHandler), the stage's timers (TimerOf), the reflector's calls to the
// API server (ToSource), and what the stage reports to the informer that
// runs it (ToInformer: status, errors). A core learns of its actor's
// lifecycle through the Started, Restarting and Stopping messages.
//
// The returned slice belongs to the core: it is valid until the core's next
// Step (cores reuse one Outbox, so the per-event path does not allocate for
// it). A shell clears it (clear(msgs)) once it has delivered the messages,
// so that the outbox does not keep their bodies alive until the next input:
// a quiet reflector would otherwise hold its last list.
package stage

import "time"

// Kind is a pipeline stage.
type Kind uint8

// The stages, in the order a delta travels through them, then the effects
// their shells perform.
const (
	Reflector Kind = iota + 1
	Queue
	Indexer
	Listener

	// Handler is a listener's handler: a listener sends it the calls to
	// make (ID: the listener's).
	Handler
	// Timer is one of the sending stage's timers (see TimerOf, SetTimer).
	Timer
	// Source is the API server the reflector lists and watches.
	Source
	// Informer is the informer that runs the stages: what they report to
	// it (status, errors).
	Informer

	// Member is another member of a sharded informer's group (package
	// shard): Addr.ID is the member's number in the sending core.
	Member
	// Ranges is a sharded informer member's own range informers, which its
	// shell starts, activates and stops.
	Ranges
)

// Ext is the first of the kinds reserved for packages above stage.
const Ext Kind = 128

var kindNames = [...]string{"", "reflector", "fifo", "indexer", "listener", "handler", "timer", "source", "informer", "member", "ranges"}

// String returns the stage's name as used in spans and logs.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return "unknown"
}

// IsEffect reports whether k names an effect (performed by the sending
// stage's shell) rather than a stage (a mailbox).
func (k Kind) IsEffect() bool { return k >= Handler }

// Addr names a recipient: a stage or an effect and, for a listener and its
// handler, the listener's identity (the indexer.ListenerID); for a timer,
// its owner and number (see TimerOf); for a group member, the sending
// core's number for it; ID is 0 for the others.
type Addr struct {
	Kind Kind
	ID   uint64
}

// The single-instance addresses.
var (
	ToReflector = Addr{Kind: Reflector}
	ToQueue     = Addr{Kind: Queue}
	ToIndexer   = Addr{Kind: Indexer}
	ToSource    = Addr{Kind: Source}
	ToInformer  = Addr{Kind: Informer}
	ToRanges    = Addr{Kind: Ranges}
)

// ToListener returns the address of listener id.
func ToListener(id uint64) Addr { return Addr{Kind: Listener, ID: id} }

// ToMember returns the address of the group member a core numbered id.
func ToMember(id uint64) Addr { return Addr{Kind: Member, ID: id} }

// ToHandler returns the address of listener id's handler.
func ToHandler(id uint64) Addr { return Addr{Kind: Handler, ID: id} }

// TimerOf returns the address of timer n of stage owner. Its shell runs one
// clock timer per address: a SetTimer replaces the one set before, and
// when it fires its Fire message is delivered to owner.
func TimerOf(owner Kind, n uint8) Addr { return Addr{Kind: Timer, ID: uint64(owner)<<8 | uint64(n)} }

// Owner returns the stage that owns timer a.
func (a Addr) Owner() Kind { return Kind(a.ID >> 8) }

// SetTimer, sent to a TimerOf address, (re)sets that timer: After from now
// (on the stage's clock), Fire is delivered to the timer's owner.
type SetTimer struct {
	After time.Duration
	Fire  any
}

// StopTimer, sent to a TimerOf address, stops that timer if it is set.
type StopTimer struct{}

// StopTimerMsg is the one StopTimer value cores send.
var StopTimerMsg = &StopTimer{}

// The lifecycle of a stage's actor, told to its core by the shell.
type (
	// Started: the actor started, or started again after a restart (its
	// core kept its state).
	Started struct{}
	// Restarting: the actor panicked (a bug of ours) and is about to be
	// replaced by a new one over the same core, which then gets Started.
	// Messages it sends are delivered before the new actor takes any.
	Restarting struct{}
	// Stopping: the actor stops for good.
	Stopping struct{}
)

// The one value of each lifecycle message.
var (
	StartedMsg    = &Started{}
	RestartingMsg = &Restarting{}
	StoppingMsg   = &Stopping{}
)

// Mode says how a message is delivered.
type Mode uint8

const (
	// Send is one-way: the recipient cannot answer.
	Send Mode = iota
	// Request lets the recipient answer the sender (protoactor's
	// ctx.Request / ctx.Respond).
	Request
)

func (m Mode) String() string {
	if m == Request {
		return "request"
	}
	return "send"
}

// Msg is one message a core asks its shell to deliver.
type Msg struct {
	To   Addr
	Mode Mode
	Body any
}

// Outbox collects the messages of one input. A core keeps one, calls Reset
// at the start of each input method and returns Msgs at its end.
type Outbox struct {
	msgs []Msg
}

// Reset empties the outbox, keeping its storage.
func (o *Outbox) Reset() {
	clear(o.msgs) // let go of the bodies
	o.msgs = o.msgs[:0]
}

// Send queues a one-way message to to.
func (o *Outbox) Send(to Addr, body any) { o.msgs = append(o.msgs, Msg{To: to, Body: body}) }

// Request queues a message to to that the recipient may answer.
func (o *Outbox) Request(to Addr, body any) {
	o.msgs = append(o.msgs, Msg{To: to, Mode: Request, Body: body})
}

// Msgs returns the queued messages; nil when there are none. The slice is
// valid until the next Reset.
func (o *Outbox) Msgs() []Msg {
	if len(o.msgs) == 0 {
		return nil
	}
	return o.msgs
}
