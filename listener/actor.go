package listener

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorinformer/actorinformer/shell"
	"github.com/actorinformer/actorinformer/stage"
)

// Props returns the props of the listener actor: core's shell (package
// shell), one mailbox per handler, so that a slow handler only grows its
// own backlog. It sends to the indexer at indexer (the mailbox it was
// given, not the sender of a request, so that it holds whichever stage
// restarted) and makes its handler's calls through h: at once, on the
// listener's goroutine, or, for a Coalesced handler, through its handler
// runner, a child actor that makes the calls of one pending key at a time
// and answers CallsDone, so that the listener goes on merging meanwhile.
// What the core reports to the informer (*Synced) is h's Synced, and the
// actor's end h's Exited.
func Props(core *Core, indexer *actor.PID, h *Handler) *actor.Props {
	peers := &shell.Peers{}
	peers.Set(stage.ToIndexer, indexer)
	return shell.Props(shell.Config[Input]{
		Stage:     stage.Listener,
		Core:      core,
		Lifecycle: func(l stage.Lifecycle) Input { return Lifecycle(l) },
		Peers:     peers,
		Telemetry: h.tel,
		Env: func(ctx actor.Context) shell.Env {
			e := &handlerEnv{h: h, id: uint64(core.id)}
			if core.Coalesced() {
				// A child: stopped with the listener, after its running call.
				e.runner = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &runner{h: h} }))
			}
			return e
		},
	})
}

// handlerEnv performs a listener's effects: its handler's calls, and what
// it reports to the informer.
type handlerEnv struct {
	h      *Handler
	id     uint64
	runner *actor.PID // a Coalesced handler's; nil for the others
}

func (e *handlerEnv) Perform(ctx actor.Context, m stage.Msg) bool {
	switch m.To {
	case stage.ToHandler(e.id):
		c, ok := m.Body.(*Calls)
		if !ok {
			return false
		}
		if e.runner != nil {
			ctx.Send(e.runner, c)
		} else {
			e.h.Call(c)
		}
	case stage.ToInformer:
		e.h.tellSynced()
	default:
		return false
	}
	return true
}

func (e *handlerEnv) Exited() {
	if e.h.exited != nil {
		e.h.exited()
	}
}

// runner makes a Coalesced handler's calls, one pending key per Calls, and
// answers its listener with CallsDone.
type runner struct{ h *Handler }

func (r *runner) Receive(ctx actor.Context) {
	if c, ok := ctx.Message().(*Calls); ok {
		c.Take()
		r.h.Call(c)
		ctx.Send(ctx.Parent(), CallsDoneMsg)
	}
}
