package shard_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/telemetry"
)

// A member's spans and metrics: the range informers' root spans carry the
// group, member, range and epoch; each acquisition is a span; the metrics
// give the delivered ranges, objects per range, handovers and the filter
// mode.
func TestTelemetry(t *testing.T) {
	informertest.NeedsTracing(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := newMemServer()
	for i := range 20 {
		src.create(fmt.Sprintf("o%d", i))
	}
	inf, stop := runOne(t, src, cache.ResourceEventHandlerFuncs{}, shard.WithRanges(4), shard.WithMemberName("pod-a"),
		shard.WithInformerOptions(actors.WithTracerProvider(tp), actors.WithMeterProvider(mp)))
	defer stop()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	src.create("traced") // a watch event: a root span
	eventually(t, 10*time.Second, "a root span of the watch event", func() string {
		for _, s := range rec.Ended() {
			if s.Name() == telemetry.SpanReflector && attr(s.Attributes(), "actorinformer.object.name") == "traced" {
				for _, k := range []attribute.Key{shard.AttrGroup, shard.AttrMember, shard.AttrRange, shard.AttrEpoch} {
					if attr(s.Attributes(), k) == "" {
						return fmt.Sprintf("root span without %s: %v", k, s.Attributes())
					}
				}
				if attr(s.Attributes(), shard.AttrMember) != inf.Member() || attr(s.Attributes(), shard.AttrGroup) != "configmaps" {
					return fmt.Sprintf("root span of member %q group %q", attr(s.Attributes(), shard.AttrMember), attr(s.Attributes(), shard.AttrGroup))
				}
				return ""
			}
		}
		return "none yet"
	})
	acquires := 0
	for _, s := range rec.Ended() {
		if s.Name() == "shard.acquire" {
			acquires++
			if attr(s.Attributes(), shard.AttrRange) == "" || attr(s.Attributes(), shard.AttrEpoch) == "" {
				t.Errorf("acquire span without range or epoch: %v", s.Attributes())
			}
		}
	}
	if acquires != 4 {
		t.Errorf("%d shard.acquire spans, want 4", acquires)
	}
	// The reflector's span ends as the event is queued: the range's cache
	// may take it in after.
	eventually(t, 10*time.Second, "the objects metric counts the watch event's object", func() string {
		if v := gaugeSum(informertest.CollectMetrics(t, reader)["actorinformer.shard.range.objects"]); v != 21 {
			return fmt.Sprintf("actorinformer.shard.range.objects sums to %d, want 21", v)
		}
		return ""
	})
	m := informertest.CollectMetrics(t, reader)
	if v := gaugeSum(m["actorinformer.shard.ranges"]); v != 4 {
		t.Errorf("actorinformer.shard.ranges %d, want 4", v)
	}
	mode := ""
	if g, ok := m["actorinformer.shard.filter.mode"].Data.(metricdata.Gauge[int64]); ok && len(g.DataPoints) == 1 {
		v, _ := g.DataPoints[0].Attributes.Value(shard.AttrFilterMode)
		mode = v.AsString()
	}
	if mode != "client" {
		t.Errorf("filter mode metric %q, want client", mode)
	}
	if s, ok := m["actorinformer.shard.handovers"].Data.(metricdata.Sum[int64]); !ok || len(s.DataPoints) == 0 || s.DataPoints[0].Value != 4 {
		t.Errorf("actorinformer.shard.handovers: %+v, want 4 acquisitions", m["actorinformer.shard.handovers"].Data)
	}
	if v := gaugeSum(m["actorinformer.shard.filtered"]); v == 0 {
		t.Errorf("actorinformer.shard.filtered is 0; the source ignores selectors")
	}
	// The metrics carry the member's name, not its id, which changes at
	// each start and rejoin.
	named := 0
	for name, metric := range m {
		for _, set := range pointAttrs(metric) {
			if v, ok := set.Value(shard.AttrMember); ok {
				t.Errorf("%s carries the member id %s", name, v.Emit())
			}
			if _, ok := set.Value(shard.AttrGroup); !ok {
				continue
			}
			if v, _ := set.Value(shard.AttrMemberName); v.Emit() != "pod-a" {
				t.Errorf("%s of the group carries member name %q, want pod-a", name, v.Emit())
			}
			named++
		}
	}
	if named == 0 {
		t.Error("no data point carries the group")
	}
}

// pointAttrs returns the attribute sets of m's data points.
func pointAttrs(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

func attr(kvs []attribute.KeyValue, k attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// gaugeBy sums an int64 gauge's data points by the key key gives their
// attributes, leaving out those it refuses (false).
func gaugeBy[K comparable](m metricdata.Metrics, key func(attribute.Set) (K, bool)) map[K]int64 {
	out := map[K]int64{}
	if g, ok := m.Data.(metricdata.Gauge[int64]); ok {
		for _, p := range g.DataPoints {
			if k, ok := key(p.Attributes); ok {
				out[k] += p.Value
			}
		}
	}
	return out
}

func gaugeSum(m metricdata.Metrics) int64 {
	var n int64
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			n += p.Value
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			n += p.Value
		}
	}
	return n
}

// The per-range backlog: the notifications waiting for a member's
// handlers are the range informers' actorinformer.listener.backlog,
// observed per range (actorinformer.shard.range.index) and handler. A
// handler held on its first call of each range leaves the range's other
// objects waiting; let go, the backlogs drain.
func TestRangeBacklogMetric(t *testing.T) {
	informertest.NeedsTracing(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := newMemServer()
	for i := range 40 {
		src.create(fmt.Sprintf("o%d", i))
	}
	hold := make(chan struct{})
	inf, stop := runOne(t, src, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { <-hold }},
		shard.WithRanges(4), shard.WithMemberName("pod-a"), shard.WithInformerOptions(actors.WithMeterProvider(mp)))
	defer stop()
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	// byRange sums the range informers' data points of a gauge by range,
	// those without a range under -1.
	byRange := func(m metricdata.Metrics) map[int64]int64 {
		return gaugeBy(m, func(a attribute.Set) (int64, bool) {
			if v, _ := a.Value(telemetry.AttrInformer); v.AsString() != "shard.configmaps" {
				return 0, false // the member's lease informer
			}
			if v, ok := a.Value(shard.AttrRange); ok {
				return v.AsInt64(), true
			}
			return -1, true
		})
	}
	perRange := map[int64]int64{}
	src.mu.Lock()
	for _, o := range src.objs {
		r, err := inf.RangeOf(o)
		if err != nil {
			t.Fatal(err)
		}
		perRange[int64(r.Index)]++
	}
	src.mu.Unlock()
	// Each range's first object is in its handler's call, the others wait.
	eventually(t, 30*time.Second, "each range's other objects waiting for the held handler", func() string {
		got := byRange(informertest.CollectMetrics(t, reader)[telemetry.MetricListenerBacklog])
		for r, n := range perRange {
			if got[r] != n-1 && got[r] != n { // the call under way may count
				return fmt.Sprintf("backlog by range %v, want each range's objects %v less one", got, perRange)
			}
		}
		if _, ok := got[-1]; ok || len(got) != len(perRange) {
			return fmt.Sprintf("backlog by range %v: a point without a range, or a range too many", got)
		}
		return ""
	})
	close(hold)
	released = true
	eventually(t, 30*time.Second, "the backlogs drained", func() string {
		for r, n := range byRange(informertest.CollectMetrics(t, reader)[telemetry.MetricListenerBacklog]) {
			if n != 0 {
				return fmt.Sprintf("range %d: %d waiting", r, n)
			}
		}
		return ""
	})
}

// An added kind's series carry its key (actorinformer.shard.kind): the
// objects per range count both kinds' caches, and each kind's backlog is a
// series of its own, not one hiding the other under the same attributes.
func TestAddedKindMetrics(t *testing.T) {
	informertest.NeedsTracing(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cms, secrets := newMemServer(), newMemServer()
	cms.spaces, secrets.spaces = 8, 8
	for i := range 12 {
		cms.create(fmt.Sprintf("c%d", i))
	}
	for i := range 7 {
		secrets.create(fmt.Sprintf("s%d", i))
	}
	hold := make(chan struct{})
	held := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { <-hold }}
	c, prov := startCluster(newGroup(t, nil).agent)
	opts := append(testLeases(), shard.WithHashField(shard.Namespace), shard.WithRanges(4), shard.WithMemberName("pod-a"),
		shard.WithInformerOptions(actors.WithMeterProvider(mp), actors.WithLogger(slog.New(slog.DiscardHandler))))
	inf, err := shard.New(c, "configmaps", cms, &corev1.ConfigMap{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	kind, err := inf.AddKind(schema.GroupResource{Resource: "secrets"}, secrets, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []*shard.Informer{inf, kind} {
		if _, err := k.AddEventHandler(held); err != nil {
			t.Fatal(err)
		}
	}
	stop := runUntilStop(t, inf, c, prov)
	defer stop()
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	// byKind sums a gauge's data points of the range informers by kind
	// ("" for New's).
	byKind := func(m metricdata.Metrics) map[string]int64 {
		return gaugeBy(m, func(a attribute.Set) (string, bool) {
			if _, ok := a.Value(shard.AttrRange); !ok {
				return "", false // the member's lease informer
			}
			v, _ := a.Value(shard.AttrKind)
			return v.AsString(), true
		})
	}
	ranges := func(src *memServer) int64 {
		src.mu.Lock()
		defer src.mu.Unlock()
		seen := map[int]bool{}
		for _, o := range src.objs {
			r, err := inf.RangeOf(o)
			if err != nil {
				t.Fatal(err)
			}
			seen[r.Index] = true
		}
		return int64(len(seen))
	}
	cmRanges, secretRanges := ranges(cms), ranges(secrets)
	eventually(t, 30*time.Second, "each kind's objects per range and backlog", func() string {
		m := informertest.CollectMetrics(t, reader)
		if got := byKind(m["actorinformer.shard.range.objects"]); got[""] != 12 || got["secrets"] != 7 || len(got) != 2 {
			return fmt.Sprintf("objects by kind %v, want 12 ConfigMaps and 7 secrets", got)
		}
		// Each range's first object of each kind is in its handler's call,
		// which may count.
		got := byKind(m[telemetry.MetricListenerBacklog])
		if got[""] < 12-cmRanges || got[""] > 12 || got["secrets"] < 7-secretRanges || got["secrets"] > 7 || len(got) != 2 {
			return fmt.Sprintf("backlog by kind %v, want %d to 12 ConfigMaps and %d to 7 secrets", got, 12-cmRanges, 7-secretRanges)
		}
		return ""
	})
	close(hold)
	released = true
}
