package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestTraceFollowsDeltaToEveryHandler checks the span chain of one watch
// event: reflector.receive → fifo.queue → indexer.apply → listener.deliver →
// handler, for each of two handlers, in one trace, and that a span started
// from a context handler's ctx joins it.
func TestTraceFollowsDeltaToEveryHandler(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false), actors.WithTracerProvider(tp))
	userTracer := tp.Tracer("user")
	done := make(chan struct{}, 2)
	if _, err := inf.AddContextEventHandler(actors.ContextEventHandlerFuncs{
		AddFunc: func(ctx context.Context, obj any, _ bool) {
			if obj.(*corev1.Pod).Name == "traced" {
				_, span := userTracer.Start(ctx, "user.reconcile")
				span.End()
				done <- struct{}{}
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(obj any, _ bool) {
		if obj.(*corev1.Pod).Name == "traced" {
			done <- struct{}{}
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(pod("ns", "traced", 1))
	for i := 0; i < 2; i++ {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("handlers not called")
		}
	}
	stop() // every span has ended once Run returned

	spans := rec.Ended()
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == telemetry.SpanReflector {
			for _, a := range s.Attributes() {
				if a.Key == telemetry.AttrObjectName && a.Value.AsString() == "traced" {
					root = s
				}
			}
		}
	}
	if root == nil {
		t.Fatalf("no root span for the traced pod among %d spans", len(spans))
	}
	children := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			children[s.Parent().SpanID().String()] = append(children[s.Parent().SpanID().String()], s)
		}
	}
	one := func(parent sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
		t.Helper()
		var found []sdktrace.ReadOnlySpan
		for _, c := range children[parent.SpanContext().SpanID().String()] {
			if c.Name() == name {
				found = append(found, c)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d %q spans under %q, want 1", len(found), name, parent.Name())
		}
		return found[0]
	}
	queue := one(root, telemetry.SpanQueue)
	apply := one(queue, telemetry.SpanIndexer)
	var deliveries []sdktrace.ReadOnlySpan
	for _, c := range children[apply.SpanContext().SpanID().String()] {
		if c.Name() == telemetry.SpanListener {
			deliveries = append(deliveries, c)
		}
	}
	if len(deliveries) != 2 {
		t.Fatalf("%d listener spans, want 2", len(deliveries))
	}
	users := 0
	for _, d := range deliveries {
		h := one(d, telemetry.SpanHandler)
		for _, u := range children[h.SpanContext().SpanID().String()] {
			if u.Name() == "user.reconcile" {
				users++
			}
		}
	}
	if users != 1 {
		t.Fatalf("user span found under %d handler spans, want 1", users)
	}
	attrs := fmt.Sprint(root.Attributes())
	for _, k := range []string{"k8s.namespace.name", "actorinformer.object.uid", "actorinformer.object.resource_version", "actorinformer.delta.type"} {
		if !contains(attrs, k) {
			t.Errorf("root span lacks %s: %s", k, attrs)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// countingTP records the name of every span the pipeline asks for.
type countingTP struct {
	trace.TracerProvider
	mu    sync.Mutex
	names []string
}

type countingTracer struct {
	trace.Tracer
	tp *countingTP
}

func (c *countingTP) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return countingTracer{Tracer: c.TracerProvider.Tracer(name, opts...), tp: c}
}

func (c countingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	c.tp.mu.Lock()
	c.tp.names = append(c.tp.names, name)
	c.tp.mu.Unlock()
	return c.Tracer.Start(ctx, name, opts...)
}

// TestUnsampledDeltaGetsNoStageSpans: with a sampler that drops everything,
// the pipeline asks for each delta's root span (that is where the sampler
// decides) and for nothing downstream.
func TestUnsampledDeltaGetsNoStageSpans(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	tp := &countingTP{TracerProvider: sdk}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false), actors.WithTracerProvider(tp))
	got := make(chan struct{}, 10)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { got <- struct{}{} }}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	for i := 0; i < 5; i++ {
		src.Add(pod("ns", fmt.Sprint("p", i), i))
		<-got
	}
	stop()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	roots := 0
	for _, n := range tp.names {
		switch n {
		case telemetry.SpanReflector:
			roots++
		case telemetry.SpanList:
		default:
			t.Errorf("span %q requested for an unsampled delta", n)
		}
	}
	if roots != 5 {
		t.Errorf("%d root spans requested, want 5", roots)
	}
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("%d spans recorded with a never-sampling provider", n)
	}
}
