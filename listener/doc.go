// Package listener is the listener stage: one per handler, it hands the
// notifications the indexer sends to its handler. Its plain core (Core)
// sends the handler its calls as one message per batch (Calls), a view of
// the batch; for a Coalesced handler, its coalescer (Coalescer) merges the
// pending notifications per key, and a handler runner makes the calls of
// one key at a time. Props is the listener actor, the core's shell; the
// informer gives it the call path (Handler: panic isolation, spans,
// metrics). The simulator (internal/sim) drives the core directly.
package listener
