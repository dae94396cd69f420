//go:build !actorinformer_notrace

package actors_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// The work a handler does for one delta belongs to the delta's trace: the
// spans started from the handler's ctx are children of its handler span
// (docs/tracing.md, "Which pattern"). A controller that queues keys links
// instead: see package workqueue's Example_controller.
func ExampleContextEventHandlerFuncs() {
	src, lw := newSource()
	defer src.Shutdown()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracer := tp.Tracer("example")
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithTracerProvider(tp))
	notified := make(chan string, 1)
	notify := func(_ context.Context, obj any) { notified <- obj.(*corev1.Pod).Name }

	// doc:begin docs/tracing.md
	_, err := inf.AddContextEventHandler(actors.NamedContextHandler("notifier", actors.ContextEventHandlerFuncs{
		UpdateFunc: func(ctx context.Context, oldObj, newObj any) {
			ctx, span := tracer.Start(ctx, "notify") // a child of the handler span
			defer span.End()
			notify(ctx, newObj) // its client calls, made with ctx, join the trace too
		},
	}))
	// doc:end
	if err != nil {
		fmt.Println(err)
		return
	}
	// The pod exists before the informer lists: a list before it would
	// watch from a version the fake source has no history for, relist
	// after a backoff, and could take the update in that list (no
	// UpdateFunc call).
	src.Add(pod("default", "web", 1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	src.Modify(pod("default", "web", 2))
	<-notified
	cancel()
	<-done // every span has ended

	printTree(rec.Ended(), "Updated")
	// Output:
	// reflector.receive Updated default/web
	// └─ fifo.queue
	//    └─ indexer.apply
	//       └─ listener.deliver handler=notifier
	//          └─ handler handler=notifier
	//             └─ notify
}

// Tracing and metrics are options of the informer (docs/tracing.md).
func Example_tracingAndMetrics() {
	src, lw := newSource()
	defer src.Shutdown()
	src.Add(pod("default", "web", 1))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	// doc:begin docs/tracing.md
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil,
		actors.WithTracerProvider(tp), // default: no-op, no span work at all
		actors.WithMeterProvider(mp),  // default: no-op
		actors.WithName("pods"),       // informer name in spans, metrics and logs
		actors.WithResource(corev1.SchemeGroupVersion.WithResource("pods")))
	// doc:end

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	gauge := metricFound(reader, "actorinformer.cache.size") // observed while it runs
	cancel()
	<-done

	for _, s := range rec.Ended() {
		if s.Name() == "reflector.receive" {
			fmt.Println(s.Name(), attr(s, "actorinformer.informer.name"), attr(s, "actorinformer.api.resource"))
		}
	}
	fmt.Println("cache size metric:", gauge)
	// Output:
	// reflector.receive pods pods
	// cache size metric: true
}

// The informer's delta sampler chooses the deltas to trace before any span
// work (docs/tracing.md, "Choosing deltas").
func ExampleWithDeltaSampler() {
	src, lw := newSource()
	defer src.Shutdown()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))

	// doc:begin docs/tracing.md
	keys := actors.SampleKeys() // a set that can change while running
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil,
		actors.WithTracerProvider(tp), // tp's sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())
		actors.WithDeltaSampler(actors.SampleAny(
			actors.SampleRatio(0.01), // 1 % of all deltas
			keys,                     // every delta of the followed objects
			actors.SampleObjects(func(obj any) bool { // every delta of the labelled ones
				return obj.(*corev1.Pod).Labels["trace"] == "true"
			}),
		)))
	keys.Add("default/web-0") // from now on, every change of this pod is traced
	// doc:end

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	labelled := pod("default", "db-0", 1)
	labelled.Labels["trace"] = "true"
	src.Add(labelled)
	src.Add(pod("default", "web-0", 1))
	src.Add(pod("default", "web-1", 1))
	seen := make(chan struct{})
	reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if obj.(*corev1.Pod).Name == "web-1" {
			close(seen)
		}
	}})
	// Subscribed before the change: else it may get web-1 as it is after.
	cache.WaitForCacheSync(ctx.Done(), reg.HasSynced)
	src.Modify(pod("default", "web-1", 2))
	<-seen
	cancel()
	<-done

	var traced []string
	for _, s := range rec.Ended() {
		if s.Name() == "reflector.receive" {
			traced = append(traced, attr(s, "actorinformer.object.name"))
		}
	}
	slices.Sort(traced)
	fmt.Println("traced:", traced)
	// Output: traced: [db-0 web-0]
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func metricFound(reader *sdkmetric.ManualReader, name string) bool {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return false
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return true
			}
		}
	}
	return false
}

// printTree prints the trace of the first delta of type deltaType, as a
// tree of span names with the handler's name: no IDs or times, so that the
// output is the same on every run.
func printTree(spans []sdktrace.ReadOnlySpan, deltaType string) {
	var root sdktrace.ReadOnlySpan
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		} else if root == nil && s.Name() == "reflector.receive" && attr(s, "actorinformer.delta.type") == deltaType {
			root = s
		}
	}
	if root == nil {
		fmt.Println("no", deltaType, "delta traced")
		return
	}
	var walk func(s sdktrace.ReadOnlySpan, prefix, branch string)
	walk = func(s sdktrace.ReadOnlySpan, prefix, branch string) {
		line := prefix + branch + s.Name()
		switch s.Name() {
		case "reflector.receive":
			line += " " + attr(s, "actorinformer.delta.type") + " " + attr(s, "k8s.namespace.name") + "/" + attr(s, "actorinformer.object.name")
		case "listener.deliver", "handler":
			line += " handler=" + attr(s, "actorinformer.handler.name")
		}
		fmt.Println(line)
		switch branch {
		case "├─ ":
			prefix += "│  "
		case "└─ ":
			prefix += "   "
		}
		kids := children[s.SpanContext().SpanID()]
		slices.SortFunc(kids, func(a, b sdktrace.ReadOnlySpan) int {
			return cmp.Or(a.StartTime().Compare(b.StartTime()), strings.Compare(a.Name(), b.Name()))
		})
		for i, c := range kids {
			if i == len(kids)-1 {
				walk(c, prefix, "└─ ")
			} else {
				walk(c, prefix, "├─ ")
			}
		}
	}
	walk(root, "", "")
}
