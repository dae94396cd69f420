//go:build !race

// Two protoactor cluster members in one process: not under -race (see
// cluster_test.go). hack/test.sh runs TestMembers* without it.

package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// A member's metric series of a range it released are dropped: once a
// second member has taken ranges over, no series of the first names a
// range it no longer delivers. The counters and histograms of its range
// informers carry no range (their series would stay for the life of the
// MeterProvider); the gauges do, and stop with the range.
func TestMembersDropReleasedRangeSeries(t *testing.T) {
	src := newMemServer()
	for i := range 200 {
		src.create(fmt.Sprintf("o%d", i))
	}
	g := newGroup(t, src, shard.WithRanges(8))
	defer g.stopAll()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m1 := g.join(shard.WithInformerOptions(actors.WithMeterProvider(mp)))
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), m1.inf.HasSynced) {
		t.Fatal("m1 not synced")
	}
	for _, k := range src.keys()[:50] {
		src.update(k)
	}
	eventually(t, 30*time.Second, "m1 settled alone", g.settled)
	before := collectSeries(t, reader)
	t.Logf("m1 alone, 8 ranges: %d series (%d in the Prometheus format), %d naming a range", before.points, before.prom, len(before.byRange))

	g.join()
	eventually(t, 60*time.Second, "two members settled", g.settled)
	delivered := map[string]bool{}
	for _, r := range m1.inf.Ranges() {
		delivered[strconv.Itoa(r.Index)] = true
	}
	if len(delivered) == 8 {
		t.Fatal("m1 released no range")
	}
	// A released range's informer stops after the release (its Run
	// returns at its watch's end): its series go then.
	var after seriesCount
	eventually(t, 10*time.Second, "no series of a range m1 released", func() string {
		after = collectSeries(t, reader)
		var stale []string
		for r, names := range after.byRange {
			if !delivered[r] {
				stale = append(stale, fmt.Sprintf("range %s: %v", r, names))
			}
		}
		sort.Strings(stale)
		if len(stale) > 0 {
			return fmt.Sprintf("series of ranges m1 released are still exported:\n%s", stale)
		}
		return ""
	})
	t.Logf("m1 with %d ranges after the handover: %d series (%d in the Prometheus format), %d naming a range", len(delivered), after.points, after.prom, len(after.byRange))
}

type seriesCount struct {
	points, prom int
	// byRange: the metrics with a series naming each range.
	byRange map[string][]string
}

// collectSeries counts the data points of one collection, the lines the
// Prometheus format makes of them (a histogram: its buckets, +Inf, sum
// and count), and the metrics that name each range.
func collectSeries(t *testing.T, reader *sdkmetric.ManualReader) seriesCount {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := seriesCount{byRange: map[string][]string{}}
	note := func(name string, attrs attribute.Set) {
		if v, ok := attrs.Value(shard.AttrRange); ok {
			r := v.Emit()
			if !slices.Contains(out.byRange[r], name) {
				out.byRange[r] = append(out.byRange[r], name)
			}
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out.points++
					out.prom++
					note(m.Name, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out.points++
					out.prom++
					note(m.Name, p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out.points++
					out.prom += len(p.Bounds) + 3
					note(m.Name, p.Attributes)
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}
