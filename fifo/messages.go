package fifo

import (
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/telemetry"
)

// DeltaType says what happened to an object.
type DeltaType uint8

// The delta types, as client-go's cache.DeltaType.
const (
	Added DeltaType = iota + 1
	Updated
	Deleted
	// Replaced is an object seen in a list or relist.
	Replaced
	// Sync is a periodic resync of a cached object.
	Sync
	// Bookmark moves the cache's resource version on, in order with the
	// other deltas; it carries no object (Object is a cache.BookmarkInfo,
	// Key is empty) and reaches no handler. The reflector sends one per
	// watch bookmark; the queue ends every Replace with one holding the
	// list's resource version.
	Bookmark
)

var deltaTypeNames = [...]string{"", "Added", "Updated", "Deleted", "Replaced", "Sync", "Bookmark"}

func (t DeltaType) String() string {
	if int(t) < len(deltaTypeNames) {
		return deltaTypeNames[t]
	}
	return "Unknown"
}

// CacheType converts to client-go's name for the same delta type.
func (t DeltaType) CacheType() cache.DeltaType { return cache.DeltaType(t.String()) }

// Delta is one change to one object as it travels from the reflector through
// the queue to the indexer. It is passed by value inside batches.
//
// The fields are ordered so that a Delta takes 48 bytes on 64-bit machines.
type Delta struct {
	Type DeltaType
	// InitialList is set by the queue on the items (tombstones included) of
	// the first Replace: handlers get them as OnAdd(obj, true).
	InitialList bool
	// Received is when the reflector received the delta (the queue, for
	// tombstones and resyncs); set only when metrics are on. It fits in
	// the padding after the flags.
	Received telemetry.Stamp
	// Key is the object's cache key (cache.MetaNamespaceKeyFunc), computed once
	// by the reflector (or the queue, for tombstones and syncs).
	Key string
	// Object is the (transformed) object, a cache.DeletedFinalStateUnknown
	// for a tombstone, or a cache.BookmarkInfo for a Bookmark.
	Object any
	// Trace is the delta's trace state; nil when it is not sampled.
	Trace *telemetry.DeltaTrace
}

// Deltas carries watch events (Added, Updated, Deleted, Bookmark) from the
// reflector to the queue, in arrival order. The queue takes ownership of
// Items.
type Deltas struct {
	Items []Delta
}

// Replace carries the full result of a list or relist (Replaced deltas, one
// per listed object) and the list's resource version. The queue adds a
// tombstone for every known key missing from it and a Bookmark with
// ResourceVersion. The queue takes ownership of Items (a spare slot at the
// end of the slice saves it a copy).
type Replace struct {
	Items           []Delta
	ResourceVersion string
	// ListTrace is the list span; tombstones' traces link to it.
	ListTrace *telemetry.DeltaTrace
}

// IndexerInput makes Batch and Listed inputs of the queue's consumer, the
// indexer (indexer.Input).
func (*Batch) IndexerInput()  {}
func (*Listed) IndexerInput() {}

// Listed is sent by the queue actor to its consumer (the
// indexer) each time it gets a Replace: a list or relist is done and the
// reflector watches from it. client-go's reflector (re)starts its resync
// check timer at that point; the indexer does the same.
type Listed struct{}

// Synced is what the queue reports to the informer (stage.ToInformer),
// once, when HasSynced turns true.
type Synced struct{}

// Resync asks the queue to queue a Sync delta for every known key that has
// nothing queued.
type Resync struct{}

// Batch is what the queue hands to its consumer (the indexer): deltas in
// arrival order. The consumer answers with Processed once it has applied
// them; until then the queue sends no other batch.
type Batch struct {
	Deltas []Delta
	// InitialRemaining is the number of deltas of the first Replace (items
	// and tombstones) not handed out before this batch: this batch's and
	// those still queued. The consumer may size the cache with it. It is 0
	// once the first Replace has been handed out.
	InitialRemaining int
	// Atomic is set when the batch holds a whole relist: the consumer must
	// apply it in one step, so that readers of the cache see either the
	// old generation or the new one, never a mix.
	Atomic bool
}

// BookmarkRV returns the resource version a Bookmark delta carries.
func (d *Delta) BookmarkRV() string {
	b, _ := d.Object.(cache.BookmarkInfo)
	return b.ResourceVersion
}

// NewBookmark returns the Bookmark delta for resource version rv.
func NewBookmark(rv string) Delta {
	return Delta{Type: Bookmark, Object: cache.BookmarkInfo{ResourceVersion: rv}}
}

// Processed acknowledges a Batch: its deltas are applied to the cache and
// handed to the listeners.
type Processed struct {
	Count int
}

// KnownObjects is the queue's read-only view of the cache, used to find
// the keys a Replace must tombstone and the objects a Resync re-emits.
// Implementations must be safe for use while the cache's writer runs.
type KnownObjects interface {
	ListKeys() []string
	GetByKey(key string) (item any, exists bool, err error)
}
