package indexer

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgofeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/internal/pulse"
)

// ErrReadOnly is returned by the Store's write methods once the informer has
// started: from then on only the informer's indexer actor writes the cache.
var ErrReadOnly = errors.New("actorinformer: the informer's cache is read-only once it runs (a deliberate difference from client-go: its indexer actor is the only writer); change the object through the API server and the watch brings the change in")

// Compile-time check: Store is a drop-in cache.Indexer (listers, controllers).
var _ cache.Indexer = (*Store)(nil)

// Store is the informer's cache: objects by key plus their indices.
//
// Its read methods (List, ListKeys, Get, GetByKey, Index, IndexKeys,
// ListIndexFuncValues, ByIndex, GetIndexers, LastStoreSyncResourceVersion,
// Len) may be called by multiple goroutines simultaneously, also while the
// cache is being written; they return fresh slices. Objects they return are
// shared with the cache and every handler: treat them as read-only.
//
// Until Seal is called, the cache.Indexer write methods work as client-go's
// indexer (unit tests seed caches that way). After Seal, the cache has a
// single writer, the indexer's core through the store's Writer: Add, Update,
// Delete and Replace return ErrReadOnly, Bookmark is ignored, and
// AddIndexers is forwarded to the indexer actor through the hook given to
// Writer.Seal.
type Store struct {
	keyFunc cache.KeyFunc

	sealed atomic.Bool
	hook   atomic.Pointer[func(cache.Indexers) error]
	// writer is set once Writer has handed out the write access.
	writer atomic.Bool

	mu    sync.RWMutex
	items map[string]any
	// defs holds the indices in the order they were added.
	defs   []*indexDef
	byName map[string]*indexDef
	rv     string
	// indexError reports an index function that failed on an object.
	indexError func(key, index string, err error)
	// rvMetric, when set, follows rv (see SetResourceVersionMetric).
	rvMetric cache.GaugeMetric
	// changed fires as rv moves (Changed).
	changed pulse.Pulse
}

// Changed returns a channel closed once the cache's resource version next
// moves (a list, an event or a bookmark applied): a wait for the cache to
// reach a version wakes on it instead of polling. While nobody waits, a
// move costs one atomic load.
func (s *Store) Changed() <-chan struct{} { return s.changed.Wait() }

// SetResourceVersionMetric sets the gauge that follows the cache's resource
// version, as the store resource version metric of a client-go
// cache.InformerMetricsProvider: it is set, as client-go's store sets it,
// whenever the version moves to one that parses as a number (its last 15
// digits; "" counts as 0). Set it before the store is used.
func (s *Store) SetResourceVersionMetric(g cache.GaugeMetric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rvMetric = g
}

// setRVLocked records rv as the cache's resource version. s.mu is held.
func (s *Store) setRVLocked(rv string) {
	s.rv = rv
	s.changed.Fire()
	if s.rvMetric != nil {
		if n, err := ParseRVForMetrics(rv); err == nil {
			s.rvMetric.Set(float64(n))
		}
	}
}

// ParseRVForMetrics is client-go's parseRVForMetricsWithTruncation: the
// last 15 digits, so that the value is exact as a float64.
func ParseRVForMetrics(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	if len(rv) > 15 {
		rv = rv[len(rv)-15:]
	}
	return strconv.ParseInt(rv, 10, 64)
}

// indexDef is one named index: its function and its value → keys map.
type indexDef struct {
	name string
	fn   cache.IndexFunc
	// namespace is set when fn is cache.MetaNamespaceIndexFunc, the index
	// almost every informer has: the store then computes its one value
	// itself, without the slice the function allocates per call (two calls
	// per update: the old object and the new one).
	namespace bool
	values    map[string]sets.Set[string]
	onError   func(key, index string, err error)
	// oldBuf and newBuf back the values call returns for the namespace
	// index: one for the replaced object, one for the new. Only the writer
	// (under the write lock) uses them, and never keeps the slices.
	oldBuf, newBuf [1]string
}

