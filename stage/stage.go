package stage

import (
	"strconv"
	"time"
)

// Kind is what an address names: a pipeline stage (a mailbox), or an
// effect that the sending stage's shell performs.
type Kind uint8

// The stages, in the order a delta travels through them.
const (
	Reflector Kind = iota + 1
	Queue
	Indexer
	Listener
)

// The effects the pipeline's shells perform.
const (
	// Handler is a listener's handler: a listener sends it the calls to
	// make (ID: the listener's).
	Handler Kind = iota + 16
	// Timer is one of the sending stage's timers (see TimerOf, SetTimer).
	Timer
	// Source is the API server the reflector lists and watches.
	Source
	// Informer is the informer that runs the stages: what they report to
	// it (status, errors).
	Informer
)

// Ext is the first of the kinds reserved for packages above stage
// (Ext to 255): a package whose core runs in a shell defines its own
// effects there, as constants Ext+0, Ext+1, …, with the address helpers
// it needs, and its shell's Env performs them. Such a kind means what the
// shell hosting the core says, so two packages may use the same value as
// long as no one core sends both. Every kind of the block is an effect.
const Ext Kind = 128

// String returns the kind's name as used in spans and logs: "ext+N" for
// kind Ext+N.
func (k Kind) String() string {
	switch k {
	case Reflector:
		return "reflector"
	case Queue:
		return "fifo"
	case Indexer:
		return "indexer"
	case Listener:
		return "listener"
	case Handler:
		return "handler"
	case Timer:
		return "timer"
	case Source:
		return "source"
	case Informer:
		return "informer"
	}
	if k >= Ext {
		return "ext+" + strconv.Itoa(int(k-Ext))
	}
	return "unknown"
}

// IsStage reports whether k names a pipeline stage, whose address a shell
// resolves to a mailbox.
func (k Kind) IsStage() bool {
	switch k {
	case Reflector, Queue, Indexer, Listener:
		return true
	}
	return false
}

// IsEffect reports whether k names an effect, which the sending stage's
// shell performs: the pipeline's own (Handler, Timer, Source, Informer)
// and every kind from Ext up.
func (k Kind) IsEffect() bool {
	switch k {
	case Handler, Timer, Source, Informer:
		return true
	}
	return k >= Ext
}

// Addr names a recipient: a stage or an effect and, for a listener and its
// handler, the listener's identity (the indexer.ListenerID); for a timer,
// its owner and number (see TimerOf); for a kind from Ext up, what the
// package defining it says; ID is 0 for the others.
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
)

// ToListener returns the address of listener id.
func ToListener(id uint64) Addr { return Addr{Kind: Listener, ID: id} }

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

// Lifecycle is an event of a stage actor's life, which its shell tells the
// core. Each core's input type holds it as a type of its own package
// (fifo.Lifecycle, indexer.Lifecycle, …), which the shell makes with its
// Config.Lifecycle.
type Lifecycle uint8

const (
	// Started: the actor started, or started again after a restart (its
	// core kept its state).
	Started Lifecycle = iota + 1
	// Restarting: the actor panicked (a bug of ours) and is about to be
	// replaced by a new one over the same core, which then gets Started.
	// Messages it sends are delivered before the new actor takes any.
	Restarting
	// Stopping: the actor stops for good.
	Stopping
)

func (l Lifecycle) String() string {
	switch l {
	case Started:
		return "started"
	case Restarting:
		return "restarting"
	case Stopping:
		return "stopping"
	}
	return "unknown"
}

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
