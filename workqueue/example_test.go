//go:build !actorinformer_notrace

package workqueue_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
	"k8s.io/client-go/util/workqueue"

	"github.com/actorinformer/actorinformer/actors"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// listOnly is a fake source that makes the informer list rather than stream
// (WatchList).
type listOnly struct{ *fcache.FakeControllerSource }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// A controller: the informer's context handler enqueues the object's key
// with the handler's context, and the worker's reconcile runs under a
// workqueue.process span linked to the handler span of the delta's trace
// (docs/tracing.md, "Controllers").
func Example_controller() {
	src := fcache.NewFakeControllerSource()
	defer src.Shutdown()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mp := sdkmetric.NewMeterProvider()
	tracer := tp.Tracer("controller")
	inf := actors.NewSharedIndexInformer(listOnly{src}, &corev1.Pod{}, 0, nil, actors.WithTracerProvider(tp))

	// doc:begin docs/tracing.md
	queue := aiworkqueue.NewRateLimitingQueue("pods", workqueue.DefaultTypedControllerRateLimiter[string](), tp, mp)
	// or aiworkqueue.New(q, tp) around a client-go queue q built elsewhere
	enqueue := func(ctx context.Context, obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			queue.AddCtx(ctx, key) // also AddAfterCtx, AddRateLimitedCtx
		}
	}
	_, err := inf.AddContextEventHandler(actors.NamedContextHandler("enqueue", actors.ContextEventHandlerFuncs{
		AddFunc:    func(ctx context.Context, obj any, _ bool) { enqueue(ctx, obj) },
		UpdateFunc: func(ctx context.Context, _, obj any) { enqueue(ctx, obj) },
	}))
	// doc:end
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(stopped) }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)

	reconciled := make(chan struct{}, 1)
	reconcile := func(ctx context.Context, key string) {
		_, span := tracer.Start(ctx, "reconcile", trace.WithAttributes(attribute.String("key", key)))
		span.End()
		reconciled <- struct{}{}
	}
	worker := func() {
		// doc:begin docs/tracing.md
		for {
			ctx, key, shutdown := queue.GetCtx() // ctx carries workqueue.process
			if shutdown {
				return
			}
			reconcile(ctx, key) // spans started from ctx are its children
			queue.Done(key)     // ends workqueue.process
		}
		// doc:end
	}
	worked := make(chan struct{})
	go func() { worker(); close(worked) }()
	src.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}})
	<-reconciled
	queue.ShutDown()
	<-worked
	cancel()
	<-stopped

	printTraces(rec.Ended())
	// Output:
	// trace 1
	// reflector.receive Added default/web
	// └─ fifo.queue
	//    └─ indexer.apply
	//       └─ listener.deliver handler=enqueue
	//          └─ handler handler=enqueue
	// trace 2
	// workqueue.process item=default/web adds=1 requeues=0 links.dropped=0
	// │  link → trace 1, handler handler=enqueue
	// └─ reconcile key=default/web
}

// printTraces prints the process spans' traces and the traces they link to,
// as trees of span names with a few attributes: no IDs or times, so that the
// output is the same on every run.
func printTraces(spans []sdktrace.ReadOnlySpan) {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	var traces []trace.TraceID // linked traces first, then the processings'
	seen := map[trace.TraceID]bool{}
	addTrace := func(id trace.TraceID) {
		if !seen[id] {
			seen[id] = true
			traces = append(traces, id)
		}
	}
	for _, s := range spans {
		if s.Name() == aiworkqueue.SpanProcess {
			for _, l := range s.Links() {
				addTrace(l.SpanContext.TraceID())
			}
			addTrace(s.SpanContext().TraceID())
		}
	}
	number := map[trace.TraceID]int{}
	for i, id := range traces {
		number[id] = i + 1
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		}
	}
	for _, c := range children {
		slices.SortFunc(c, func(a, b sdktrace.ReadOnlySpan) int {
			return cmp.Or(a.StartTime().Compare(b.StartTime()), cmp.Compare(a.Name(), b.Name()))
		})
	}
	var walk func(s sdktrace.ReadOnlySpan, prefix, branch string)
	walk = func(s sdktrace.ReadOnlySpan, prefix, branch string) {
		fmt.Println(strings.TrimRight(prefix+branch+s.Name()+" "+details(s), " "))
		switch branch {
		case "├─ ":
			prefix += "│  "
		case "└─ ":
			prefix += "   "
		}
		kids := children[s.SpanContext().SpanID()]
		bar := "   "
		if len(kids) > 0 {
			bar = "│  "
		}
		for _, l := range s.Links() {
			target := "(not recorded)"
			if t, ok := byID[l.SpanContext.SpanID()]; ok {
				target = strings.TrimSpace(t.Name() + " " + details(t))
			}
			fmt.Printf("%s%slink → trace %d, %s\n", prefix, bar, number[l.SpanContext.TraceID()], target)
		}
		for i, c := range kids {
			if i == len(kids)-1 {
				walk(c, prefix, "└─ ")
			} else {
				walk(c, prefix, "├─ ")
			}
		}
	}
	for _, id := range traces {
		fmt.Println("trace", number[id])
		for _, s := range spans {
			if s.SpanContext().TraceID() == id && !s.Parent().IsValid() {
				walk(s, "", "")
			}
		}
	}
}

// details prints the attributes worth a glance, without the variable ones
// (the wait time).
func details(s sdktrace.ReadOnlySpan) string {
	get := func(k string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == k {
				return kv.Value.Emit()
			}
		}
		return ""
	}
	switch s.Name() {
	case "reflector.receive":
		return get("actorinformer.delta.type") + " " + get("k8s.namespace.name") + "/" + get("actorinformer.object.name")
	case "listener.deliver", "handler":
		return "handler=" + get("actorinformer.handler.name")
	case aiworkqueue.SpanProcess:
		return fmt.Sprintf("item=%s adds=%s requeues=%s links.dropped=%s",
			get(string(aiworkqueue.AttrItem)), get(string(aiworkqueue.AttrAdds)),
			get(string(aiworkqueue.AttrRequeues)), get(string(aiworkqueue.AttrLinksDropped)))
	case "reconcile":
		return "key=" + get("key")
	}
	return ""
}
