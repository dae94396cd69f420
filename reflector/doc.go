// Package reflector is the informer's first stage: an actor that runs
// client-go's ListAndWatch over a cache.ListerWatcher and sends what it
// sees to the delta queue actor as *fifo.Replace (one per list, relist or
// WatchList sync; items are Replaced deltas) and *fifo.Deltas (watch events
// as Added, Updated, Deleted and Bookmark deltas, in arrival order,
// batched).
//
// The behaviour is client-go v0.37's Reflector:
//
//   - The first list is at resource version "0" (served from the
//     apiserver's watch cache), later ones at the last synced RV; a list
//     that answers Expired/Gone (410) or "too large resource version" is
//     retried at once at RV "" (a quorum read), and later relists use ""
//     until a list succeeds.
//   - Lists go through tools/pager, 500 per page; lists at a given RV
//     (not "" or "0") are not paginated, so the watch cache can serve them,
//     unless the first RV "0" list came back paginated. Config.PageSize
//     forces a page size.
//   - The watch asks for bookmarks and times out after a random time in
//     [5, 10] minutes. A bookmark moves the RV on and goes to the queue as
//     a Bookmark delta, in order with the events, for the cache's version
//     (client-go's store.Bookmark). A watch closed cleanly is re-opened at
//     the last RV with no relist; one closed within a second without any
//     event counts as an error.
//   - A watch that fails to open with connection refused or 429, or that
//     gets a 429 error event, backs off and re-watches (no relist). Any
//     other error ends the ListAndWatch: after the backoff the next one
//     relists (at the last RV; at "" if that is expired too).
//   - Backoff: 800ms doubling to 30s, jitter 1.0, reset when 2 minutes have
//     passed since it last was (wait.Backoff.DelayWithReset, as client-go),
//     applied after every ListAndWatch.
//   - The watch error handler gets the errors that end a ListAndWatch: list
//     errors and watch-open errors other than connection refused and 429.
//     Like client-go, errors inside an open watch (error events, 410
//     included) are logged, not handed to it.
//   - WatchList (Config.UseWatchList, default client-go's WatchListClient
//     feature gate): each sync is a watch with SendInitialEvents=true and
//     ResourceVersionMatch=NotOlderThan; objects collect until the bookmark
//     annotated k8s.io/initial-events-end, then one Replace, and the same
//     watch goes on. Connection refused and 429 back off and retry, expired
//     retries from RV "", anything else falls back to a list. Unlike
//     client-go, a stream that does not send the bookmark is given up (see
//     WatchListGiveUpAfter): WatchList is turned off and the reflector
//     lists; the wait is logged every WatchListWarnEvery meanwhile.
//
// Objects: watch events whose object has another Go type than
// Config.ExpectedType (or another GVK, for unstructured examples that have
// one), is nil, a Table, or has no ObjectMeta are dropped; so are objects
// the TransformFunc fails on and objects with no key. Each drop is logged
// at error level and counted (telemetry.Metrics.Drop with one of the Drop*
// reasons); the watch goes on. Config.Transform runs before an object is
// queued; each delta's key is cache.DeletionHandlingMetaNamespaceKeyFunc of
// the transformed object. As in client-go, list items are not type-checked.
//
// Tracing: every delta the informer's delta sampler chooses
// (telemetry.T.Choose, asked with the key and the transformed object) gets
// a root span (telemetry.T.StartDelta) when it is born here; list items
// link to the list's span, which Replace.ListTrace carries, and a sampled
// delta to the writer's span in the object's traceparent annotation.
// With tracing off nothing is allocated for it and time is not read per
// event.
//
// Structure: Machine is the whole decision logic as a plain state
// machine (Idle → Listing or WatchListing → Watching, BackingOff,
// Stopped). Its state is one value, whose kind carries the data only it
// has, one file per kind. Its one input, Step (package stage), takes a
// message and returns the messages to send: the *fifo.Replace and
// *fifo.Deltas for the queue, and its effects (messages.go): calls to the
// API server (stage.ToSource), its timers, and reports to the informer
// (its Status, errors for the watch error handler). Its settings are
// resolved once by New and shared read-only; what it has synced it
// reports as a Status message, which the shell stores in the Reflector
// handle. The actor made by Reflector.Props is its shell (package shell):
// it delivers the messages, runs the blocking calls in goroutines that
// report back with messages, and runs the timers on Config.Clock, which is
// also the Machine's clock.
package reflector
