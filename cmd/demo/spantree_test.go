package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/telemetry"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// deltaSpans builds the spans of one delta delivered to two handlers, as
// the informer and the tracing handler record them, starting at t0; skip
// leaves out the spans with that name.
func deltaSpans(traceID byte, deltaType string, t0 time.Time, skip string) []sdktrace.ReadOnlySpan {
	tid := trace.TraceID{traceID}
	var next byte
	type node struct {
		name   string
		parent int // index into nodes, -1 for the root
		start  time.Duration
		dur    time.Duration
		attrs  []attribute.KeyValue
		status codes.Code
	}
	nodes := []node{
		{telemetry.SpanReflector, -1, 0, 12 * time.Microsecond, []attribute.KeyValue{
			telemetry.AttrDeltaType.String(deltaType), telemetry.AttrNamespace.String("demo-1"),
			telemetry.AttrObjectName.String("pod-000007"), telemetry.AttrResourceVersion.String("42")}, codes.Unset},
		{telemetry.SpanQueue, 0, 12 * time.Microsecond, 200 * time.Microsecond, []attribute.KeyValue{telemetry.AttrQueueDepth.Int(3)}, codes.Unset},
		{telemetry.SpanIndexer, 1, 212 * time.Microsecond, 5 * time.Microsecond, []attribute.KeyValue{telemetry.AttrBatchSize.Int(4)}, codes.Unset},
		{telemetry.SpanListener, 2, 217 * time.Microsecond, 30 * time.Microsecond, []attribute.KeyValue{telemetry.AttrHandler.String("example.com/demo.tracer")}, codes.Unset},
		{telemetry.SpanHandler, 3, 247 * time.Microsecond, 20 * time.Microsecond, []attribute.KeyValue{telemetry.AttrHandler.String("example.com/demo.tracer")}, codes.Unset},
		{userSpanName, 4, 250 * time.Microsecond, 10 * time.Microsecond, []attribute.KeyValue{attribute.String("demo.event", "update"), attribute.String("demo.key", "demo-1/pod-000007")}, codes.Unset},
		{telemetry.SpanListener, 2, 218 * time.Microsecond, 2 * time.Millisecond, []attribute.KeyValue{telemetry.AttrHandler.String("example.com/demo.panicker")}, codes.Unset},
		{telemetry.SpanHandler, 6, 2218 * time.Microsecond, 40 * time.Microsecond, []attribute.KeyValue{telemetry.AttrHandler.String("example.com/demo.panicker")}, codes.Error},
	}
	ids := make([]trace.SpanID, len(nodes))
	var out []sdktrace.ReadOnlySpan
	for i, n := range nodes {
		next++
		ids[i] = trace.SpanID{traceID, next}
		if n.name == skip {
			continue
		}
		stub := tracetest.SpanStub{
			Name:        n.name,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: ids[i], TraceFlags: trace.FlagsSampled}),
			StartTime:   t0.Add(n.start),
			EndTime:     t0.Add(n.start + n.dur),
			Attributes:  n.attrs,
		}
		if n.parent >= 0 {
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: ids[n.parent], TraceFlags: trace.FlagsSampled})
		}
		if n.status == codes.Error {
			stub.Status = sdktrace.Status{Code: codes.Error, Description: "handler panicked"}
		}
		out = append(out, stub.Snapshot())
	}
	return out
}

