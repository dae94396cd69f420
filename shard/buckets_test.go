package shard_test

import (
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/shard"
)

// Handovers of a few objects take milliseconds: the duration histogram's
// buckets tell them apart (the SDK's default ones, 0, 5, 10, … 10000 s,
// put every one in the first bucket).
func TestHandoverDurationBuckets(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := newMemServer()
	for i := range 20 {
		src.create(fmt.Sprintf("o%d", i))
	}
	inf, stop := runOne(t, src, nil, shard.WithRanges(4), shard.WithInformerOptions(actors.WithMeterProvider(mp)))
	defer stop()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	// The last range's acquisition is recorded once its handlers are
	// attached, which may be just after HasSynced turns true.
	var p metricdata.HistogramDataPoint[float64]
	eventually(t, 10*time.Second, "the 4 acquisitions recorded", func() string {
		m := informertest.CollectMetrics(t, reader)
		h, ok := m["actorinformer.shard.handover.duration"].Data.(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 {
			return fmt.Sprintf("handover.duration: %+v", m["actorinformer.shard.handover.duration"].Data)
		}
		if p = h.DataPoints[0]; p.Count != 4 {
			return fmt.Sprintf("%d handovers recorded", p.Count)
		}
		return ""
	})
	if len(p.Bounds) != len(shard.HandoverBuckets) {
		t.Errorf("bounds %v, want %v", p.Bounds, shard.HandoverBuckets)
	}
	// An acquisition lists 5 objects from memory: milliseconds, far under
	// 2.5 s even on a loaded machine. The buckets up to 2.5 s hold them.
	if max, ok := p.Max.Value(); !ok || max >= 2.5 {
		t.Fatalf("the slowest acquisition took %v s (recorded: %v)", max, ok)
	}
	var under uint64
	for i, b := range p.Bounds {
		if b <= 2.5 {
			under += p.BucketCounts[i]
		}
	}
	if under != p.Count {
		t.Errorf("%d of %d handovers in buckets of at most 2.5 s (bounds %v, counts %v)", under, p.Count, p.Bounds, p.BucketCounts)
	}
}

// A range first served had no deliverer before: its unserved time, as
// this member sees it, is its whole acquisition, from the start of its
// list. The unserved-time histogram has its own buckets.
func TestUnservedTimeOfRangesFirstServed(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := newMemServer()
	for i := range 20 {
		src.create(fmt.Sprintf("o%d", i))
	}
	inf, stop := runOne(t, src, nil, shard.WithRanges(4), shard.WithInformerOptions(actors.WithMeterProvider(mp)))
	defer stop()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	// The last range's acquisition is recorded once its handlers are
	// attached, which may be just after HasSynced turns true.
	var hs []shard.Handover
	var p metricdata.HistogramDataPoint[float64]
	eventually(t, 10*time.Second, "the 4 acquisitions recorded", func() string {
		m := informertest.CollectMetrics(t, reader)
		u, ok := m["actorinformer.shard.range.unserved"].Data.(metricdata.Histogram[float64])
		switch hs = inf.Status().Handovers; {
		case !ok || len(u.DataPoints) != 1:
			return fmt.Sprintf("range.unserved: %+v", m["actorinformer.shard.range.unserved"].Data)
		case len(hs) != 4 || u.DataPoints[0].Count != 4:
			return fmt.Sprintf("%d handovers, %d unserved times", len(hs), u.DataPoints[0].Count)
		}
		p = u.DataPoints[0]
		return ""
	})
	for _, h := range hs {
		if h.From != "" || h.Unserved <= 0 || h.Unserved != h.Duration {
			t.Errorf("range %v first served: from %q, unserved %v, took %v; want no previous deliverer and unserved = took", h.Range, h.From, h.Unserved, h.Duration)
		}
	}
	if len(p.Bounds) != len(shard.UnservedBuckets) || p.Bounds[0] != shard.UnservedBuckets[0] {
		t.Errorf("range.unserved: bounds %v; want %v", p.Bounds, shard.UnservedBuckets)
	}
}
