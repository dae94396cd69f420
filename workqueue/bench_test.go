package workqueue

import (
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"k8s.io/client-go/util/workqueue"
)

// BenchmarkTracedQueue runs one Add+Get+Done cycle per iteration on
// client-go's bare rate-limiting queue and on the same queue wrapped by
// Traced: without a tracer provider (the default), and with the SDK
// recording every processing (no exporter). docs/performance.md has the
// results.
func BenchmarkTracedQueue(b *testing.B) {
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "default/pod-" + strconv.Itoa(i)
	}
	run := func(b *testing.B, q workqueue.TypedRateLimitingInterface[string]) {
		defer q.ShutDown()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			q.Add(keys[i%len(keys)])
			item, _ := q.Get()
			q.Done(item)
			i++
		}
	}
	newQueue := func() workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	}
	b.Run("bare", func(b *testing.B) { run(b, newQueue()) })
	b.Run("traced-noop", func(b *testing.B) { run(b, New(newQueue(), nil)) })
	b.Run("traced-sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		run(b, New(newQueue(), tp))
	})
}

// BenchmarkOldestAge: one Get+Done+Add cycle per iteration on a queue that
// holds 1,000 waiting items (the key got is added back), on client-go's
// rate-limiting queue: bare (no metrics provider: client-go's global no-op
// one) and with its store a Waiting (the age's bookkeeping alone); with
// NewOTelMetricsProvider on the SDK (client-go's metrics), and with
// NewRateLimitingQueue on the SDK (those and the oldest age). A collection
// is not part of a cycle. docs/performance.md has the results.
func BenchmarkOldestAge(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "default/pod-" + strconv.Itoa(i)
	}
	run := func(b *testing.B, q workqueue.TypedRateLimitingInterface[string]) {
		defer q.ShutDown()
		for _, k := range keys {
			q.Add(k)
		}
		b.ReportAllocs()
		for b.Loop() {
			item, _ := q.Get()
			q.Done(item)
			q.Add(item)
		}
	}
	rl := workqueue.DefaultTypedControllerRateLimiter[string]
	withStore := func(p workqueue.MetricsProvider, store workqueue.Queue[string]) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
				Name: "b", MetricsProvider: p,
				Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "b", MetricsProvider: p, Queue: store}),
			}),
		})
	}
	b.Run("bare", func(b *testing.B) { run(b, withStore(nil, nil)) })
	b.Run("bare+waiting", func(b *testing.B) { run(b, withStore(nil, NewWaiting[string](nil, nil))) })
	b.Run("sdk", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		run(b, withStore(NewOTelMetricsProvider(mp), nil))
	})
	b.Run("sdk+age", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		run(b, NewRateLimitingQueue("b", rl(), nil, mp))
	})
}
