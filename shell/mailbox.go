package shell

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is protoactor's default mailbox (actor/mailbox.go: system
// messages first, suspend/resume, Throughput messages per pass, a panic
// escalated to the supervisor, each pass run by the dispatcher: on a new
// goroutine, or with Config.RunOnSender on the goroutine that woke it) made
// cheaper for a stage's stream of small messages: the function a
// wake-up schedules is made once, not per wake-up (the default allocates a
// method value each time the mailbox goes from idle to running, about once
// per watch event across an informer's stages), and both queues sit behind
// one mutex with atomic counts.
//
// It takes no middlewares and does not unpack actor.MessageBatch: a stage
// gets neither.
type mailbox struct {
	mu        sync.Mutex
	user, sys ring

	status    atomic.Int32 // idle or running
	userCount atomic.Int32
	sysCount  atomic.Int32
	suspended atomic.Bool

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	process    func()

	// handOver is set when the dispatcher runs passes on the goroutine
	// that wakes the mailbox (Config.RunOnSender): a pass that has taken
	// Throughput messages then goes on on a new goroutine, rather than
	// yielding, so that no sender is held longer by a busy actor.
	handOver bool
	// growStack is set for Config.GrowStack: each pass begins with
	// growStack.
	growStack bool
	// direct is Config.Direct, told of the mailbox once it can run passes.
	direct *Direct
}

const (
	idle int32 = iota
	running
)

// newHandOverMailbox is the mailbox of an actor with Config.RunOnSender.
func newHandOverMailbox() actor.Mailbox { return &mailbox{handOver: true} }

// Direct lets a goroutine of an actor's own Env post to the actor's
// mailbox and, when the actor is idle, run the pass itself rather than
// wake a new goroutine for it (Config.Direct): the reflector's watch
// reader, while its events come slowly. The pass it
// runs takes user messages only: a system message (a stop, a restart,
// a failure's suspension), or more than a pass's throughput of
// messages, hands the rest of the pass to a new goroutine at once, so
// that an Env's Stop, which may wait for that very goroutine, never runs
// on it. One actor per Direct.
type Direct struct {
	mb atomic.Pointer[mailbox]
}

// Post posts msg to the actor's mailbox; if the actor is idle and run is
// true, it runs the pass on the calling goroutine, as far as the rules
// above let it. It reports false, posting nothing, before the actor has
// started: send msg as usual then.
func (d *Direct) Post(msg any, run bool) bool {
	m := d.mb.Load()
	if m == nil {
		return false
	}
	m.pushUser(msg)
	if !run {
		m.schedule()
	} else if m.status.CompareAndSwap(idle, running) {
		m.pass(true)
	}
	return true
}

func (m *mailbox) PostUserMessage(msg any) {
	m.pushUser(msg)
	m.schedule()
}

func (m *mailbox) pushUser(msg any) {
	m.mu.Lock()
	m.user.push(msg)
	m.mu.Unlock()
	m.userCount.Add(1)
}

func (m *mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys.push(msg)
	m.mu.Unlock()
	m.sysCount.Add(1)
	m.schedule()
}

func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
	m.process = m.processMessages
	if m.direct != nil {
		m.direct.mb.Store(m)
	}
}

func (m *mailbox) Start() {}

func (m *mailbox) UserMessageCount() int { return int(m.userCount.Load()) }

func (m *mailbox) schedule() {
	if m.status.CompareAndSwap(idle, running) {
		m.dispatcher.Schedule(m.process)
	}
}

// pending reports whether there is something this pass may process.
func (m *mailbox) pending() bool {
	return m.sysCount.Load() > 0 || (!m.suspended.Load() && m.userCount.Load() > 0)
}

func (m *mailbox) processMessages() {
	if m.growStack {
		growStack(0)
	}
	m.pass(false)
}

// pass runs passes (run) until no message is left, or one goes on on
// another goroutine; direct: a Direct's, on its caller.
func (m *mailbox) pass(direct bool) {
	for !m.run(direct) {
		m.status.Store(idle)
		// A message posted after run's last look: run again, unless a
		// sender's schedule already started another pass.
		if !m.pending() || !m.status.CompareAndSwap(idle, running) {
			return
		}
	}
}

// pop takes the first message of q (the system or the user queue), whose
// length is n; nil when it is empty.
func (m *mailbox) pop(q *ring, n *atomic.Int32) any {
	if n.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	msg := q.pop()
	m.mu.Unlock()
	n.Add(-1)
	return msg
}

// run processes messages until none is left or the mailbox is suspended;
// true when it handed the rest of the pass to a new goroutine (handOver,
// or direct: a Direct's pass, which also hands over a system message),
// which then owns the running status.
func (m *mailbox) run(direct bool) (handedOver bool) {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	i, t := 0, m.dispatcher.Throughput()
	for {
		// One look at the system queue per message: a Direct's pass that
		// sees a system message hands over, so only a dispatcher's pass
		// takes one. One posted after the look waits for the next.
		sys := m.sysCount.Load() > 0
		if i > t || direct && sys {
			i = 0
			if m.handOver || direct {
				go m.process()
				return true
			}
			runtime.Gosched()
		}
		i++
		if sys {
			msg = m.pop(&m.sys, &m.sysCount)
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return false
		}
		if msg = m.pop(&m.user, &m.userCount); msg == nil {
			return false
		}
		m.invoker.InvokeUserMessage(msg)
	}
}

// passStack is the stack a Config.GrowStack actor's pass grows to as it
// begins. The reflector's pass, with the queue's and the indexer's nested
// in it, outgrows 4 KiB and fits in 8 KiB: in CPU profiles of the control
// scenario (bench), passes begun with a 4 KiB stack still grew it as the
// indexer's pass began, those begun with 8 KiB did not, nor did they in
// the tracing benchmark with every delta sampled.
const passStack = 8 << 10

// growStack makes the runtime grow the calling goroutine's stack to
// passStack now, while the goroutine holds a frame or two, so that the
// copy is short: its frame (5/8 of passStack, zeroed) does not fit in a
// stack of half passStack, and the runtime grows a stack to the first
// power of two that fits the frame. It returns a byte of the frame
// (always 0 for i = 0) only so that the compiler keeps the frame.
//
//go:noinline
func growStack(i int) byte {
	var frame [passStack * 5 / 8]byte
	frame[i] = 1
	return frame[i+1]
}

// ring is a growable FIFO of messages.
type ring struct {
	buf        []any
	head, size int
}

func (r *ring) push(v any) {
	if r.size == len(r.buf) {
		n := max(2*len(r.buf), 16)
		buf := make([]any, n)
		k := copy(buf, r.buf[r.head:])
		copy(buf[k:], r.buf[:r.head])
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring) pop() any {
	v := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}
