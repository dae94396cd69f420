package workqueue

import (
	"strconv"
	"testing"

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
