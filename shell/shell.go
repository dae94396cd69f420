// Package shell runs a stage's core as a protoactor actor. Every stage's
// actor is this one shell, configured for the core's input type In: its
// Receive makes each message an In, with the one type assertion at the
// actor's boundary, hands it to the core's Step (the actor's lifecycle as
// the In that Config.Lifecycle makes of stage.Started, Restarting and
// Stopping) and delivers what Step returned, in order, in one loop:
//
//   - to a stage (stage.ToQueue, ToIndexer, ToListener(id), …): a Send or
//     a Request to the mailbox its Peers give for that address, never to
//     the sender of a message, so that a restarted stage still knows its
//     peers;
//   - to one of the stage's timers (stage.TimerOf): the shell sets or stops
//     a timer on its clock, which delivers the SetTimer's Fire message to
//     the actor itself;
//   - to another effect (stage.ToHandler, ToSource, ToInformer): the Env
//     performs it at once, before the next message.
//
// A message the actor receives that is not an In, and a message the shell
// cannot deliver (no mailbox for that stage, or no Env for that effect),
// are bugs of ours. The one policy for them, in every stage: logged at
// error level, with the stage, the message's type (and the address it was
// for), counted as a drop (reason "unexpected" or "undeliverable") and
// dropped; the actor goes on with the next message. protoactor's own
// messages are not the core's: its system messages, and the
// DeadLetterResponse that answers a Request whose recipient had stopped
// (the stages stop together; a listener's removal is the indexer's
// Unsubscribe), are left to protoactor.
//
// The core and the Peers live outside the actor value: the actor a
// restart makes (after a panic of Receive, a bug of ours) carries on over
// the same core and peers. Its timers and its Env are the actor's own: a
// restart stops the timers (the core, told Restarting, drops their ticks
// as stale) and asks the Config for a new Env.
package shell

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// Core is what a shell runs: a stage's plain core (see package stage),
// whose Step takes its input type In.
type Core[In any] interface {
	Step(in In) []stage.Msg
}

// Env performs the effects of one actor incarnation (what the core sends
// to stage.ToHandler, ToSource or ToInformer), on the actor's goroutine.
type Env interface {
	// Perform performs m; false when m is not one it performs (then it
	// is undeliverable).
	Perform(ctx actor.Context, m stage.Msg) bool
}

// Stopper is an Env that holds I/O of its own (goroutines, calls in
// flight): Stop, called when the actor restarts or stops, after the core
// was told, releases it.
type Stopper interface {
	Stop()
}

// Exiter is an Env told when its actor has stopped (protoactor's Stopped:
// after its children).
type Exiter interface {
	Exited()
}

// Config configures a shell for a core whose input type is In (in
// practice a sealed interface of the core's package, such as fifo.Input).
type Config[In any] struct {
	// Stage is the stage the actor runs: it names it in logs and owns its
	// timers. A core defined above package stage runs as one of the kinds
	// reserved for it (stage.Ext and up).
	Stage stage.Kind
	// Core is the stage's core.
	Core Core[In]
	// Lifecycle makes the core's input for an event of the actor's life;
	// nil: the core is not told of them.
	Lifecycle func(stage.Lifecycle) In
	// Peers resolves the stages the core sends to. Nil: none.
	Peers *Peers
	// Env, when set, makes the Env of each incarnation of the actor, when
	// it starts (also after a restart), before the core is told Started.
	Env func(ctx actor.Context) Env
	// Route, when set, is called with each input before the core takes
	// it: the indexer's shell learns a listener's mailbox from its
	// Subscribe there.
	Route func(in In)
	// Clock runs the stage's timers; nil means clock.RealClock{}.
	Clock clock.WithDelayedExecution
	// Telemetry logs and counts the messages the shell drops (unexpected,
	// undeliverable); nil: telemetry.Nop().
	Telemetry *telemetry.T
	// RunOnSender runs the actor's passes on the goroutine that wakes it
	// (the one that posts a message to its idle mailbox: another stage's
	// pass, a timer, a caller), through protoactor's synchronized
	// dispatcher, rather than on a new goroutine for each pass. The
	// actor's messages are still taken one at a time, in order: a message
	// posted while a pass runs, wherever it runs, joins that pass. Only
	// for a stage whose every step is short and never blocks: the sender
	// waits for the pass before it goes on, for up to throughput messages
	// (the rest of a longer pass goes on on a new goroutine). Its timers'
	// messages are sent from goroutines of their own. The delta
	// queue and the indexer run so (see docs/performance.md): a batch goes
	// from the reflector through both to the listeners with no goroutine
	// woken in between.
	RunOnSender bool
	// GrowStack makes each of the actor's passes begin by growing its
	// goroutine's stack to 8 KiB, for a stage whose passes run
	// RunOnSender stages' passes nested in them: the reflector's, in
	// which the queue's and the indexer's run. A pass runs on a new
	// goroutine, whose stack starts small; without this it grows in the
	// middle of the nesting, and the runtime then copies and adjusts the
	// frames of all three actors. At 10,000 events/s, one pass per event,
	// that copy cost each fast handler of the slow-handler scenario 3 to
	// 6 µs of its median latency (docs/performance.md). Grown as the pass
	// begins, the stack has a frame or two to move.
	GrowStack bool
	// Direct, when set, is told of the actor's mailbox as the actor is
	// spawned: its Post is how a goroutine of the actor's Env hands it a
	// message and, the actor being idle, runs the pass itself.
	Direct *Direct
}

