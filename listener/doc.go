// Package listener is the listener stage: one per handler, it hands the
// notifications the indexer sends to its handler. Its plain core (Core)
// decides which handler calls to make; for a Coalesced handler, its
// coalescer (Coalescer) merges the pending notifications per key. The
// actors package wraps them in the listener actor (handler calls through a
// Path, panic isolation, spans, metrics); the simulator (internal/sim)
// drives them directly.
package listener
