package fifo

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorinformer/actorinformer/shell"
	"github.com/actorinformer/actorinformer/stage"
)

// Props returns the props of the queue actor: q's shell (package shell),
// which sends to the indexer at indexer and performs what q reports to
// the informer by calling report (with a *Synced when HasSynced turns
// true; nil report: none). The actor owns q: nothing else may call q's
// methods except HasSynced and Len. Because the state lives in q, a
// restarted actor carries on where the old one stopped: on Started it
// sends what q holds if no batch is in flight. Its steps are short and
// never block, so it runs on the goroutine that wakes it
// (shell.Config.RunOnSender): the reflector's, or the indexer's for a
// Processed.
func Props(q *Queue, indexer *actor.PID, report func(body any)) *actor.Props {
	peers := &shell.Peers{}
	peers.Set(stage.ToIndexer, indexer)
	return shell.Props(shell.Config[Input]{Stage: stage.Queue, Core: q, Peers: peers, Telemetry: q.t, Env: shell.Reports(report),
		Lifecycle: func(l stage.Lifecycle) Input { return Lifecycle(l) }, RunOnSender: true})
}