func TestSpanKeeperPrefersACompleteUpdate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := newSpanKeeper(2, false)
	feed := func(spans []sdktrace.ReadOnlySpan) {
		for _, s := range spans {
			k.OnEnd(s)
		}
	}
	feed(deltaSpans(1, "Updated", t0, telemetry.SpanHandler)) // incomplete
	if got, _ := k.Kept(); got != nil {
		t.Fatal("kept an incomplete delta")
	}
	feed(deltaSpans(2, "Replaced", t0, ""))
	if got, _ := k.Kept(); len(got) != 8 || got[0].SpanContext().TraceID()[0] != 2 || k.done.Load() {
		t.Fatalf("after a complete Replaced: kept %d spans of trace %v, done %v", len(got), got, k.done.Load())
	}
	feed(deltaSpans(3, "Updated", t0, ""))
	if got, _ := k.Kept(); len(got) != 8 || got[0].SpanContext().TraceID()[0] != 3 || !k.done.Load() {
		t.Fatalf("after a complete Updated: kept %d spans, done %v", len(got), k.done.Load())
	}
	feed(deltaSpans(4, "Updated", t0, ""))
	if got, _ := k.Kept(); got[0].SpanContext().TraceID()[0] != 3 {
		t.Fatal("replaced the kept delta after done")
	}
}

func TestSpanKeeperForgetsOldPartialTraces(t *testing.T) {
	k := newSpanKeeper(1, false)
	for i := range 3 * maxPartialTraces {
		stub := tracetest.SpanStub{Name: telemetry.SpanList, SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{byte(i), byte(i >> 8), 1}, SpanID: trace.SpanID{1}})}
		k.OnEnd(stub.Snapshot())
	}
	if n := len(k.partial); n > maxPartialTraces {
		t.Fatalf("%d partial traces kept, limit %d", n, maxPartialTraces)
	}
}

