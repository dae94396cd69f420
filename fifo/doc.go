// Package fifo is the delta queue stage of the informer: it sits between the
// reflector and the indexer, as client-go's RealFIFO (and, before it,
// DeltaFIFO) does, and hands the indexer deltas in arrival order.
//
// The package has two layers:
//
//   - Queue is a plain, single-threaded state machine (only HasSynced and Len
//     may be called from other goroutines). It is where all the rules live,
//     and it is tested without actors. Its input methods (Deltas, Replace,
//     Resync, Processed, Started) each take one message and return, as
//     []stage.Msg, what must be sent because of it: the next *Batch, if
//     any, to stage.ToIndexer; after a Replace, first a *Listed, with
//     which the indexer (re)starts its resync checks.
//   - NewActor (or Props) wraps a Queue in a protoactor actor that only
//     decodes a message, calls the input method and delivers what it
//     returned. The consumer answers a batch with *Processed, sent to the
//     queue's mailbox (the indexer's shell is given it when spawned).
//
// # Ordering and batching
//
// Every delta is queued as its own entry, in arrival order (no per-key
// grouping and no "line jumping": a key's later delta is never handed out
// before another key's earlier one). The queue hands out up to MaxBatch
// deltas at a time, except that a relist is never split: the batch that
// reaches into one extends to its end, however long, and is marked Atomic
// so that the consumer applies it in one step. While a batch is in flight
// (handed out, not yet acknowledged with Processed) no other is, so the
// consumer sees at most one batch at a time. Until the first Replace's
// deltas are all handed out, a batch never mixes them with later deltas, so
// HasSynced turns true exactly when the initial list is applied.
//
// A batch's Deltas slice belongs to the queue: the consumer must treat it as
// read-only and must not keep it (or the *Batch) after answering Processed;
// the queue reuses both. Batches are views of the queue's own array, so
// handing one out copies nothing.
//
// # Effective state
//
// Some rules need to know whether a key exists. A key's effective state is
// its last queued delta if any, else its last delta in the in-flight batch,
// else the cache (Config.Known). A Deleted delta, tombstone or not, means
// absent. The in-flight batch comes before the cache because the consumer
// may not have applied it yet.
//
// # Rules
//
//   - Deletes collapse: a Deleted delta whose key's last queued delta is
//     already Deleted is dropped; if the queued one's object is a
//     cache.DeletedFinalStateUnknown and the new one's is not, the new object
//     takes its place (the more informative object wins, as in DeltaFIFO's
//     dedupDeltas). A Deleted delta for an absent key is dropped too. Dropped
//     deltas are counted as merged and, when traced, get a "delta.merged"
//     event (reason ReasonDuplicateDelete or ReasonAlreadyDeleted).
//   - Replace queues, in client-go v0.37's (AtomicFIFO) order: for every key
//     whose effective state is present but which the list lacks, a tombstone
//     — a Deleted delta whose Object is cache.DeletedFinalStateUnknown{Key,
//     Obj} with the last known object — (those for pending keys first, in
//     queue order, then those for keys only in the cache, in ListKeys order);
//     then the listed items (Replaced deltas) in list order; then a Bookmark
//     delta with the list's resource version, which the consumer makes the
//     cache's. A Replace while the cache or the queue holds anything is a
//     relist: it is handed out whole (see above). The first list into an
//     empty cache and queue may be split into batches.
//   - Bookmark deltas (from Deltas: watch bookmarks; from Replace) have no key:
//     they are never tombstoned, collapsed or resynced, and an Add of
//     bookmarks alone does not end the wait for the first Replace.
//   - The first Replace marks every delta it queues (tombstones, items and
//     its bookmark) InitialList; HasSynced turns true once all of them are
//     handed out and acknowledged — for an empty list, once its bookmark is, as
//     client-go's AtomicFIFO waits for its ReplacedAll delta. As in
//     client-go, a Deltas before the first Replace makes HasSynced true at
//     once and that Replace is then not an initial list. Deltas queued after
//     the first Replace are never InitialList.
//   - Resync queues a Sync delta (with the cached object) for every cached
//     key with nothing queued and nothing in flight: a pending delta would
//     make the cached object stale (client-go's UpdateResyncRace).
//
// # Telemetry
//
// Tombstones and syncs are born in the queue, so it opens their root spans
// (telemetry.T.StartDelta, with Config.Now as the start): tombstones link to
// the list span of the Replace that made them. When tracing is off, or the
// informer's delta sampler (telemetry.T.Choose) or the provider's sampler
// drops them, their Trace is nil. Every traced delta's
// Trace.QueueDepth is set, as it is queued, to the number of deltas queued
// ahead of it (the in-flight batch not counted). Metrics are recorded once
// per call: Queued, Dequeued and Merged, and Metrics.QueueBacklog tracks
// Len.
//
// # Memory
//
// The queue keeps one array of deltas (in flight, then queued) indexed by
// sequence number, and a map from key to the sequence number of its last
// delta, so "has something pending" and "last pending delta" are O(1). A
// map entry whose delta has been acknowledged is left for the key's next
// delta to overwrite, unless that delta was a Deleted one, so the map holds
// at most the cached keys plus the pending ones and busy keys cause no map
// churn; when the queue drains (every entry is then stale) a map of 1,024
// entries or more is dropped, so an idle informer's queue holds nothing per
// cached key. Acknowledged slots are zeroed at once. The array is compacted when
// at least half of it is free space in front (amortized O(1) per delta),
// reallocated when full (never moving the in-flight batch, which the
// consumer may be reading), and dropped when the queue drains once no
// backlog has needed a quarter of it for a second (not at once: a busy
// watch's backlog comes and goes). A list that
// arrives while the queue holds nothing and has no tombstone becomes the
// array as it is (its bookmark goes in a spare slot, if it has one), and is
// dropped when the queue drains. Deltas and the hand-off allocate nothing
// beyond map and array growth (the input methods reuse one stage.Outbox);
// Replace reserves room for all its deltas at once.
package fifo
