package reflector

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// newMeteredHarness is newHarness with an SDK MeterProvider read by the
// returned reader.
func newMeteredHarness(t *testing.T) (*harness, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel := telemetry.New(telemetry.Config{MeterProvider: mp, Informer: telemetry.InformerInfo{Name: "pods"}})
	h := newHarness(t, func(c *Config) { c.Telemetry = tel })
	h.tel = tel
	return h, reader
}

// TestMachineWatchRestartReasonsAndListDurations drives a Machine through
// every reason a watch restarts for, timing its lists on the fake clock.
func TestMachineWatchRestartReasonsAndListDurations(t *testing.T) {
	informertest.NeedsTracing(t)
	h, reader := newMeteredHarness(t)

	// The initial list takes 3 s; its watch is the initial one.
	l := h.expectList(h.m.Start(), "0", 500)
	h.clk.Step(3 * time.Second)
	w := h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("10", pod("a", "5"))}), "10")

	// Closed by the server 10 s in, before its 300 s timeout.
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("b", "11"))}, time.Time{})
	h.clk.Step(10 * time.Second)
	w = h.expectWatch(h.m.WatchEnded(w.Gen), "11")

	// Closed at its timeout.
	h.clk.Step(300 * time.Second)
	w = h.expectWatch(h.m.WatchEnded(w.Gen), "11")

	// 410 Expired: relist (2 s) after the backoff, then watch.
	h.clk.Step(time.Minute)
	e := h.m.WatchEvents(w.Gen, []watch.Event{errEvent(apierrors.NewResourceExpired("too old"))}, time.Time{})
	l = h.expectList(h.m.BackoffElapsed(h.expectWait(e, -1).Gen), "11", 0)
	h.clk.Step(2 * time.Second)
	w = h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("20", pod("a", "5"))}), "20")

	// The watch call fails: relist (5 s), then watch.
	e = h.m.WatchFailed(w.Gen, errors.New("boom"))
	l = h.expectList(h.m.BackoffElapsed(h.expectWait(e, -1).Gen), "20", 0)
	h.clk.Step(5 * time.Second)
	h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("30", pod("a", "5"))}), "30")

	got := informertest.CollectMetrics(t, reader)
	sum, ok := got[telemetry.MetricWatchRestarts].Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T", telemetry.MetricWatchRestarts, got[telemetry.MetricWatchRestarts].Data)
	}
	restarts := map[string]int64{}
	for _, dp := range sum.DataPoints {
		v, _ := dp.Attributes.Value(telemetry.AttrReason)
		restarts[v.AsString()] += dp.Value
	}
	want := map[string]int64{RestartInitial: 1, RestartClosed: 1, RestartTimeout: 1, RestartExpired: 1, RestartError: 1}
	if len(restarts) != len(want) {
		t.Errorf("watch restarts by reason %v, want %v", restarts, want)
	}
	for r, n := range want {
		if restarts[r] != n {
			t.Errorf("watch restarts by reason %v, want %v", restarts, want)
			break
		}
	}

	hist, ok := got[telemetry.MetricListDuration].Data.(metricdata.Histogram[float64])
	if !ok || got[telemetry.MetricListDuration].Unit != "s" {
		t.Fatalf("%s: %T unit %q", telemetry.MetricListDuration, got[telemetry.MetricListDuration].Data, got[telemetry.MetricListDuration].Unit)
	}
	lists := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range hist.DataPoints {
		v, _ := dp.Attributes.Value(telemetry.AttrListKind)
		lists[v.AsString()] = dp
		if n, _ := dp.Attributes.Value(telemetry.AttrInformer); n.AsString() != "pods" {
			t.Errorf("list duration without the informer attribute: %v", dp.Attributes.ToSlice())
		}
	}
	if dp := lists["initial"]; dp.Count != 1 || dp.Sum != 3 {
		t.Errorf("initial list: count %d sum %gs, want 1 list of 3s", dp.Count, dp.Sum)
	}
	if dp := lists["relist"]; dp.Count != 2 || dp.Sum != 7 {
		t.Errorf("relists: count %d sum %gs, want 2 lists of 2s and 5s", dp.Count, dp.Sum)
	}
	if len(lists) != 2 {
		t.Errorf("list duration kinds %v", lists)
	}
}

// TestMachineStampsDeltas checks that deltas carry their batch's receive
// time when metrics are on, and nothing otherwise.
func TestMachineStampsDeltas(t *testing.T) {
	informertest.NeedsTracing(t)
	at := time.Now()
	for _, metered := range []bool{false, true} {
		h := newHarness(t, nil)
		if metered {
			h, _ = newMeteredHarness(t)
		}
		l := h.expectList(h.m.Start(), "0", 500)
		e := h.m.ListDone(l.Gen, ListResult{List: podList("10", pod("a", "5")), ReceivedAt: at})
		w := h.expectWatch(e, "10")
		listed := e.replace().Items[0].Received
		e = h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("b", "11"))}, at.Add(time.Second))
		watched := e.deltas().Items[0].Received
		if !metered {
			if !listed.IsZero() || !watched.IsZero() {
				t.Errorf("deltas stamped without metrics: %v %v", listed, watched)
			}
			continue
		}
		if got := listed.Age(at.Add(time.Minute)); got != time.Minute {
			t.Errorf("list item's age a minute after the list returned: %v", got)
		}
		if got := watched.Age(at.Add(time.Minute)); got != time.Minute-time.Second {
			t.Errorf("watch delta's age: %v, want 59s", got)
		}
		// A batch without a receive time is not stamped.
		e = h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("c", "12"))}, time.Time{})
		if s := e.deltas().Items[0].Received; !s.IsZero() {
			t.Errorf("delta of an unstamped batch stamped: %v", s)
		}
	}
}

// TestMachineWatchListDuration times a WatchList sync from the stream's
// request to its initial-events-end bookmark.
func TestMachineWatchListDuration(t *testing.T) {
	informertest.NeedsTracing(t)
	h, reader := newMeteredHarness(t)
	h.m.sync.status.UseWatchList = true
	w := h.expectWatchList(h.m.Start(), "")
	h.clk.Step(4 * time.Second)
	e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "5")), ev(watch.Bookmark, bookmark("6", true))}, time.Now())
	if e.replace() == nil || len(e.replace().Items) != 1 || e.replace().Items[0].Received.IsZero() {
		t.Fatalf("no stamped Replace: %s", describe(e))
	}
	hist, _ := informertest.CollectMetrics(t, reader)[telemetry.MetricListDuration].Data.(metricdata.Histogram[float64])
	if len(hist.DataPoints) != 1 {
		t.Fatalf("list durations: %+v", hist.DataPoints)
	}
	dp := hist.DataPoints[0]
	if k, _ := dp.Attributes.Value(telemetry.AttrListKind); k.AsString() != "initial" || dp.Count != 1 || dp.Sum != 4 {
		t.Errorf("list duration %s: count %d sum %gs, want one initial sync of 4s", k.AsString(), dp.Count, dp.Sum)
	}
}
