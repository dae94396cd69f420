package actors_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// updates is a handler that reports each add and update by object name.
func updates(t *testing.T, inf *actors.SharedIndexInformer) chan string {
	t.Helper()
	ch := make(chan string, 100)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ch <- obj.(*corev1.Pod).Name },
		UpdateFunc: func(_, obj any) { ch <- obj.(*corev1.Pod).Name },
	}); err != nil {
		t.Fatal(err)
	}
	return ch
}

func await(t *testing.T, ch chan string, names ...string) {
	t.Helper()
	for _, want := range names {
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("handler got %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("handler not called for %s", want)
		}
	}
}

// awaitSet is await for names that may come in any order.
func awaitSet(t *testing.T, ch chan string, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for range names {
		select {
		case got := <-ch:
			if !want[got] {
				t.Fatalf("handler got %s, want one of %v", got, want)
			}
			delete(want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("handler not called for %v", want)
		}
	}
}

// TestDeltaSamplerDecidesBeforeTheProvider: without a delta sampler every
// delta asks the provider for its root span (today's behaviour); a delta
// the sampler does not choose asks the tracer for nothing; a chosen delta
// still goes to the provider's sampler, which has the last word.
func TestDeltaSamplerDecidesBeforeTheProvider(t *testing.T) {
	informertest.NeedsTracing(t)
	for _, c := range []struct {
		name          string
		sampler       actors.DeltaSampler
		provider      sdktrace.Sampler
		roots, traced int // root spans requested, delta traces recorded
	}{
		{"no delta sampler", nil, sdktrace.AlwaysSample(), 5, 5},
		{"none chosen", actors.SampleRatio(0), sdktrace.AlwaysSample(), 0, 0},
		{"all chosen", actors.SampleRatio(1), sdktrace.AlwaysSample(), 5, 5},
		{"two chosen", actors.SampleKeys("ns/p1", "ns/p3"), sdktrace.AlwaysSample(), 2, 2},
		{"chosen, provider never samples", actors.SampleRatio(1), sdktrace.NeverSample(), 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, lw := newSource(t)
			rec := tracetest.NewSpanRecorder()
			sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(c.provider))
			defer func() { _ = sdk.Shutdown(context.Background()) }()
			tp := &countingTP{TracerProvider: sdk}
			inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false),
				actors.WithTracerProvider(tp), actors.WithDeltaSampler(c.sampler))
			got := updates(t, inf)
			ctx, stop := running(t, inf)
			waitSynced(t, ctx, inf.HasSynced)
			for i := range 5 {
				p := pod("ns", fmt.Sprint("p", i), i)
				src.Add(p)
				await(t, got, p.Name)
			}
			stop()
			tp.mu.Lock()
			defer tp.mu.Unlock()
			roots := 0
			for _, n := range tp.names {
				if n == telemetry.SpanReflector {
					roots++
				}
			}
			if roots != c.roots {
				t.Errorf("%d root spans requested, want %d", roots, c.roots)
			}
			if n := len(newSpanSet(rec.Ended()).named(telemetry.SpanReflector)); n != c.traced {
				t.Errorf("%d root spans recorded, want %d", n, c.traced)
			}
		})
	}
}

// TestKeySamplerIsFollowedWhileRunning: with SampleAny(keys, SampleRatio(0))
// only the deltas of the keys in the set when the reflector sees them are
// traced: a key added while running has its next deltas traced, a key
// removed no longer.
func TestKeySamplerIsFollowedWhileRunning(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	src.Add(pod("ns", "a", 1))
	src.Add(pod("ns", "b", 1))
	rec, tp := recordingProvider(t)
	keys := actors.SampleKeys()
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false),
		actors.WithTracerProvider(tp), actors.WithDeltaSampler(actors.SampleAny(keys, actors.SampleRatio(0))))
	got := updates(t, inf)
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	awaitSet(t, got, "a", "b") // a list's order is the fake source's map order
	update := func(names ...string) {
		for _, n := range names {
			src.Modify(pod("ns", n, 2))
			await(t, got, n)
		}
	}
	update("a", "b")
	keys.Add("ns/b")
	update("a", "b", "b")
	keys.Remove("ns/b")
	keys.Add("ns/a")
	update("b", "a")
	stop()

	s := newSpanSet(rec.Ended())
	if n := len(s.named(telemetry.SpanReflector)); n != 3 {
		t.Errorf("%d root spans, want 3", n)
	}
	for name, want := range map[string]int{"a": 1, "b": 2} {
		roots := s.roots(name, "Updated")
		if len(roots) != want {
			t.Fatalf("%s: %d Updated root spans, want %d", name, len(roots), want)
		}
		for _, r := range roots {
			s.chain(t, r, 1)
		}
	}
}