// throughput is how many messages a pass takes before it yields
// (runtime.Gosched), as protoactor's default dispatcher.
const throughput = 300

// onSender is the dispatcher of the actors with Config.RunOnSender.
var onSender = actor.NewSynchronizedDispatcher(throughput)

// Props returns the props of the actor running cfg.Core.
func Props[In any](cfg Config[In]) *actor.Props {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Telemetry == nil {
		cfg.Telemetry = telemetry.Nop()
	}
	if cfg.Peers == nil {
		cfg.Peers = &Peers{}
	}
	c := &cfg
	opts := []actor.PropsOption{actor.WithMailbox(func() actor.Mailbox {
		return &mailbox{growStack: cfg.GrowStack, direct: cfg.Direct}
	})}
	if cfg.RunOnSender {
		// Its passes run on their senders' stacks: GrowStack is theirs.
		opts = []actor.PropsOption{actor.WithMailbox(newHandOverMailbox), actor.WithDispatcher(onSender)}
	}
	return actor.PropsFromProducer(func() actor.Actor { return &shell[In]{cfg: c} }, opts...)
}

// shell is one incarnation of a stage's actor.
type shell[In any] struct {
	cfg    *Config[In]
	env    Env
	root   *actor.RootContext
	self   *actor.PID
	timers map[stage.Addr]clock.Timer
}

// Receive implements actor.Actor.
func (s *shell[In]) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.root, s.self = ctx.ActorSystem().Root, ctx.Self()
		if s.cfg.Env != nil {
			s.env = s.cfg.Env(ctx)
		}
		s.life(ctx, stage.Started)
	case *actor.Restarting:
		s.life(ctx, stage.Restarting)
		s.stop()
	case *actor.Stopping:
		s.life(ctx, stage.Stopping)
		s.stop()
	case *actor.Stopped:
		if e, ok := s.env.(Exiter); ok {
			e.Exited()
		}
	case actor.AutoReceiveMessage, actor.SystemMessage, *actor.ReceiveTimeout, *actor.DeadLetterResponse:
		// protoactor's own (PoisonPill, Terminated, …): nothing for the core.
	case In:
		if s.cfg.Route != nil {
			s.cfg.Route(msg)
		}
		s.step(ctx, msg)
	default:
		s.unexpected(msg)
	}
}

// life tells the core of an event of the actor's life, if it asked to be.
func (s *shell[In]) life(ctx actor.Context, l stage.Lifecycle) {
	if s.cfg.Lifecycle != nil {
		s.step(ctx, s.cfg.Lifecycle(l))
	}
}

// step hands in to the core and delivers what it returns.
func (s *shell[In]) step(ctx actor.Context, in In) {
	msgs := s.cfg.Core.Step(in)
	for i := range msgs {
		s.deliver(ctx, &msgs[i])
	}
	clear(msgs) // see package stage
}

// deliver delivers one message: the one delivery loop of every stage.
func (s *shell[In]) deliver(ctx actor.Context, m *stage.Msg) {
	switch k := m.To.Kind; {
	case k == stage.Timer:
		if s.timer(m) {
			return
		}
	case k.IsEffect():
		if s.env != nil && s.env.Perform(ctx, *m) {
			return
		}
	default:
		if pid := s.cfg.Peers.Get(m.To); pid != nil {
			if m.Mode == stage.Request {
				ctx.Request(pid, m.Body)
			} else {
				ctx.Send(pid, m.Body)
			}
			return
		}
	}
	s.undeliverable(m)
}