// isMetaNamespaceIndexFunc reports whether fn is cache.MetaNamespaceIndexFunc
// itself (not a function wrapping it).
func isMetaNamespaceIndexFunc(fn cache.IndexFunc) bool {
	return fn != nil && reflect.ValueOf(fn).Pointer() == reflect.ValueOf(cache.MetaNamespaceIndexFunc).Pointer()
}

// NewStore returns an empty cache indexed by indexers. A nil keyFunc means
// cache.DeletionHandlingMetaNamespaceKeyFunc, the informers' key function.
func NewStore(keyFunc cache.KeyFunc, indexers cache.Indexers) *Store {
	if keyFunc == nil {
		keyFunc = cache.DeletionHandlingMetaNamespaceKeyFunc
	}
	s := &Store{
		keyFunc: keyFunc,
		items:   map[string]any{},
		byName:  map[string]*indexDef{},
	}
	s.addIndexDefsLocked(indexers)
	return s
}

// Seal makes the cache read-only for everyone but its owner (the indexer
// actor, through the package's internal write path). The informer calls it
// when it starts. Seal cannot be undone.
func (s *Store) Seal() { s.sealed.Store(true) }

// Sealed reports whether Seal was called.
func (s *Store) Sealed() bool { return s.sealed.Load() }

// Len returns the number of cached objects.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// ---- cache.Store writes (external; refused after Seal) ----

// Add inserts or replaces obj. After Seal it returns ErrReadOnly.
func (s *Store) Add(obj any) error { return s.Update(obj) }

