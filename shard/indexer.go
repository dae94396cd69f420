package shard

import (
	"errors"

	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/indexer"
)

// ErrReadOnly is returned by the writes of a sharded informer's cache: only
// its ranges' informers write.
var ErrReadOnly = errors.New("shard: a sharded informer's cache is written only by its ranges' informers")

// indexerView is the cache of the ranges this member delivers: reads go to
// each delivered range's cache (a read handle, no mailbox).
type indexerView struct{ s *Informer }

var _ actors.Store = indexerView{}

func (v indexerView) stores() []*rangeInformer { return *v.s.delivered.Load() }

func (v indexerView) Add(any) error                       { return ErrReadOnly }
func (v indexerView) Update(any) error                    { return ErrReadOnly }
func (v indexerView) Delete(any) error                    { return ErrReadOnly }
func (v indexerView) Replace([]any, string) error         { return ErrReadOnly }
func (v indexerView) Resync() error                       { return nil }
func (v indexerView) Bookmark(string)                     {}
func (v indexerView) AddIndexers(ix cache.Indexers) error { return v.s.AddIndexers(ix) }

// Len is the number of objects in the delivered ranges.
func (v indexerView) Len() int { return v.totalLen(v.stores()) }

// cache is a range's cache of a kind: the store its informer's indexer
// actor writes.
func (kr *kindRange) cache() *indexer.Store { return kr.inf.GetIndexer().(*indexer.Store) }

// of is the view's kind's informer of range ri.
func (v indexerView) of(ri *rangeInformer) cache.Indexer { return ri.of(v.s).inf.GetIndexer() }

func (v indexerView) totalLen(ris []*rangeInformer) int {
	n := 0
	for _, ri := range ris {
		n += cacheLen(v.of(ri))
	}
	return n
}

// List and ListKeys read each delivered range's cache into one slice,
// allocated once (appendAll): a lister's List reads the whole cache.
func (v indexerView) List() []any        { return appendAll(v, (*indexer.Store).AppendList) }
func (v indexerView) ListKeys() []string { return appendAll(v, (*indexer.Store).AppendKeys) }

func appendAll[T any](v indexerView, add func(*indexer.Store, []T) []T) []T {
	ris := v.stores()
	out := make([]T, 0, v.totalLen(ris))
	for _, ri := range ris {
		out = add(ri.of(v.s).cache(), out)
	}
	return out
}

func (v indexerView) LastStoreSyncResourceVersion() string { return v.s.LastSyncResourceVersion() }

func (v indexerView) Get(obj any) (any, bool, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, cache.KeyError{Obj: obj, Err: err}
	}
	return v.GetByKey(key)
}

func (v indexerView) GetByKey(key string) (any, bool, error) {
	for _, ri := range v.stores() {
		if item, ok, err := v.of(ri).GetByKey(key); ok || err != nil {
			return item, ok, err
		}
	}
	return nil, false, nil
}

func (v indexerView) Index(name string, obj any) ([]any, error) {
	return byIndex(v, name, func(c cache.Indexer) ([]any, error) { return c.Index(name, obj) })
}

func (v indexerView) IndexKeys(name, value string) ([]string, error) {
	return byIndex(v, name, func(c cache.Indexer) ([]string, error) { return c.IndexKeys(name, value) })
}

func (v indexerView) ListIndexFuncValues(name string) []string {
	seen := map[string]struct{}{}
	var out []string
	for _, ri := range v.stores() {
		for _, val := range v.of(ri).ListIndexFuncValues(name) {
			if _, dup := seen[val]; !dup {
				seen[val] = struct{}{}
				out = append(out, val)
			}
		}
	}
	return out
}

func (v indexerView) ByIndex(name, value string) ([]any, error) {
	return byIndex(v, name, func(c cache.Indexer) ([]any, error) { return c.ByIndex(name, value) })
}

// byIndex joins what read finds in each delivered range's cache with index
// name, and answers a missing index as client-go's store does, even with
// no range delivered.
func byIndex[T any](v indexerView, name string, read func(cache.Indexer) ([]T, error)) ([]T, error) {
	var out []T
	for _, ri := range v.stores() {
		items, err := read(v.of(ri))
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
	}
	if _, ok := v.GetIndexers()[name]; !ok {
		return nil, errors.New("Index with name " + name + " does not exist")
	}
	return out, nil
}

func (v indexerView) GetIndexers() cache.Indexers {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return cloneIndexers(v.s.indexers)
}
