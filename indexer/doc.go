// Package indexer is the informer's cache stage: it applies the delta queue's
// batches to the cache and fans the resulting notifications out to the
// listeners, one shared batch for all of them.
//
// It has three parts:
//   - Store, the cache: a cache.Indexer whose reads are concurrent and whose
//     only writer, once sealed, is the Core, through the store's Writer.
//     Listers and controllers read it as they read client-go's indexer.
//   - Core, the state machine: applies deltas with client-go's
//     processDeltas semantics (add or update by key presence, resync
//     detection by resource version, tombstone deletes), builds the
//     notifications, keeps subscriptions and the resync schedule, and
//     records the fifo.queue and indexer.apply spans of traced deltas. Its
//     input methods return the messages to send as []stage.Msg (package
//     stage); it imports no actor library.
//   - Props, the protoactor shell: decodes messages, calls the Core, and
//     delivers what it returns to the queue's mailbox (given at spawn) and
//     the listeners' (given in Subscribe).
//
// Writes hold the store's write lock for at most a few hundred deltas at a
// time, so readers keep going during a burst of watch events or the first
// list, except for a relist (a batch the queue marks Atomic): it is applied
// in one hold, so that readers see the old generation or the new one, never
// a mix, as with client-go's atomic Replace.
package indexer