// Update inserts or replaces obj. After Seal it returns ErrReadOnly.
func (s *Store) Update(obj any) error {
	if s.sealed.Load() {
		return ErrReadOnly
	}
	key, err := s.keyFunc(obj)
	if err != nil {
		return cache.KeyError{Obj: obj, Err: err}
	}
	rv, rvErr := rvOf(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.upsertLocked(key, obj)
	if rvErr == nil {
		s.setRVLocked(rv)
	}
	return nil
}

// Delete removes obj's key. After Seal it returns ErrReadOnly.
func (s *Store) Delete(obj any) error {
	if s.sealed.Load() {
		return ErrReadOnly
	}
	key, err := s.keyFunc(obj)
	if err != nil {
		return cache.KeyError{Obj: obj, Err: err}
	}
	rv, rvErr := rvOf(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteLocked(key)
	if rvErr == nil {
		s.setRVLocked(rv)
	}
	return nil
}

// Replace swaps the content for list and rebuilds the indices. After Seal it
// returns ErrReadOnly.
func (s *Store) Replace(list []any, resourceVersion string) error {
	if s.sealed.Load() {
		return ErrReadOnly
	}
	objs := make(map[string]any, len(list))
	for _, obj := range list {
		key, err := s.keyFunc(obj)
		if err != nil {
			return cache.KeyError{Obj: obj, Err: err}
		}
		objs[key] = obj
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = make(map[string]any, len(objs))
	for _, d := range s.defs {
		d.values = map[string]sets.Set[string]{}
	}
	for key, obj := range objs {
		s.upsertLocked(key, obj)
	}
	s.setRVLocked(resourceVersion)
	return nil
}

// Resync does nothing, as in client-go.
func (s *Store) Resync() error { return nil }

// Bookmark records rv as the last resource version seen. It is ignored after
// Seal: the indexer actor is then the only one to move the cache's version.
func (s *Store) Bookmark(rv string) {
	if s.sealed.Load() {
		return
	}
	s.mu.Lock()
	s.setRVLocked(rv)
	s.mu.Unlock()
}

// AddIndexers adds indices and indexes the cached objects with them; a name
// already in use is an error and adds nothing. After Seal it goes through
// the indexer actor (see Writer.Seal).
func (s *Store) AddIndexers(newIndexers cache.Indexers) error {
	if s.sealed.Load() {
		if hook := s.hook.Load(); hook != nil {
			return (*hook)(newIndexers)
		}
	}
	// Not sealed, or sealed without an actor: the write lock alone keeps
	// this consistent with the writer.
	return s.addIndexers(newIndexers)
}

// ---- cache.Store reads ----

// List returns every cached object, in no particular order.
func (s *Store) List() []any { return s.AppendList([]any{}) }

// AppendList appends every cached object to dst, in no particular order,
// and returns the extended slice: a view over several stores lists them
// into one slice, grown once.
func (s *Store) AppendList(dst []any) []any {
	s.mu.RLock()
	defer s.mu.RUnlock()
	dst = slices.Grow(dst, len(s.items))
	for _, obj := range s.items {
		dst = append(dst, obj)
	}
	return dst
}

// ListKeys returns every cached key, in no particular order.
func (s *Store) ListKeys() []string { return s.AppendKeys([]string{}) }

// AppendKeys appends every cached key to dst, in no particular order, and
// returns the extended slice.
func (s *Store) AppendKeys(dst []string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	dst = slices.Grow(dst, len(s.items))
	for k := range s.items {
		dst = append(dst, k)
	}
	return dst
}

// Get returns the cached object with obj's key.
func (s *Store) Get(obj any) (item any, exists bool, err error) {
	key, err := s.keyFunc(obj)
	if err != nil {
		return nil, false, cache.KeyError{Obj: obj, Err: err}
	}
	return s.GetByKey(key)
}

// GetByKey returns the cached object with key.
func (s *Store) GetByKey(key string) (item any, exists bool, err error) {
	s.mu.RLock()
	obj, exists := s.items[key]
	s.mu.RUnlock()
	return obj, exists, nil
}

// LastStoreSyncResourceVersion returns the resource version the cache has
// caught up with, as client-go's AtomicFIFO informer keeps it: the last
// list's, watch event's object's or bookmark's, whichever was applied last
// (see Core.Step; before Seal, the last external write's). Like client-go
// it returns "" when the AtomicFIFO feature is off.
func (s *Store) LastStoreSyncResourceVersion() string {
	if !clientgofeatures.FeatureGates().Enabled(clientgofeatures.AtomicFIFO) {
		return ""
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// AppliedResourceVersion is LastStoreSyncResourceVersion whatever client-go's
// AtomicFIFO feature says: the version the cache has applied.
func (s *Store) AppliedResourceVersion() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// Snapshot returns the cached objects and the resource version the cache
// has applied, both at one instant.
func (s *Store) Snapshot() ([]any, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := make([]any, 0, len(s.items))
	for _, obj := range s.items {
		list = append(list, obj)
	}
	return list, s.rv
}

// ---- cache.Indexer reads ----

// Index returns the cached objects that share at least one value of the
// named index with obj.
func (s *Store) Index(indexName string, obj any) ([]any, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.byName[indexName]
	if d == nil {
		return nil, noIndex(indexName)
	}
	vals, err := d.fn(obj)
	if err != nil {
		return nil, err
	}
	if len(vals) == 1 {
		set := d.values[vals[0]]
		list := make([]any, 0, len(set))
		for key := range set {
			list = append(list, s.items[key])
		}
		return list, nil
	}
	// Several values may name the same key: deduplicate.
	keys := sets.Set[string]{}
	for _, v := range vals {
		for key := range d.values[v] {
			keys.Insert(key)
		}
	}
	list := make([]any, 0, len(keys))
	for key := range keys {
		list = append(list, s.items[key])
	}
	return list, nil
}

// IndexKeys returns, sorted, the keys of the cached objects indexed under
// indexedValue in the named index.
func (s *Store) IndexKeys(indexName, indexedValue string) ([]string, error) {
	s.mu.RLock()
	d := s.byName[indexName]
	if d == nil {
		s.mu.RUnlock()
		return nil, noIndex(indexName)
	}
	set := d.values[indexedValue]
	keys := make([]string, 0, len(set))
	for key := range set {
		keys = append(keys, key)
	}
	s.mu.RUnlock()
	slices.Sort(keys)
	return keys, nil
}

// ListIndexFuncValues returns the values of the named index, in no
// particular order; none for an unknown index.
func (s *Store) ListIndexFuncValues(indexName string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var values map[string]sets.Set[string]
	if d := s.byName[indexName]; d != nil {
		values = d.values
	}
	names := make([]string, 0, len(values))
	for v := range values {
		names = append(names, v)
	}
	return names
}

// ByIndex returns the cached objects indexed under indexedValue in the named
// index.
func (s *Store) ByIndex(indexName, indexedValue string) ([]any, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.byName[indexName]
	if d == nil {
		return nil, noIndex(indexName)
	}
	set := d.values[indexedValue]
	list := make([]any, 0, len(set))
	for key := range set {
		list = append(list, s.items[key])
	}
	return list, nil
}

// GetIndexers returns a copy of the index functions by name.
func (s *Store) GetIndexers() cache.Indexers {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(cache.Indexers, len(s.defs))
	for _, d := range s.defs {
		out[d.name] = d.fn
	}
	return out
}

func noIndex(name string) error {
	// client-go's wording, which callers may match.
	return fmt.Errorf("Index with name %s does not exist", name)
}

func rvOf(obj any) (string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return m.GetResourceVersion(), nil
}

// ---- the single writer ----

// Writer is the write access to a Store: the indexer's core writes the cache
// only through it, and a Store hands out one (see Store.Writer). Its methods
// are for one goroutine, the writer's; readers use the Store meanwhile.
type Writer struct {
	s *Store
}

// Writer returns the write access to s. It can be taken once: the cache has
// a single writer; a second call panics. It does not seal s: until Seal is
// called, the cache.Indexer write methods work too.
func (s *Store) Writer() *Writer {
	if s.writer.Swap(true) {
		panic("indexer: Store.Writer called twice: the cache has a single writer")
	}
	return &Writer{s: s}
}

// Seal makes the cache read-only for everyone but w (see Store.Seal) and
// routes Store.AddIndexers through addIndexers (nil: they are added
// directly, under the write lock).
func (w *Writer) Seal(addIndexers func(cache.Indexers) error) {
	if addIndexers == nil {
		w.s.hook.Store(nil)
	} else {
		w.s.hook.Store(&addIndexers)
	}
	w.s.Seal()
}

// SetIndexErrorHandler sets the function told about an index function that
// fails (or panics) on an object: the object stays cached but out of that
// index.
func (w *Writer) SetIndexErrorHandler(f func(key, index string, err error)) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.indexError = f
	for _, d := range s.defs {
		d.onError = f
	}
}

// Expect sizes an empty cache for n objects; it does nothing when n is 0 or
// the cache holds objects.
func (w *Writer) Expect(n int) {
	if n <= 0 {
		return
	}
	s := w.s
	s.mu.Lock()
	if len(s.items) == 0 {
		s.items = make(map[string]any, n)
	}
	s.mu.Unlock()
}

// Lock starts a write: readers wait until Unlock. Upsert, Delete and
// SetResourceVersion are called between Lock and Unlock.
func (w *Writer) Lock() { w.s.mu.Lock() }

// Unlock ends the write Lock started.
func (w *Writer) Unlock() { w.s.mu.Unlock() }

// Upsert stores obj under key and moves it in every index, returning the
// object it replaced, if any. Call it between Lock and Unlock.
func (w *Writer) Upsert(key string, obj any) (old any, existed bool) {
	return w.s.upsertLocked(key, obj)
}

// Delete removes key and its index entries. Call it between Lock and Unlock.
func (w *Writer) Delete(key string) { w.s.deleteLocked(key) }

// SetResourceVersion records rv as the cache's resource version. Call it
// between Lock and Unlock.
func (w *Writer) SetResourceVersion(rv string) { w.s.setRVLocked(rv) }

// Each calls f with every cached object, under the read lock.
func (w *Writer) Each(f func(obj any)) {
	s := w.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, obj := range s.items {
		f(obj)
	}
}

// Len returns the number of cached objects.
func (w *Writer) Len() int { return w.s.Len() }

// AddIndexers adds indexers and indexes the cached objects; a name already
// in use is an error and adds nothing.
func (w *Writer) AddIndexers(idx cache.Indexers) error { return w.s.addIndexers(idx) }

// ---- single-writer internals (the Writer and the external writes) ----

// addIndexers is AddIndexers without the seal check.
func (s *Store) addIndexers(newIndexers cache.Indexers) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := sets.New[string]()
	for _, d := range s.defs {
		old.Insert(d.name)
	}
	if conflict := old.Intersection(sets.KeySet(newIndexers)); conflict.Len() > 0 {
		return fmt.Errorf("indexer conflict: %v", conflict)
	}
	first := len(s.defs)
	s.addIndexDefsLocked(newIndexers)
	if len(s.defs) == first {
		return nil
	}
	for key, obj := range s.items {
		for _, d := range s.defs[first:] {
			d.index(key, nil, obj)
		}
	}
	return nil
}

// addIndexDefsLocked appends empty indices, in name order so that a store
// is laid out the same way whatever the map order.
func (s *Store) addIndexDefsLocked(indexers cache.Indexers) {
	names := make([]string, 0, len(indexers))
	for name := range indexers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fn := indexers[name]
		d := &indexDef{name: name, fn: fn, namespace: isMetaNamespaceIndexFunc(fn), values: map[string]sets.Set[string]{}, onError: s.indexError}
		s.defs = append(s.defs, d)
		s.byName[name] = d
	}
}

// upsertLocked stores obj under key and moves it in every index. It returns
// the object it replaced, if any. The write lock must be held.
//
// As in client-go, the values an object is indexed under are not stored:
// they are computed again from the old object when it is replaced or
// deleted (index functions must be deterministic, as client-go requires).
// That costs a call of each index function per update and saves ~70 bytes
// per cached object with one index.
func (s *Store) upsertLocked(key string, obj any) (old any, existed bool) {
	old, existed = s.items[key]
	for _, d := range s.defs {
		var oldVals []string
		if existed {
			oldVals = d.indexedUnder(old)
		}
		d.index(key, oldVals, obj)
	}
	s.items[key] = obj
	return old, existed
}

// deleteLocked removes key and its index entries. The write lock must be
// held.
func (s *Store) deleteLocked(key string) {
	old, ok := s.items[key]
	if !ok {
		return
	}
	for _, d := range s.defs {
		for _, v := range d.indexedUnder(old) {
			d.remove(key, v)
		}
	}
	delete(s.items, key)
}

// call runs the index function, turning a panic into an error. For the
// namespace index it computes the same value as cache.MetaNamespaceIndexFunc
// into buf instead. The write lock must be held.
func (d *indexDef) call(obj any, buf *[1]string) (vals []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("index function panicked: %v", r)
		}
	}()
	if d.namespace {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("object has no meta: %v", err)
		}
		buf[0] = m.GetNamespace()
		return buf[:], nil
	}
	return d.fn(obj)
}

