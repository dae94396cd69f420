package main

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/internal/telemetry"
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
	k := newSpanKeeper(2)
	feed := func(spans []sdktrace.ReadOnlySpan) {
		for _, s := range spans {
			k.OnEnd(s)
		}
	}
	feed(deltaSpans(1, "Updated", t0, telemetry.SpanHandler)) // incomplete
	if k.Kept() != nil {
		t.Fatal("kept an incomplete delta")
	}
	feed(deltaSpans(2, "Replaced", t0, ""))
	if got := k.Kept(); len(got) != 8 || got[0].SpanContext().TraceID()[0] != 2 || k.done.Load() {
		t.Fatalf("after a complete Replaced: kept %d spans of trace %v, done %v", len(got), got, k.done.Load())
	}
	feed(deltaSpans(3, "Updated", t0, ""))
	if got := k.Kept(); len(got) != 8 || got[0].SpanContext().TraceID()[0] != 3 || !k.done.Load() {
		t.Fatalf("after a complete Updated: kept %d spans, done %v", len(got), k.done.Load())
	}
	feed(deltaSpans(4, "Updated", t0, ""))
	if got := k.Kept(); got[0].SpanContext().TraceID()[0] != 3 {
		t.Fatal("replaced the kept delta after done")
	}
}

func TestSpanKeeperForgetsOldPartialTraces(t *testing.T) {
	k := newSpanKeeper(1)
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
