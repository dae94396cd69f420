// Package sim is a deterministic simulator of the whole informer pipeline:
// the reflector's Machine, the delta queue, the indexer's Core and one
// listener's Core (package listener) per handler, chained in one goroutine,
// fed by a scripted API server and timed by a fake clock.
//
// Every step delivers one message to one stage (the head of its mailbox:
// each mailbox is FIFO, as protoactor's are), or changes the world: the
// source, the API server's answers, time, or a fault. stages.go is the only
// file that calls the cores (their Step) and models their shell (package
// shell): the one type assertion that makes a message the core's input (a
// message that is not one is a violation), the actor's lifecycle around a
// Step, a panic, a restart, and the effects the shell performs (timers on
// the fake clock, the reflector's calls to the scripted server, the
// handler calls through the listener's real call path, listener.Handler,
// a Coalesced handler's runner as the mailbox at its stage.ToHandler
// address). The rest speaks stage.Msg.
//
// A script is a list of lines (newline or ';' separated, '#' comments).
// Before "start": "watchlist" (sync with WatchList), "nobookmark" (the
// server takes a WatchList request as a plain watch, never sending the
// initial-events-end bookmark, as client-go's fake clientset does),
// "batch N" (queue batch size), "resync DUR" (the informer's default
// resync), "detector" (the informer runs the cache mutation detector: it
// checks at start and every second), "handler NAME [DUR] [coalesced]" (a
// handler added before start,
// with its resync period; coalesced: wrapped in actors.Coalesced, its
// calls made by a runner, NAME.runner), "advance DUR" (time between adding
// handlers and the start), "create|update|delete NAME". Then:
//
//	start                 spawn the stages; the reflector starts listing
//	create|update|delete NAME   change an object at the source
//	burst N               N creates or updates at the source
//	bookmark              a bookmark on the open watch
//	repeat                the last change again on the watch, if a delete
//	compact               watches from an older resource version get 410
//	answer [CODE]         answer the waiting list or watch call (CODE: 500, 410, 429, 403)
//	answer old K          answer the waiting list from the state K changes ago, as a
//	                      lagging watch cache may (not older than the list asks for)
//	flush [N]             hand up to N (default all) watch events to the reflector, as one batch
//	cut                   the server closes the watch (after the events queued)
//	gone | werr           an ERROR event (410 | 500) ends the watch
//	deliver STAGE         deliver one message: reflector, fifo, indexer, a handler's name,
//	                      or NAME.runner (a coalesced handler's runner: the calls of one key)
//	tick | advance DUR    move time to the next timer | by DUR
//	restart STAGE         restart a stage's actor between two messages
//	crash N               the indexer panics while applying its next batch, after N objects
//	add NAME [DUR] [coalesced]  add a handler to the running informer
//	remove NAME           remove a handler
//	panic NAME            the handler panics on its next call (after recording it)
//	mutate NAME           the handler changes the object of its next call, the cached one
//	quiesce               run to quiescence, then check the final invariants
//	lose STAGE            drop the head of a mailbox (to test the checks)
//
// After every line: each subscribed handler's view plus what its mailbox
// holds (for a coalesced handler, plus what its runner holds and its core
// merged) equals the cache, and its backlog and pending counters count
// them; handlers see consistent calls (no add of a key they hold, no
// update or delete of one they do not, the old object of an update is the
// one they hold, UID included, and so is a delete's; an update changes
// the UID only after the indexer sent such an update; an add
// keeps isInInitialList) in per-key resource version order; HasSynced
// does not turn true before the first list is in the cache; a registration
// is not synced while initial notifications are queued or held for it;
// resource versions do not go back; the queue and the indexer log no
// warning; the cache mutation detector, when it runs, finds no change. At quiescence: source, cache and every handler's view are
// equal.
package sim
