package e2e

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestWriterTraceLink: a writer puts its span's traceparent into the
// tracing.k8s.io/traceparent annotation of the ConfigMap it creates, then
// updates, through the real apiserver; our informer's root span of each
// delta links to the span that wrote it.
func TestWriterTraceLink(t *testing.T) {
	informertest.NeedsTracing(t)
	c := startCluster(t, testcluster.Options{WatchCache: true})
	cs := clientFor(t, c.Config())
	const ns = "writer-link"
	createNamespaces(t, cs, ns)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	inf := actors.NewSharedIndexInformer(listWatch(cs.CoreV1().ConfigMaps(ns)), &corev1.ConfigMap{}, 0, nil,
		actors.WithTracerProvider(tp), actors.WithName("configmaps"))
	seen := make(chan string, 10)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen <- obj.(*corev1.ConfigMap).ResourceVersion },
		UpdateFunc: func(_, obj any) { seen <- obj.(*corev1.ConfigMap).ResourceVersion },
	}); err != nil {
		t.Fatal(err)
	}
	runInformers(t, inf)
	waitSynced(t, 30*time.Second, inf.HasSynced)

	// The writer: a span of its own (another provider, as in another
	// process), whose context goes into the annotation.
	writerTP := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = writerTP.Shutdown(context.Background()) })
	write := func(name string, do func(annotation string) (string, error)) (trace.SpanContext, string) {
		t.Helper()
		ctx, span := writerTP.Tracer("writer").Start(t.Context(), name)
		defer span.End()
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		rv, err := do(carrier.Get("traceparent"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return span.SpanContext(), rv
	}
	created, createdRV := write("create", func(parent string) (string, error) {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "traced", Annotations: map[string]string{actors.DefaultTraceparentAnnotation: parent}},
			Data:       map[string]string{"gen": "1"},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	})
	updated, updatedRV := write("update", func(parent string) (string, error) {
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "traced", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		cm.Annotations[actors.DefaultTraceparentAnnotation] = parent
		cm.Data["gen"] = "2"
		cm, err = cs.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{})
		if err != nil {
			return "", err
		}
		return cm.ResourceVersion, nil
	})
	for _, want := range []string{createdRV, updatedRV} {
		select {
		case rv := <-seen:
			if rv != want {
				t.Fatalf("handler saw resource version %s, want %s", rv, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("handler did not see resource version %s", want)
		}
	}

	// The root span has ended before the handler ran (the queue's span
	// starts where it ends), and the syncer exported it then.
	for _, c := range []struct {
		deltaType, rv string
		writer        trace.SpanContext
	}{{"Added", createdRV, created}, {"Updated", updatedRV, updated}} {
		var root *tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name != telemetry.SpanReflector {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range s.Attributes {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if attrs[string(telemetry.AttrObjectName)] == "traced" && attrs[string(telemetry.AttrDeltaType)] == c.deltaType &&
				attrs[string(telemetry.AttrResourceVersion)] == c.rv {
				root = &s
			}
		}
		if root == nil {
			t.Fatalf("no %s root span for resource version %s", c.deltaType, c.rv)
		}
		if len(root.Links) != 1 || root.Links[0].SpanContext.TraceID() != c.writer.TraceID() ||
			root.Links[0].SpanContext.SpanID() != c.writer.SpanID() {
			t.Fatalf("%s root span links %v, want the writer's span %v", c.deltaType, root.Links, c.writer)
		}
		if root.SpanContext.TraceID() == c.writer.TraceID() {
			t.Errorf("%s root span is in the writer's trace: it should be a root of its own, linked", c.deltaType)
		}
		t.Logf("%s root span %s links to writer span %s/%s", c.deltaType, root.SpanContext.SpanID(), c.writer.TraceID(), c.writer.SpanID())
	}
}
