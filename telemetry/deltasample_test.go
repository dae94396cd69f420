package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"
)

type samplerFunc func(DeltaInfo) bool

func (f samplerFunc) SampleDelta(d DeltaInfo) bool { return f(d) }

// TestChoose: no provider, never; a provider without a delta sampler,
// always (today's behaviour); with one, its answer, seeing the delta.
func TestChoose(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	d := DeltaInfo{Type: cache.Updated, Key: "ns/a", ResourceVersion: "3", Object: "obj"}
	var seen []DeltaInfo
	only := samplerFunc(func(d DeltaInfo) bool { seen = append(seen, d); return d.Key == "ns/a" })
	for _, c := range []struct {
		name string
		cfg  Config
		d    DeltaInfo
		want bool
	}{
		{"no provider", Config{DeltaSampler: only}, d, false},
		{"no sampler", Config{TracerProvider: tp}, d, !CompiledOut},
		{"chosen", Config{TracerProvider: tp, DeltaSampler: only}, d, !CompiledOut},
		{"not chosen", Config{TracerProvider: tp, DeltaSampler: only}, DeltaInfo{Key: "ns/b"}, false},
	} {
		if got := New(c.cfg).Choose(c.d); got != c.want {
			t.Errorf("%s: Choose = %v, want %v", c.name, got, c.want)
		}
	}
	if !CompiledOut && (len(seen) != 2 || seen[0] != d) {
		t.Errorf("the sampler saw %v, want %v then ns/b (and nothing without a provider)", seen, d)
	}
}

// TestParseTraceparent: W3C traceparent values, valid and not.
func TestParseTraceparent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		v       string
		ok      bool
		sampled bool
	}{
		{"00-" + tid + "-" + sid + "-01", true, true},
		{"00-" + tid + "-" + sid + "-00", true, false},
		{"01-" + tid + "-" + sid + "-01-future", true, true}, // later versions may append fields
		{"", false, false},
		{"garbage", false, false},
		{"00-" + tid + "-" + sid, false, false},
		{"00-" + strings.Repeat("0", 32) + "-" + sid + "-01", false, false}, // all-zero trace id
		{"00-" + tid + "-" + strings.Repeat("0", 16) + "-01", false, false}, // all-zero span id
		{"00-" + strings.ToUpper(tid) + "-" + sid + "-01", false, false},    // upper case hex
		{"ff-" + tid + "-" + sid + "-01", false, false},                     // forbidden version
		{"00-" + tid + "-" + sid + "-01-extra", false, false},               // version 00 has 4 fields
	} {
		sc, ok := ParseTraceparent(c.v)
		if ok != c.ok {
			t.Errorf("%q: ok %v, want %v", c.v, ok, c.ok)
			continue
		}
		if ok && (sc.TraceID().String() != tid || sc.SpanID().String() != sid || sc.IsSampled() != c.sampled || !sc.IsRemote()) {
			t.Errorf("%q: parsed %v", c.v, sc)
		}
	}
}

// TestWriterLink: a sampled root span links to the span context in the
// traceparent annotation, after the list link; a malformed value adds no
// link, is counted and logged at debug level; a missing or empty one is
// nothing; an unsampled delta's annotation is not read at all.
func TestWriterLink(t *testing.T) {
	if CompiledOut {
		t.Skip("tracing compiled out")
	}
	const ann = "tracing.k8s.io/traceparent"
	writer, _ := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tel := New(Config{TracerProvider: tp, MeterProvider: mp, Logger: logger, TraceparentAnnotation: ann, Informer: InformerInfo{Name: "pods"}})
	_, list := tel.StartList(context.Background(), "")
	list.End()
	rec.Reset()

	for _, c := range []struct {
		name        string
		annotations map[string]string
		list        trace.SpanContext
		want        []trace.SpanContext
	}{
		{"valid", map[string]string{ann: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, trace.SpanContext{}, []trace.SpanContext{writer}},
		{"valid after list link", map[string]string{ann: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "other": "x"}, list.SpanContext(), []trace.SpanContext{list.SpanContext(), writer}},
		{"malformed", map[string]string{ann: "00-nothex-00f067aa0ba902b7-01"}, trace.SpanContext{}, nil},
		{"malformed long", map[string]string{ann: strings.Repeat("x", 1000)}, list.SpanContext(), []trace.SpanContext{list.SpanContext()}},
		{"missing", map[string]string{"other": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, trace.SpanContext{}, nil},
		{"no annotations", nil, trace.SpanContext{}, nil},
		{"empty", map[string]string{ann: ""}, trace.SpanContext{}, nil},
	} {
		rec.Reset()
		meta := ObjectMeta{Namespace: "ns", Name: c.name, Annotations: c.annotations}
		if tel.StartDelta("Updated", meta, time.Now(), c.list) == nil {
			t.Fatalf("%s: not sampled", c.name)
		}
		var got []trace.SpanContext
		for _, l := range rec.Ended()[0].Links() {
			got = append(got, l.SpanContext)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: links %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if !got[i].Equal(c.want[i]) {
				t.Errorf("%s: link %d %v, want %v", c.name, i, got[i], c.want[i])
			}
		}
	}
	if n := tel.Metrics.Counters.TraceparentMalformed.Load(); n != 2 {
		t.Errorf("%d malformed values counted, want 2", n)
	}
	if got := malformedMetric(t, reader); got != 2 {
		t.Errorf("%s = %d, want 2", MetricTraceparentMalformed, got)
	}
	out := logs.String()
	if strings.Count(out, "level=DEBUG") != 2 || !strings.Contains(out, "name=malformed ") ||
		!strings.Contains(out, "00-nothex-00f067aa0ba902b7-01") || strings.Contains(out, strings.Repeat("x", 200)) {
		t.Errorf("debug log:\n%s", out)
	}

	// Turned off: the annotation is not read.
	off := New(Config{TracerProvider: tp, MeterProvider: mp})
	rec.Reset()
	off.StartDelta("Updated", ObjectMeta{Annotations: map[string]string{ann: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}, time.Now(), trace.SpanContext{})
	if l := rec.Ended()[0].Links(); len(l) != 0 {
		t.Errorf("annotation off: links %v", l)
	}

	// Not sampled by the provider: not parsed, so not counted.
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer func() { _ = never.Shutdown(context.Background()) }()
	unsampled := New(Config{TracerProvider: never, TraceparentAnnotation: ann})
	if unsampled.StartDelta("Updated", ObjectMeta{Annotations: map[string]string{ann: "bad"}}, time.Now(), trace.SpanContext{}) != nil {
		t.Fatal("sampled by a never-sampling provider")
	}
	if n := unsampled.Metrics.Counters.TraceparentMalformed.Load(); n != 0 {
		t.Errorf("an unsampled delta's annotation was parsed (%d counted)", n)
	}
}

func malformedMetric(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == MetricTraceparentMalformed {
				var n int64
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if v, _ := dp.Attributes.Value(AttrInformer); v.AsString() != "pods" {
						t.Errorf("data point without the informer attribute: %v", dp.Attributes)
					}
					n += dp.Value
				}
				return n
			}
		}
	}
	return 0
}
