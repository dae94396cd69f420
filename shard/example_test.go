package shard_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// What docs/sharding.md says of handlers and workqueues, run.

func TestDocOwnershipHandler(t *testing.T) {
	src := newMemServer()
	for i := range 10 {
		src.create(fmt.Sprintf("o%d", i))
	}
	var handler cache.ResourceEventHandlerFuncs
	var mu sync.Mutex
	owned := map[int]bool{}
	h := shard.OwnershipFuncs{
		ResourceEventHandler: handler,
		AcquireFunc:          func(r shard.Range, epoch uint64) { mu.Lock(); owned[r.Index] = true; mu.Unlock() },
		ReleaseFunc:          func(r shard.Range) { mu.Lock(); delete(owned, r.Index); mu.Unlock() },
	}
	inf, stop := runOne(t, src, h, shard.WithRanges(4))
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	// HasSynced says the handlers were given every range; the last
	// OnAcquire may still be on its way to the handler.
	eventually(t, 10*time.Second, "the handler heard of 4 acquired ranges", func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(owned) != 4 {
			return fmt.Sprintf("%d acquired", len(owned))
		}
		return ""
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(owned) != 0 {
		t.Fatalf("%d ranges still owned after the member left", len(owned))
	}
}

// worker is docs/sharding.md's worker loop, dropping the keys of released
// ranges.
func worker(inf *shard.Informer, queue workqueue.TypedRateLimitingInterface[string], reconcile func(string) error) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		if inf.Released(key) {
			// Its range moved to another member, whose handlers have the
			// object: not ours to reconcile any more.
			queue.Forget(key)
			queue.Done(key)
			continue
		}
		if err := reconcile(key); err != nil {
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

func TestDocWorkerDropsReleasedKeys(t *testing.T) {
	src := newMemServer()
	for i := range 20 {
		src.create(fmt.Sprintf("o%d", i))
	}
	inf, stop := runOne(t, src, nil, shard.WithRanges(4), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	keys := inf.GetIndexer().ListKeys()
	stop() // the only member leaves: every range is released
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	for _, k := range keys {
		queue.Add(k)
	}
	queue.Add("ns0/deleted-before") // a key of an object deleted while owned: still reconciled
	queue.ShutDown()                // Get hands out what is queued, then says shutdown
	var reconciled []string
	worker(inf, queue, func(k string) error { reconciled = append(reconciled, k); return nil })
	if len(reconciled) != 1 || reconciled[0] != "ns0/deleted-before" {
		t.Fatalf("reconciled %v; want only the key that was not in a released range", reconciled)
	}
}