// TestDeltaSamplerSeesKeyAndTransformedObject: the sampler gets the delta's
// type, key, resource version and the object after the transform.
func TestDeltaSamplerSeesKeyAndTransformedObject(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	rec, tp := recordingProvider(t)
	var mu sync.Mutex
	var seen []actors.DeltaInfo
	s := actors.DeltaSamplerFunc(func(d actors.DeltaInfo) bool {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		return d.Object.(*corev1.Pod).Labels["transformed"] == "yes" && d.Key == "ns/x"
	})
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false),
		actors.WithTracerProvider(tp), actors.WithDeltaSampler(s))
	if err := inf.SetTransform(func(obj any) (any, error) {
		p := obj.(*corev1.Pod).DeepCopy()
		p.Labels["transformed"] = "yes"
		return p, nil
	}); err != nil {
		t.Fatal(err)
	}
	got := updates(t, inf)
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(pod("ns", "x", 1))
	src.Add(pod("ns", "y", 1))
	await(t, got, "x", "y")
	stop()

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("sampler saw %d deltas, want 2", len(seen))
	}
	for i, name := range []string{"x", "y"} {
		d := seen[i]
		p := d.Object.(*corev1.Pod)
		if d.Type != cache.Added || d.Key != "ns/"+name || p.Name != name || d.ResourceVersion == "" || d.ResourceVersion != p.ResourceVersion {
			t.Errorf("delta %d: %+v", i, d)
		}
	}
	spans := newSpanSet(rec.Ended())
	if len(spans.roots("x", "Added")) != 1 || len(spans.named(telemetry.SpanReflector)) != 1 {
		t.Errorf("root spans: %d, want x's only", len(spans.named(telemetry.SpanReflector)))
	}
}

// TestDeltaSamplerChoosesQueueDeltas: list items, and the resync deltas the
// queue makes, go through the delta sampler too.
// Real time: the spans of the real pipeline (the simulator records none),
// after a resync check of 1 s.
func TestDeltaSamplerChoosesQueueDeltas(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	src.Add(pod("ns", "a", 1))
	src.Add(pod("ns", "b", 1))
	rec, tp := recordingProvider(t)
	// A resync check period of 1 s: with 0, client-go (and so ours) resyncs
	// no handler, whatever period it asks for.
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, time.Second, nil, actors.WithWatchList(false),
		actors.WithTracerProvider(tp), actors.WithDeltaSampler(actors.SampleKeys("ns/a")))
	var mu sync.Mutex
	resynced := map[string]int{}
	if _, err := inf.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, obj any) {
		if informertest.RV(old) == informertest.RV(obj) {
			mu.Lock()
			resynced[obj.(*corev1.Pod).Name]++
			mu.Unlock()
		}
	}}, time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	eventually(t, 20*time.Second, "a resync of both pods", func() string {
		mu.Lock()
		defer mu.Unlock()
		if resynced["a"] == 0 || resynced["b"] == 0 {
			return fmt.Sprint(resynced)
		}
		return ""
	})
	stop()

	s := newSpanSet(rec.Ended())
	if len(s.roots("a", "Replaced")) != 1 || len(s.roots("a", "Sync")) == 0 {
		t.Errorf("a: %d Replaced, %d Sync root spans; want 1 and at least 1", len(s.roots("a", "Replaced")), len(s.roots("a", "Sync")))
	}
	if n := len(s.roots("b", "Replaced")) + len(s.roots("b", "Sync")); n != 0 {
		t.Errorf("b: %d root spans, want none", n)
	}
}

