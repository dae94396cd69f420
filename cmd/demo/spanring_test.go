package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/telemetry"
)

// TestSpanRingIsBounded checks that the ring keeps the last spans only,
// forgets a trace with its last span, and groups spans by trace.
func TestSpanRingIsBounded(t *testing.T) {
	ring := newSpanRing(10, nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ring))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")
	var ids []trace.TraceID
	for range 8 { // 8 traces of 2 spans: the first 3 are gone
		ctx, root := tr.Start(context.Background(), telemetry.SpanReflector)
		_, child := tr.Start(ctx, telemetry.SpanQueue)
		child.End()
		root.End()
		ids = append(ids, root.SpanContext().TraceID())
	}
	ring.mu.Lock()
	n := len(ring.traces)
	ring.mu.Unlock()
	if n != 5 {
		t.Errorf("%d traces kept, want 5", n)
	}
	if _, ok := ring.get(ids[2]); ok {
		t.Errorf("the third trace is still there")
	}
	got, ok := ring.get(ids[7])
	if !ok || len(got.Spans) != 2 || got.Root != telemetry.SpanReflector || got.Stages != 2 {
		t.Errorf("last trace: %+v", got)
	}
	if got.Spans[0].Stage != "reflector" || got.Spans[1].Stage != "fifo" || got.Spans[1].ParentID != got.Spans[0].SpanID {
		t.Errorf("spans: %+v", got.Spans)
	}
	if l := ring.list("recent", 3); len(l) != 3 || l[0].TraceID != ids[7].String() {
		t.Errorf("recent: %d traces, first %v", len(l), l)
	}
}

// TestSpanRingFoldsTheProcessing checks that a processing trace whose root
// links into a delta's trace is shown within it, not apart.
func TestSpanRingFoldsTheProcessing(t *testing.T) {
	ring := newSpanRing(100, nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ring))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")
	ctx, root := tr.Start(context.Background(), telemetry.SpanReflector)
	_, h := tr.Start(ctx, telemetry.SpanHandler, trace.WithAttributes(telemetry.AttrHandler.String("controller")))
	h.End()
	root.End()
	_, p := tr.Start(context.Background(), "workqueue.process", trace.WithLinks(trace.Link{SpanContext: h.SpanContext()}))
	p.End()
	l := ring.list("recent", 10)
	if len(l) != 1 || l[0].TraceID != root.SpanContext().TraceID().String() || len(l[0].Spans) != 3 {
		t.Fatalf("%+v", l)
	}
	stages := fmt.Sprint(l[0].Spans[0].Stage, " ", l[0].Spans[1].Stage, " ", l[0].Spans[2].Stage)
	if stages != "reflector controller workqueue" {
		t.Errorf("stages %s", stages)
	}
}

// TestKeyWatch checks the key watch's bound, its deltas and unwatching.
func TestKeyWatch(t *testing.T) {
	k := newKeyWatch()
	defer k.close()
	now := time.Now()
	for i := range maxWatchedKey {
		if _, _, err := k.watch(fmt.Sprintf("ns/p%d", i), now); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := k.watch("ns/one-too-many", now); !errors.Is(err, errTooManyKeys) {
		t.Errorf("watching one key too many: %v", err)
	}
	if !k.sampler.SampleDelta(telemetry.DeltaInfo{Key: "ns/p3"}) || k.sampler.SampleDelta(telemetry.DeltaInfo{Key: "ns/other"}) {
		t.Errorf("sampler keys %v", k.sampler.Keys())
	}
	ring := newSpanRing(100, k)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ring))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	for range maxKeyDeltas + 5 {
		_, s := tp.Tracer("test").Start(context.Background(), telemetry.SpanReflector, trace.WithAttributes(
			telemetry.AttrNamespace.String("ns"), telemetry.AttrObjectName.String("p3"),
			telemetry.AttrDeltaType.String("Updated"), telemetry.AttrResourceVersion.String("7")))
		s.End()
	}
	_, deltas, err := k.watch("ns/p3", now)
	if err != nil || len(deltas) != maxKeyDeltas || deltas[0].Type != "Updated" || deltas[0].RV != "7" {
		t.Errorf("%d deltas, first %+v, err %v", len(deltas), deltas[0], err)
	}
	if !k.unwatch("ns/p3") || k.unwatch("ns/p3") || k.sampler.SampleDelta(telemetry.DeltaInfo{Key: "ns/p3"}) {
		t.Errorf("unwatch")
	}
}