// undeliverable applies the policy for a message with nowhere to go.
func (s *shell[In]) undeliverable(m *stage.Msg) {
	t := s.cfg.Telemetry
	t.Metrics.Drop(DropUndeliverable)
	t.Logger.Error("undeliverable message dropped (a bug of ours)", "informer", t.Info.Name,
		"stage", s.cfg.Stage.String(), "to", m.To.Kind.String(), "id", m.To.ID, "type", fmt.Sprintf("%T", m.Body))
}

// unexpected applies the policy for a message that is not the core's
// input.
func (s *shell[In]) unexpected(msg any) {
	t := s.cfg.Telemetry
	t.Metrics.Drop(DropUnexpected)
	t.Logger.Error("unexpected message dropped: not an input of the stage (a bug of ours)", "informer", t.Info.Name,
		"stage", s.cfg.Stage.String(), "type", fmt.Sprintf("%T", msg))
}

// The drop reasons of the shell's policy: a message with nowhere to go, a
// message that is not the core's input.
const (
	DropUndeliverable = "undeliverable"
	DropUnexpected    = "unexpected"
)

// timer sets or stops one of the stage's timers; false if m is neither
// or not the stage's.
func (s *shell[In]) timer(m *stage.Msg) bool {
	if m.To.Owner() != s.cfg.Stage {
		return false
	}
	switch b := m.Body.(type) {
	case *stage.SetTimer:
		s.stopTimer(m.To)
		if s.timers == nil {
			s.timers = map[stage.Addr]clock.Timer{}
		}
		root, self, fire := s.root, s.self, b.Fire
		send := func() { root.Send(self, fire) }
		if s.cfg.RunOnSender {
			// Not inside the clock's callback, where the pass would run: a
			// fake clock holds its lock there, and a core reads the clock.
			send = func() { go root.Send(self, fire) }
		}
		s.timers[m.To] = s.cfg.Clock.AfterFunc(b.After, send)
	case *stage.StopTimer:
		s.stopTimer(m.To)
	default:
		return false
	}
	return true
}

func (s *shell[In]) stopTimer(a stage.Addr) {
	if t := s.timers[a]; t != nil {
		t.Stop()
		delete(s.timers, a)
	}
}

// stop releases what the incarnation holds: its timers and its Env's I/O.
func (s *shell[In]) stop() {
	for a := range s.timers {
		s.stopTimer(a)
	}
	if st, ok := s.env.(Stopper); ok {
		st.Stop()
	}
}

// Peers maps the stages a core sends to, by address, to their mailboxes.
// It is not safe for concurrent use: fill it before the actor is spawned,
// or from the actor's own goroutine (Config.Route).
type Peers struct {
	stages    [stage.Listener + 1]*actor.PID // by Kind, listeners aside
	listeners map[uint64]*actor.PID
}

// Set makes pid the mailbox of stage address a (nil removes it).
func (p *Peers) Set(a stage.Addr, pid *actor.PID) {
	switch {
	case a.Kind == stage.Listener:
		if pid == nil {
			delete(p.listeners, a.ID)
			return
		}
		if p.listeners == nil {
			p.listeners = map[uint64]*actor.PID{}
		}
		p.listeners[a.ID] = pid
	case a.Kind.IsStage() && a.ID == 0:
		p.stages[a.Kind] = pid
	default:
		panic(fmt.Sprintf("shell: %v is not a stage's address", a))
	}
}

// Get returns the mailbox of stage address a, nil when it has none.
func (p *Peers) Get(a stage.Addr) *actor.PID {
	switch {
	case a.Kind == stage.Listener:
		return p.listeners[a.ID]
	case a.Kind.IsStage() && a.ID == 0:
		return p.stages[a.Kind]
	}
	return nil
}

// Reports returns a Config.Env whose Env performs what the core sends to
// stage.ToInformer by calling report with its body (nil report: drops
// it).
func Reports(report func(body any)) func(actor.Context) Env {
	return func(actor.Context) Env { return reports(report) }
}

type reports func(body any)

func (r reports) Perform(_ actor.Context, m stage.Msg) bool {
	if m.To != stage.ToInformer {
		return false
	}
	if r != nil {
		r(m.Body)
	}
	return true
}