// TestRootSpanLinksToTheWritersTrace: a delta whose object carries a W3C
// traceparent in the annotation links its root span to that span context
// (after the list link, for a list item); a malformed one is ignored and
// counted; the annotation's name is an option, "" turns the link off.
func TestRootSpanLinksToTheWritersTrace(t *testing.T) {
	informertest.NeedsTracing(t)
	const (
		tid = "0af7651916cd43dd8448eb211c80319c"
		sid = "b7ad6b7169203331"
		tp  = "00-" + tid + "-" + sid + "-01"
	)
	for _, c := range []struct {
		name       string
		opts       []actors.Option
		annotation string // where the objects carry the traceparent
		link       bool
	}{
		{"default annotation", nil, actors.DefaultTraceparentAnnotation, true},
		{"custom annotation", []actors.Option{actors.WithTraceparentAnnotation("example.com/tp")}, "example.com/tp", true},
		{"other annotation", []actors.Option{actors.WithTraceparentAnnotation("example.com/tp")}, actors.DefaultTraceparentAnnotation, false},
		{"off", []actors.Option{actors.WithTraceparentAnnotation("")}, actors.DefaultTraceparentAnnotation, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, lw := newSource(t)
			annotated := func(name, value string) *corev1.Pod {
				p := pod("ns", name, 1)
				p.Annotations = map[string]string{c.annotation: value}
				return p
			}
			src.Add(annotated("listed", tp))
			rec, provider := recordingProvider(t)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, append([]actors.Option{actors.WithWatchList(false),
				actors.WithTracerProvider(provider), actors.WithMeterProvider(mp)}, c.opts...)...)
			got := updates(t, inf)
			ctx, stop := running(t, inf)
			waitSynced(t, ctx, inf.HasSynced)
			src.Add(annotated("watched", tp))
			src.Add(annotated("malformed", "00-"+tid+"-"+sid))
			src.Add(pod("ns", "plain", 1))
			await(t, got, "listed", "watched", "malformed", "plain")
			stop()

			s := newSpanSet(rec.Ended())
			writer := func(sp sdktrace.ReadOnlySpan) int {
				n := 0
				for _, l := range sp.Links() {
					if l.SpanContext.TraceID().String() == tid && l.SpanContext.SpanID().String() == sid && l.SpanContext.IsRemote() {
						n++
					}
				}
				return n
			}
			one := func(name, typ string) sdktrace.ReadOnlySpan {
				t.Helper()
				r := s.roots(name, typ)
				if len(r) != 1 {
					t.Fatalf("%s: %d %s root spans", name, len(r), typ)
				}
				return r[0]
			}
			want := 0
			if c.link {
				want = 1
			}
			listed := one("listed", "Replaced")
			if writer(listed) != want || len(listed.Links()) != 1+want || !linksTo(listed, s.named(telemetry.SpanList)[0]) {
				t.Errorf("listed: links %v", listed.Links())
			}
			if w := one("watched", "Added"); writer(w) != want || len(w.Links()) != want {
				t.Errorf("watched: links %v", w.Links())
			}
			for _, n := range []string{"malformed", "plain"} {
				if l := one(n, "Added").Links(); len(l) != 0 {
					t.Errorf("%s: links %v", n, l)
				}
			}
			if got := counterValue(t, reader, telemetry.MetricTraceparentMalformed); got != int64(want) {
				t.Errorf("%s = %d, want %d", telemetry.MetricTraceparentMalformed, got, want)
			}
		})
	}
}

func counterValue(t *testing.T, reader *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var n int64
	if m, ok := informertest.CollectMetrics(t, reader)[name]; ok {
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			n += dp.Value
		}
	}
	return n
}