func TestWriteSpanTree(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spans := deltaSpans(9, "Updated", t0, "")
	// Out of order, as spans end.
	spans[1], spans[6] = spans[6], spans[1]
	var b strings.Builder
	writeSpanTree(&b, spans)
	want := `  span                              start  duration
  reflector.receive                  +0µs      12µs  Updated demo-1/pod-000007 rv=42
  └─ fifo.queue                     +12µs     200µs  depth=3
     └─ indexer.apply              +212µs       5µs  batch=4
        ├─ listener.deliver        +217µs      30µs  handler=demo.tracer
        │  └─ handler              +247µs      20µs  handler=demo.tracer
        │     └─ demo.reconcile    +250µs      10µs  update demo-1/pod-000007
        └─ listener.deliver        +218µs    2.00ms  handler=demo.panicker
           └─ handler             +2.22ms      40µs  handler=demo.panicker ERROR: handler panicked
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// processSpans builds the trace of one processing of a key by the
// controller's worker: a workqueue.process span linked to the delta's
// handler span (the first handler's: span ID {deltaTrace, 5}) and the
// reconcile span under it, starting at t0.
func processSpans(traceID, deltaTrace byte, t0 time.Time) []sdktrace.ReadOnlySpan {
	tid := trace.TraceID{traceID}
	sc := func(id byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{traceID, id}, TraceFlags: trace.FlagsSampled})
	}
	handler := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{deltaTrace}, SpanID: trace.SpanID{deltaTrace, 5}, TraceFlags: trace.FlagsSampled})
	reconcile := tracetest.SpanStub{
		Name: userSpanName, SpanContext: sc(2), Parent: sc(1),
		StartTime: t0.Add(300 * time.Microsecond), EndTime: t0.Add(310 * time.Microsecond),
		Attributes: []attribute.KeyValue{attribute.String("demo.key", "demo-1/pod-000007"),
			attribute.String("demo.result", "exists"), attribute.String("demo.rv", "42")},
	}
	process := tracetest.SpanStub{
		Name: aiworkqueue.SpanProcess, SpanContext: sc(1),
		StartTime: t0.Add(280 * time.Microsecond), EndTime: t0.Add(320 * time.Microsecond),
		Links: []sdktrace.Link{{SpanContext: handler}},
		Attributes: []attribute.KeyValue{aiworkqueue.AttrItem.String("demo-1/pod-000007"), aiworkqueue.AttrAdds.Int(1),
			aiworkqueue.AttrWait.Float64(15e-6), aiworkqueue.AttrRequeues.Int(0)},
	}
	// The reconcile span ends before the processing's, as in the worker.
	return []sdktrace.ReadOnlySpan{reconcile.Snapshot(), process.Snapshot()}
}

// With a controller, the keeper keeps a complete delta together with the
// processing linked to its handler span, whichever of them ends first.
func TestSpanKeeperKeepsTheLinkedProcessing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := newSpanKeeper(2, true)
	feed := func(spans []sdktrace.ReadOnlySpan) {
		for _, s := range spans {
			k.OnEnd(s)
		}
	}
	// A delta without its processing, and a processing without its delta.
	feed(deltaSpans(1, "Updated", t0, userSpanName))
	feed(processSpans(21, 9, t0))
	if d, p := k.Kept(); d != nil || p != nil {
		t.Fatalf("kept %d delta and %d process spans without a pair", len(d), len(p))
	}
	// A Replaced delta whose processing ends first: kept, not done.
	feed(processSpans(22, 2, t0))
	feed(deltaSpans(2, "Replaced", t0, userSpanName))
	d, p := k.Kept()
	if len(d) != 7 || d[0].SpanContext().TraceID()[0] != 2 || len(p) != 2 || p[0].SpanContext().TraceID()[0] != 22 || k.done.Load() {
		t.Fatalf("after a Replaced delta and its processing: kept %d spans of trace %v, %d of %v, done %v", len(d), d, len(p), p, k.done.Load())
	}
	// The processing of the first, Updated, delta ends: kept, done.
	feed(processSpans(23, 1, t0))
	d, p = k.Kept()
	if len(d) != 7 || d[0].SpanContext().TraceID()[0] != 1 || len(p) != 2 || p[0].SpanContext().TraceID()[0] != 23 || !k.done.Load() {
		t.Fatalf("after the Updated delta's processing: kept %d spans of trace %v, %d of %v, done %v", len(d), d, len(p), p, k.done.Load())
	}
}

func TestWriteSpanTreeWithProcessing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	delta := deltaSpans(9, "Updated", t0, userSpanName)
	var b strings.Builder
	writeSpanTree(&b, delta, processSpans(10, 9, t0))
	want := `  span                          start  duration
  reflector.receive              +0µs      12µs  Updated demo-1/pod-000007 rv=42
  └─ fifo.queue                 +12µs     200µs  depth=3
     └─ indexer.apply          +212µs       5µs  batch=4
        ├─ listener.deliver    +217µs      30µs  handler=demo.tracer
        │  └─ handler          +247µs      20µs  handler=demo.tracer
        └─ listener.deliver    +218µs    2.00ms  handler=demo.panicker
           └─ handler         +2.22ms      40µs  handler=demo.panicker ERROR: handler panicked
  workqueue.process            +280µs      40µs  item=demo-1/pod-000007 adds=1 wait=15µs requeues=0
  │  linked from handler handler=demo.tracer in trace 09000000000000000000000000000000
  └─ demo.reconcile            +300µs      10µs  demo-1/pod-000007 exists rv=42
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// The demo's default sampler samples a processing linked to a sampled
// delta's span, and leaves the other roots to its base sampler.
func TestFollowLinksSampler(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(followLinks{sdktrace.NeverSample()})))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}})
	for _, tc := range []struct {
		name  string
		links []trace.Link
		want  bool
	}{
		{"no link", nil, false},
		{"unsampled link", []trace.Link{{SpanContext: unsampled}}, false},
		{"a sampled link", []trace.Link{{SpanContext: unsampled}, {SpanContext: sampled}}, true},
	} {
		_, span := tr.Start(context.Background(), aiworkqueue.SpanProcess, trace.WithLinks(tc.links...))
		if got := span.SpanContext().IsSampled(); got != tc.want {
			t.Errorf("%s: sampled %v, want %v", tc.name, got, tc.want)
		}
		span.End()
	}
}
