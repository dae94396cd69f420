// Package listener is the listener stage: one per handler, it hands the
// notifications the indexer sends to its handler. Its plain core (Core)
// sends the handler its calls as one message per batch (Calls), a view of
// the batch; for a Coalesced handler, its coalescer (Coalescer) merges the
// pending notifications per key, and a handler runner makes the calls of
// one key at a time. Handler is its call path: it makes the calls, each
// isolated from panics, traced and measured, and keeps the listener's
// Counters. Props is the listener actor, the core's shell, which hands the
// core's Calls to the Handler; the informer configures both. The
// simulator (internal/sim) drives the core and the Handler directly.
package listener
