package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestCompiledOut: built with -tags actorinformer_notrace, real providers
// are ignored; otherwise they are used. Run under both builds.
func TestCompiledOut(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tel := New(Config{TracerProvider: tp, MeterProvider: mp})
	if tel.Tracing() == CompiledOut || tel.Metrics.Enabled() == CompiledOut {
		t.Fatalf("CompiledOut %v: Tracing %v, metrics enabled %v", CompiledOut, tel.Tracing(), tel.Metrics.Enabled())
	}
	dt := tel.StartDelta("Added", ObjectMeta{Name: "a"}, time.Now(), trace.SpanContext{})
	if (dt == nil) != CompiledOut || (len(rec.Ended()) == 0) != CompiledOut {
		t.Fatalf("CompiledOut %v: trace %v, %d spans", CompiledOut, dt, len(rec.Ended()))
	}
	tel.Metrics.Queued(3)
	if tel.Metrics.QueueIn.Load() != 3 {
		t.Fatal("the always-on counters must count in both builds")
	}
}

// TestStartDelta: the root span is a consumer root with the delta's
// attributes, starting at start; deltas that share start but not the list
// link each get their own link (the start options are reused).
func TestStartDelta(t *testing.T) {
	if CompiledOut {
		t.Skip("tracing compiled out")
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel := New(Config{TracerProvider: tp, Informer: InformerInfo{Name: "pods", Version: "v1", Resource: "pods"}})
	_, l1 := tel.StartList(context.Background(), "5")
	_, l2 := tel.StartList(context.Background(), "9")
	l1.End()
	l2.End()
	rec.Reset()
	start := time.Unix(100, 0)
	meta := ObjectMeta{Namespace: "ns", Name: "a", UID: "u", ResourceVersion: "7"}
	links := []trace.SpanContext{l1.SpanContext(), l1.SpanContext(), {}, l2.SpanContext(), {}}
	var traces []*DeltaTrace
	for _, l := range links {
		traces = append(traces, tel.StartDelta("Replaced", meta, start, l))
	}
	spans := rec.Ended()
	if len(spans) != len(links) {
		t.Fatalf("%d spans", len(spans))
	}
	want := map[attribute.Key]string{
		AttrInformer: "pods", AttrAPIGroup: "", AttrAPIVersion: "v1", AttrAPIResource: "pods", AttrDeltaType: "Replaced",
		AttrNamespace: "ns", AttrObjectName: "a", AttrObjectUID: "u", AttrResourceVersion: "7",
	}
	for i, s := range spans {
		if s.Name() != SpanReflector || s.Parent().IsValid() || s.SpanKind() != trace.SpanKindConsumer || !s.StartTime().Equal(start) {
			t.Errorf("span %d: %q parent %v kind %v start %v", i, s.Name(), s.Parent(), s.SpanKind(), s.StartTime())
		}
		got := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value.Emit()
		}
		if len(got) != len(want) {
			t.Errorf("span %d attributes %v", i, got)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %d: %s = %q, want %q", i, k, got[k], v)
			}
		}
		switch l := links[i]; {
		case !l.IsValid() && len(s.Links()) != 0,
			l.IsValid() && (len(s.Links()) != 1 || !s.Links()[0].SpanContext.Equal(l)):
			t.Errorf("span %d links %v, want %v", i, s.Links(), l)
		}
		if traces[i] == nil || traces[i].Parent.SpanID() != s.SpanContext().SpanID() || !traces[i].Since.Equal(s.EndTime()) {
			t.Errorf("span %d: trace %+v", i, traces[i])
		}
	}

	// Deltas with a start each, or two in a row, keep their own link.
	rec.Reset()
	links = []trace.SpanContext{l1.SpanContext(), {}, {}, l2.SpanContext(), l2.SpanContext(), l1.SpanContext(), {}}
	starts := []int64{1, 2, 2, 3, 3, 3, 4}
	for i, l := range links {
		tel.StartDelta("Replaced", meta, time.Unix(starts[i], 0), l)
	}
	for i, s := range rec.Ended() {
		switch l := links[i]; {
		case !s.StartTime().Equal(time.Unix(starts[i], 0)),
			!l.IsValid() && len(s.Links()) != 0,
			l.IsValid() && (len(s.Links()) != 1 || !s.Links()[0].SpanContext.Equal(l)):
			t.Errorf("delta %d: start %v links %v, want %v", i, s.StartTime(), s.Links(), l)
		}
	}

	// The next stage is a child of the root, in its trace.
	rec.Reset()
	next := tel.Stage(traces[0], SpanQueue, start, start.Add(time.Second), AttrQueueDepth.Int(3))
	q := rec.Ended()[0]
	if q.Parent().SpanID() != spans[0].SpanContext().SpanID() || q.SpanContext().TraceID() != spans[0].SpanContext().TraceID() ||
		len(q.Attributes()) != 1 || next.Parent.SpanID() != q.SpanContext().SpanID() {
		t.Fatalf("stage span %v parent %v attributes %v", q.Name(), q.Parent(), q.Attributes())
	}
	// A DeltaTrace made by hand (no context kept) works too.
	tel.Stage(&DeltaTrace{Parent: next.Parent}, SpanIndexer, start, start)
	if ix := rec.Ended()[1]; ix.Parent().SpanID() != next.Parent.SpanID() {
		t.Fatalf("hand-made trace: parent %v", ix.Parent())
	}
}

// BenchmarkStartDelta is the root span's cost per delta: at 1 % sampling it
// is almost all the cost of the unsampled deltas.
func BenchmarkStartDelta(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler
		lone    bool // every delta has a start of its own (watch batches of one)
	}{
		{"never", sdktrace.NeverSample(), false},
		{"ratio-1pct", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)), false},
		{"ratio-1pct-lone", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)), true},
		{"always", sdktrace.AlwaysSample(), false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(bc.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tel := New(Config{TracerProvider: tp})
			meta := ObjectMeta{Namespace: "ns", Name: "name", UID: "uid", ResourceVersion: "12"}
			at := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if bc.lone {
					at = at.Add(time.Microsecond)
				}
				tel.StartDelta("Updated", meta, at, trace.SpanContext{})
			}
		})
	}
}

// BenchmarkSDKStartFloor is the SDK's own cost of deciding that a root span
// is not sampled, with nothing of ours around it: the floor of what tracing
// at 1 % costs each unsampled delta, whatever the pipeline does.
func BenchmarkSDKStartFloor(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer(ScopeName)
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(context.Background(), SpanReflector)
			span.End()
		}
	})
	b.Run("timestamp", func(b *testing.B) {
		at := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			at = at.Add(time.Microsecond)
			_, span := tracer.Start(context.Background(), SpanReflector, trace.WithTimestamp(at))
			span.End()
		}
	})
}
