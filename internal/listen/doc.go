// Package listen holds a listener's plain core (Core) and a Coalesced
// handler's coalescer (Coalescer): which handler calls to make for the
// notifications the indexer sends, and, for a coalesced handler, how its
// pending notifications are merged per key. The actors package wraps them
// in the listener actor (handler calls through a Path, panic isolation,
// spans, metrics); the simulator (internal/sim) drives them directly.
package listen
