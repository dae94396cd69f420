package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/reflector"
)

// supervisor is the informer's top actor: it spawns the stages as its
// children (so its supervision strategy applies to them and poisoning it
// stops them all) and adds and removes listeners.
type supervisor struct {
	inf     *SharedIndexInformer
	ctx     context.Context
	queue   *fifo.Queue
	refl    *reflector.Reflector
	initial []*registration
	// resyncCheck is the informer's resync check period, fixed by Run.
	resyncCheck time.Duration

	indexerPID, queuePID, reflectorPID *actor.PID
	listeners                          map[indexer.ListenerID]*actor.PID

	// stopDetector stops the cache mutation detector's goroutine and waits
	// for it; nil when there is none.
	stopDetector func()
}

// addListener spawns a listener for reg and subscribes it to the indexer.
type addListener struct {
	reg     *registration
	initial bool
}

// removeListener unsubscribes a listener and stops it once its mailbox is
// drained.
type removeListener struct {
	id indexer.ListenerID
}

func supervisorProps(s *supervisor) *actor.Props {
	// A stage whose Receive panics (a bug of ours, never a user handler's:
	// listeners recover those) is restarted over the same state.
	strategy := actor.NewOneForOneStrategy(10, 10*time.Second, actor.DefaultDecider)
	return actor.PropsFromProducer(func() actor.Actor { return s }, actor.WithSupervisor(strategy))
}

func (s *supervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.start(ctx)
	case *actor.Stopped:
		if s.stopDetector != nil {
			s.stopDetector()
			s.stopDetector = nil
		}
	case *addListener:
		s.add(ctx, m.reg, m.initial)
	case *removeListener:
		if pid, ok := s.listeners[m.id]; ok {
			delete(s.listeners, m.id)
			ctx.Send(s.indexerPID, &indexer.Unsubscribe{ID: m.id})
			ctx.Poison(pid)
		}
	}
}

func (s *supervisor) start(ctx actor.Context) {
	inf := s.inf
	if s.stopDetector != nil { // a restart
		s.stopDetector()
		s.stopDetector = nil
	}
	cfg := indexer.Config{Telemetry: inf.tel, ResyncCheckPeriod: s.resyncCheck}
	if d := newMutationDetector(inf.opts, inf.example); d != nil {
		cfg.MutationDetector = d
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			d.Run(stop)
		}()
		s.stopDetector = func() { close(stop); <-done }
	}
	core := indexer.NewCore(inf.writer, cfg)
	// The indexer is given the queue's mailbox and the queue the indexer's:
	// the queue's name is chosen first so that its PID is known before
	// either is spawned.
	sys := ctx.ActorSystem()
	queueName := "queue" + sys.ProcessRegistry.NextID()
	queuePID := actor.NewPID(sys.Address(), ctx.Self().Id+"/"+queueName)
	s.indexerPID = ctx.Spawn(indexer.Props(core, queuePID))
	pid, err := ctx.SpawnNamed(fifo.Props(s.queue, s.indexerPID, func(any) { inf.signals.Poke() }), queueName)
	if err != nil || !pid.Equal(queuePID) {
		panic(fmt.Sprintf("actors: spawning the delta queue as %s: got %v, %v", queuePID, pid, err))
	}
	s.queuePID = pid
	// Handlers added before Run subscribe before the reflector exists, so
	// they see everything from the first list on.
	for _, reg := range s.initial {
		s.add(ctx, reg, false)
	}
	s.initial = nil
	s.reflectorPID = ctx.Spawn(s.refl.Props(s.queuePID))
}

func (s *supervisor) add(ctx actor.Context, reg *registration, initial bool) {
	if reg.l.removed.Load() {
		reg.l.exit() // never spawned
		return
	}
	l := reg.l
	pid := ctx.Spawn(listener.Props(l.newCore(), s.indexerPID, l.newHandler(s.ctx)))
	s.listeners[l.id] = pid
	ctx.Send(s.indexerPID, &indexer.Subscribe{
		ID:           l.id,
		Target:       pid,
		ResyncPeriod: l.resync,
		Added:        l.added,
		Initial:      initial,
		Sent:         &l.sent,
		Delivered:    &l.counters.Delivered,
	})
}
