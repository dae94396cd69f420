package bench

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/telemetry"
)

// tracingHandlers is the number of handlers every delta is delivered to.
const tracingHandlers = 4

// tracingStreamSize is the synthetic stream of the tracing cost benchmark:
// keys pods listed first, then updates Modified events round-robin over them.
type tracingStreamSize struct{ keys, updates int }

// tracingSize is small by default so that the benchmark smoke run
// (-benchtime 1x) stays quick; ACTORINFORMER_BENCH_FULL=1 selects the size
// the cost table is measured at.
func tracingSize() tracingStreamSize {
	if os.Getenv("ACTORINFORMER_BENCH_FULL") != "" {
		return tracingStreamSize{keys: 10_000, updates: 200_000}
	}
	return tracingStreamSize{keys: 1_000, updates: 20_000}
}

// tracingStream is the prebuilt list and watch events (see Pods), shared
// read-only by every run.
type tracingStream struct {
	list   *corev1.PodList
	events []watch.Event
}

var (
	tracingStreamsMu sync.Mutex
	tracingStreams   = map[tracingStreamSize]*tracingStream{}
)

func tracingStreamFor(sz tracingStreamSize) *tracingStream {
	tracingStreamsMu.Lock()
	defer tracingStreamsMu.Unlock()
	if s, ok := tracingStreams[sz]; ok {
		return s
	}
	p := NewPods(sz.keys)
	s := &tracingStream{list: p.List(sz.keys), events: p.Modified(sz.updates, uint64(sz.keys))}
	tracingStreams[sz] = s
	return s
}

// BenchmarkTracingCost measures the watch-phase throughput of the whole
// pipeline (reflector → queue → indexer → 4 listeners) on a synthetic stream
// of updates, with the default no-op tracer provider and with an SDK provider
// sampling 1 % and 100 % of the deltas (batch span processor, discarding
// exporter). The initial list is not timed. bench/tracing-cost.sh runs it
// against a build with tracing compiled out (-tags actorinformer_notrace).
func BenchmarkTracingCost(b *testing.B) {
	b.Run("noop", func(b *testing.B) { benchTracing(b, nil) })
	if telemetry.CompiledOut {
		return // an SDK provider would be ignored: nothing else to measure
	}
	b.Run("sdk-1pct", func(b *testing.B) {
		benchTracing(b, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01)))
	})
	b.Run("sdk-100pct", func(b *testing.B) { benchTracing(b, sdktrace.AlwaysSample()) })
	// 1 % chosen by the informer's delta sampler before any span work; the
	// provider samples every delta handed to it.
	b.Run("deltasampler-1pct", func(b *testing.B) {
		benchTracing(b, sdktrace.ParentBased(sdktrace.AlwaysSample()), actors.WithDeltaSampler(actors.SampleRatio(0.01)))
	})
}

// benchTracing runs the stream b.N times through a fresh informer with
// opts; a nil sampler means no tracer provider at all (the default).
func benchTracing(b *testing.B, sampler sdktrace.Sampler, opts ...actors.Option) {
	sz := tracingSize()
	stream := tracingStreamFor(sz)
	var tp trace.TracerProvider
	if sampler != nil {
		sdk := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sampler),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()),
		)
		defer func() { _ = sdk.Shutdown(context.Background()) }()
		tp = sdk
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	var cpu time.Duration
	for range b.N {
		cpu += runTracingStream(b, stream, sz, tp, opts...)
	}
	events := float64(sz.updates * b.N)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(0, "ns/op") // per-run time says little; events/s is the figure
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
	// CPU time is less disturbed than wall time by other processes on a
	// shared machine.
	b.ReportMetric(float64(cpu.Nanoseconds())/events, "cpu-ns/event")
}

// runTracingStream lists the pods (untimed), then times the updates from
// the watch's first event to the last handler's last update. It returns the
// process CPU time (all goroutines, GC included) spent meanwhile.
func runTracingStream(b *testing.B, stream *tracingStream, sz tracingStreamSize, tp trace.TracerProvider, extra ...actors.Option) time.Duration {
	lw := &Source{Lists: []*corev1.PodList{stream.list}, Watches: [][]watch.Event{stream.events}}
	lw.Gate()
	var opts []actors.Option
	opts = append(opts, actors.WithWatchList(false))
	opts = append(opts, extra...)
	if tp != nil {
		opts = append(opts, actors.WithTracerProvider(tp))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, opts...)
	var adds, updates atomic.Int64
	done := make(chan struct{})
	for range tracingHandlers {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { adds.Add(1) },
			UpdateFunc: func(_, obj any) {
				if _ = obj.(*corev1.Pod); updates.Add(1) == int64(tracingHandlers*sz.updates) {
					close(done)
				}
			},
		}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	deadline := time.Now().Add(time.Minute)
	for adds.Load() < int64(tracingHandlers*sz.keys) {
		if time.Now().After(deadline) {
			b.Fatalf("initial list not delivered: %d adds", adds.Load())
		}
		time.Sleep(time.Millisecond)
	}
	cpu0 := cpuTime()
	b.StartTimer()
	lw.Release()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("stream not delivered: %d of %d updates", updates.Load(), tracingHandlers*sz.updates)
	}
	b.StopTimer()
	return cpuTime() - cpu0
}
