package indexer

import (
	"strconv"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
)

const (
	benchKeys  = 10_000
	benchBatch = 256
)

// benchDeltas returns two rounds of Updated deltas over benchKeys pods, with
// different resource versions, and the first round's objects to seed with.
func benchDeltas() (seed []any, rounds [2][]fifo.Delta) {
	for r := range rounds {
		rounds[r] = make([]fifo.Delta, benchKeys)
	}
	for i := range benchKeys {
		ns := "ns" + strconv.Itoa(i%50)
		name := "pod-" + strconv.Itoa(i)
		for r := range rounds {
			p := pod(ns, name, strconv.Itoa(2+r))
			rounds[r][i] = fifo.Delta{Type: fifo.Updated, Key: ns + "/" + name, Object: p}
		}
		seed = append(seed, rounds[1][i].Object)
	}
	return seed, rounds
}

// BenchmarkApply measures the core applying updates to a 10k-object cache,
// in batches of 256 (ApplyBatch: notifications routed, Processed for the
// queue), with one subscriber. One op is one delta: ns/op and
// allocs/op are per delta. The clientgo case runs client-go's per-delta
// processDeltas path (Get, Update, resync check) on its own indexer, for
// comparison.
func BenchmarkApply(b *testing.B) {
	seed, rounds := benchDeltas()
	for _, bc := range []struct {
		name     string
		indexers cache.Indexers
	}{
		{"noIndex", nil},
		{"namespaceIndex", cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewStore(nil, bc.indexers)
			if err := s.Replace(seed, "1"); err != nil {
				b.Fatal(err)
			}
			c := NewCore(s.Writer(), Config{})
			ctr := new(counts)
			c.Step(ctr.subscribe(1))
			var batch fifo.Batch
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				round := rounds[(i/benchKeys)%2]
				off := i % benchKeys
				n := min(benchBatch, b.N-i, benchKeys-off)
				batch.Deltas = round[off : off+n]
				// A listener that keeps up (no compaction) gets the batch,
				// then the queue gets Processed.
				ctr.setBacklog(0)
				if msgs := c.Step(&batch); len(msgs) != 2 {
					b.Fatalf("%d messages, want the batch and Processed", len(msgs))
				}
				i += n
			}
		})
		b.Run(bc.name+"/clientgo", func(b *testing.B) {
			idx := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, bc.indexers)
			if err := idx.Replace(seed, "1"); err != nil {
				b.Fatal(err)
			}
			items := make([]Notification, 0, benchBatch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				round := rounds[(i/benchKeys)%2]
				off := i % benchKeys
				n := min(benchBatch, b.N-i, benchKeys-off)
				items = items[:0]
				for _, d := range round[off : off+n] {
					if old, exists, err := idx.Get(d.Object); err == nil && exists {
						_ = idx.Update(d.Object)
						items = append(items, Notification{Type: NotifyUpdate, Old: old, New: d.Object, Sync: sameResourceVersion(old, d.Object)})
					} else {
						_ = idx.Add(d.Object)
						items = append(items, Notification{Type: NotifyAdd, New: d.Object})
					}
				}
				i += n
			}
		})
	}
}

// BenchmarkStoreListKeys: the keys of a cache of 100,000 objects, read
// under its read lock, per op: what the delta queue reads of the cache
// (fifo.KnownObjects) for each relist, while the indexer may write.
func BenchmarkStoreListKeys(b *testing.B) {
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	objs := make([]any, 100000)
	for i := range objs {
		objs[i] = pod("ns"+strconv.Itoa(i%100), "p"+strconv.Itoa(i), "1")
	}
	if err := s.Replace(objs, "1"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(s.ListKeys()) != len(objs) {
			b.Fatal("keys")
		}
	}
}
