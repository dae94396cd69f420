package actors

import (
	"log/slog"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// sharedSystem is the process-wide actor system of the informers and
// factories that need none of their own: given neither WithActorSystem nor
// WithLogger (a logger is handed to the system, so a system with a user's
// logger is the user's alone). Creating a system costs milliseconds and a
// few MB of short-lived garbage (its process registry), more than starting
// an informer otherwise does.
//
// It is created on first use and never shut down. That leaks nothing: a
// protoactor system runs no goroutine of its own (ActorSystem.Shutdown only
// closes a channel; its dead-letter throttle, which sleeps a second in a
// goroutine, logs nothing: NewActorSystem), and an informer stops every
// actor it spawned before Run returns, so once the informers stop the
// system holds no actor.
var sharedSystem = sync.OnceValue(func() *actor.ActorSystem {
	return NewActorSystem() // protoactor's logs to klog, as the informers'
})

// systemFor returns the actor system an informer or factory with options o
// runs in, and whether it is its own (to shut down when it stops). logger
// is the logger for a system of its own.
func systemFor(o options, logger *slog.Logger) (sys *actor.ActorSystem, own bool) {
	switch {
	case o.system != nil:
		return o.system, false
	case o.logger == nil:
		return sharedSystem(), false
	default:
		return newActorSystem(logger), true
	}
}