// indexedUnder returns the values a cached object is indexed under: the
// index function's values, or none when it fails on the object (its failure
// was reported when the object was indexed, and left it out of the index).
func (d *indexDef) indexedUnder(obj any) []string {
	vals, err := d.call(obj, &d.oldBuf)
	if err != nil {
		return nil
	}
	return vals
}

// index moves key from oldVals, the values it was indexed under, to those
// of obj. client-go panics when an index function fails; here the object
// stays cached but is left out of that index, and the failure is reported
// through the store's index error handler.
func (d *indexDef) index(key string, oldVals []string, obj any) {
	vals, err := d.call(obj, &d.newBuf)
	if err != nil {
		if d.onError != nil {
			d.onError(key, d.name, err)
		}
		vals = nil
	}
	if len(vals) == 1 && len(oldVals) == 1 && vals[0] == oldVals[0] {
		// The common case: one value, unchanged.
		return
	}
	for _, v := range oldVals {
		d.remove(key, v)
	}
	for _, v := range vals {
		set := d.values[v]
		if set == nil {
			set = sets.Set[string]{}
			d.values[v] = set
		}
		set[key] = struct{}{}
	}
}

func (d *indexDef) remove(key, v string) {
	set := d.values[v]
	if set == nil {
		return
	}
	delete(set, key)
	// Empty sets are dropped so that short-lived values do not pile up
	// (kubernetes/kubernetes#84959).
	if len(set) == 0 {
		delete(d.values, v)
	}
}
