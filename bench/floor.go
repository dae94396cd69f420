package bench

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Floor is the same work as an informer's with no pipeline at all: one
// goroutine lists, then reads the watch, applies each event to a locked
// map with the namespace index (client-go's thread-safe Indexer) and calls
// every handler inline, in order. No queue, no hop between goroutines, no
// copy: what a pipeline of isolated stages costs is its distance to this.
// It is a benchmark's yardstick, not an informer: it has no resync, no
// relist after an error, no handler isolation (a slow handler stalls the
// others), and implements only what the scenarios call.
const Floor Impl = "floor"

// floorInformer is Floor's cache.SharedIndexInformer. The methods the
// scenarios do not call are the embedded nil interface's (they panic).
type floorInformer struct {
	cache.SharedIndexInformer
	lw      cache.ListerWatcherWithContext
	indexer cache.Indexer

	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
	synced   bool
}

func newFloor(lw cache.ListerWatcher, indexers cache.Indexers) *floorInformer {
	return &floorInformer{lw: cache.ToListerWatcherWithContext(lw), indexer: cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers)}
}

func (f *floorInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.synced {
		return nil, errors.New("bench: the floor takes handlers before it runs only")
	}
	f.handlers = append(f.handlers, h)
	return nil, nil
}

func (f *floorInformer) GetStore() cache.Store     { return f.indexer }
func (f *floorInformer) GetIndexer() cache.Indexer { return f.indexer }

func (f *floorInformer) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

// Run lists, then applies the watch's events until stop.
func (f *floorInformer) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	list, err := f.lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return
	}
	objs := make([]any, len(items))
	for i, it := range items {
		objs[i] = it
	}
	lm, _ := meta.ListAccessor(list)
	_ = f.indexer.Replace(objs, lm.GetResourceVersion())
	f.mu.Lock()
	f.synced = true
	hs := f.handlers
	f.mu.Unlock()
	for _, o := range objs {
		for _, h := range hs {
			h.OnAdd(o, true)
		}
	}
	w, err := f.lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()})
	if err != nil {
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.ResultChan():
			if !ok {
				return
			}
			f.apply(hs, e)
		}
	}
}

func (f *floorInformer) apply(hs []cache.ResourceEventHandler, e watch.Event) {
	switch e.Type {
	case watch.Added, watch.Modified:
		old, had, _ := f.indexer.Get(e.Object)
		_ = f.indexer.Update(e.Object)
		for _, h := range hs {
			if had {
				h.OnUpdate(old, e.Object)
			} else {
				h.OnAdd(e.Object, false)
			}
		}
	case watch.Deleted:
		_ = f.indexer.Delete(e.Object)
		for _, h := range hs {
			h.OnDelete(e.Object)
		}
	}
}
