package ctrlruntime_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/ctrlruntime"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// TestTracingReconcilerSpan drives a Tracing's queue and reconciler as
// controller-runtime's worker does (Get, Reconcile, Done) without a
// cluster: Reconcile's ctx carries the processing span, and only during
// that processing.
func TestTracingReconcilerSpan(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions(goleak.IgnoreCurrent())...)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	tr := ctrlruntime.NewTracing(tp, nil)
	q := tr.NewQueue("c", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if got := tr.ControllerName(); got != "c" {
		t.Errorf("ControllerName %q", got)
	}
	var seen []trace.SpanContext
	r := tr.Reconciler(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		seen = append(seen, trace.SpanContextFromContext(ctx))
		return reconcile.Result{}, nil
	}))

	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}}
	q.Add(req)
	item, shutdown := q.Get()
	if shutdown || item != req {
		t.Fatalf("Get: %v %v", item, shutdown)
	}
	if _, err := r.Reconcile(context.Background(), item); err != nil {
		t.Fatal(err)
	}
	q.Done(item)
	// After Done, a Reconcile of the same request outside a processing has
	// no span.
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}

	spans := exp.GetSpans()
	if !tracingCompiled {
		if len(spans) != 0 || len(seen) != 2 || seen[0].IsValid() || seen[1].IsValid() {
			t.Errorf("tracing compiled out, yet spans %v, Reconcile saw %v", spans, seen)
		}
	} else {
		if len(spans) != 1 || spans[0].Name != aiworkqueue.SpanProcess {
			t.Fatalf("spans %v, want one %s", spans, aiworkqueue.SpanProcess)
		}
		if len(seen) != 2 || !seen[0].Equal(spans[0].SpanContext) || seen[1].IsValid() {
			t.Errorf("Reconcile saw spans %v, want %v then none", seen, spans[0].SpanContext)
		}
	}

	defer func() {
		if recover() == nil {
			t.Error("a second NewQueue did not panic")
		}
	}()
	tr.NewQueue("d", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
}
