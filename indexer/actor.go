package indexer

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/shell"
	"github.com/actorinformer/actorinformer/stage"
)

// ErrStopped is returned by Store.AddIndexers once the indexer actor that
// owns the store has stopped.
var ErrStopped = errors.New("indexer: indexers were not added because the informer's indexer actor has stopped")

// AddIndexersTimeout bounds how long Store.AddIndexers waits for the indexer
// actor once the store is sealed.
const AddIndexersTimeout = time.Minute

// Props returns the props of the indexer actor: core's shell (package
// shell), which sends to the delta queue at queue and to each listener at
// the Target of its Subscribe (learnt as the Subscribe arrives, forgotten
// with its Unsubscribe). Keep core outside the props: it survives a
// restart of the actor, as do the mailboxes the shell was given.
//
// Its timer is the resync check timer, on core's clock. When it starts it
// seals the store (external writes now fail with ErrReadOnly) and routes
// Store.AddIndexers through itself: it sends the actor an AddIndexers and
// waits for the answer, which the shell puts on the request's Reply (the
// core's *IndexersAdded). See Core.Step for what it takes.
//
// It never blocks (its Env's answers do not wait), so it runs on the
// goroutine that wakes it (shell.Config.RunOnSender): the queue's, which
// runs on the reflector's, so that a batch reaches the listeners with no
// goroutine woken in between.
func Props(core *Core, queue *actor.PID) *actor.Props {
	peers := &shell.Peers{}
	peers.Set(stage.ToQueue, queue)
	return shell.Props(shell.Config[Input]{
		Stage:       stage.Indexer,
		Core:        core,
		RunOnSender: true,
		Lifecycle:   func(l stage.Lifecycle) Input { return Lifecycle(l) },
		Peers:       peers,
		Clock:       core.clock,
		Telemetry:   core.t,
		Route: func(in Input) {
			switch m := in.(type) {
			case *Subscribe:
				peers.Set(stage.ToListener(uint64(m.ID)), m.Target)
			case *Unsubscribe:
				peers.Set(stage.ToListener(uint64(m.ID)), nil)
			}
		},
		Env: func(ctx actor.Context) shell.Env {
			e := &sealed{stopped: make(chan struct{})}
			core.Seal(addIndexersHook(ctx.ActorSystem(), ctx.Self(), e.stopped))
			return e
		},
	})
}

// sealed is the Env of one incarnation of the indexer actor: it answers
// the AddIndexers calls (the core's *IndexersAdded to stage.ToInformer);
// stopping it fails the calls still waiting on it.
type sealed struct{ stopped chan struct{} }

func (e *sealed) Perform(_ actor.Context, m stage.Msg) bool {
	a, ok := m.Body.(*IndexersAdded)
	if !ok || m.To != stage.ToInformer {
		return false
	}
	select {
	case a.Reply <- a.Err:
	default: // a full or nil Reply: never block the actor on it
	}
	return true
}

func (e *sealed) Stop() { close(e.stopped) }

// addIndexersHook forwards Store.AddIndexers to the actor and waits for its
// answer, so that indexers are added between two batches.
func addIndexersHook(sys *actor.ActorSystem, self *actor.PID, stopped <-chan struct{}) func(cache.Indexers) error {
	return func(idx cache.Indexers) error {
		select {
		case <-stopped:
			return ErrStopped
		default:
		}
		m := &AddIndexers{Indexers: idx, Reply: make(chan error, 1)}
		sys.Root.Send(self, m)
		timeout := time.NewTimer(AddIndexersTimeout)
		defer timeout.Stop()
		select {
		case err := <-m.Reply:
			return err
		case <-stopped:
			// It may have been handled just before the actor stopped.
			select {
			case err := <-m.Reply:
				return err
			default:
				return ErrStopped
			}
		case <-timeout.C:
			return fmt.Errorf("indexer: AddIndexers: no answer from the indexer actor within %v", AddIndexersTimeout)
		}
	}
}
