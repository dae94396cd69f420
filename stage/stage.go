// Package stage is the contract between each pipeline stage's plain core and
// its actor shell.
//
// A core (fifo.Queue, the indexer's core, the reflector's Machine, a
// listener's core) is a plain struct that imports no actor library. Each of
// its input methods takes one decoded message and returns the messages that
// must be sent because of it, as a []Msg: whom to (an Addr naming a stage,
// and for listeners the listener's identity, never a mailbox), how (Send, or
// Request when the recipient must be able to answer the sender) and what.
// The shell only decodes a message, calls the core, and delivers what it
// returned, in order. A simulator can chain the cores in one goroutine by
// doing the same.
//
// The returned slice belongs to the core: it is valid until the core's next
// input method is called (cores reuse one Outbox, so the per-event path does
// not allocate for it). A shell clears it (clear(msgs)) once it has delivered
// the messages, so that the outbox does not keep their bodies alive until
// the next input: a quiet reflector would otherwise hold its last list.
package stage

// Kind is a pipeline stage.
type Kind uint8

// The stages, in the order a delta travels through them.
const (
	Reflector Kind = iota + 1
	Queue
	Indexer
	Listener
	// Member is another member of a sharded informer's group (package
	// shard): Addr.ID is the member's number in the sending core.
	Member
	// Ranges is a sharded informer member's own range informers, which its
	// shell starts, activates and stops.
	Ranges
)

var kindNames = [...]string{"", "reflector", "fifo", "indexer", "listener", "member", "ranges"}

// String returns the stage's name as used in spans and logs.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Addr names a recipient: a stage and, for a listener, its identity (the
// indexer.ListenerID), for a group member the sending core's number for it;
// ID is 0 for the other stages.
type Addr struct {
	Kind Kind
	ID   uint64
}

// The single-instance stages' addresses.
var (
	ToReflector = Addr{Kind: Reflector}
	ToQueue     = Addr{Kind: Queue}
	ToIndexer   = Addr{Kind: Indexer}
	ToRanges    = Addr{Kind: Ranges}
)

// ToListener returns the address of listener id.
func ToListener(id uint64) Addr { return Addr{Kind: Listener, ID: id} }

// ToMember returns the address of the group member a core numbered id.
func ToMember(id uint64) Addr { return Addr{Kind: Member, ID: id} }

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
