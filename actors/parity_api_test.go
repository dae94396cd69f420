package actors_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/actorinformer/actorinformer/actors"
)

// impl builds an informer of pods, client-go's or ours, for tests that run
// the same steps on both.
type impl struct {
	name string
	new  func(lw cache.ListerWatcher, o cache.SharedIndexInformerOptions) cache.SharedIndexInformer
}

var impls = []impl{
	{"client-go", func(lw cache.ListerWatcher, o cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, o)
	}},
	{"actors", func(lw cache.ListerWatcher, o cache.SharedIndexInformerOptions) cache.SharedIndexInformer {
		return actors.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, o, actors.WithWatchList(false))
	}},
}

// start runs inf until the returned stop is called (also at cleanup); stop
// waits for Run to return.
func start(t testing.TB, inf cache.SharedIndexInformer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// Issue 9, item 5: cache.ShutDownEventHandler removes a handler and waits
// until a call already running has returned.
func TestParityShutDownEventHandler(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			src, lw := newSource(t)
			src.Add(pod("ns", "a", 1))
			inf := im.new(lw, cache.SharedIndexInformerOptions{})
			entered, release := make(chan struct{}), make(chan struct{})
			var inCall atomic.Bool
			reg, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) {
				inCall.Store(true)
				close(entered) // one object: called once
				<-release
				inCall.Store(false)
			}})
			if err != nil {
				t.Fatal(err)
			}
			// A registration removed before Run never runs: it is shut down
			// at once.
			early, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{})
			if err != nil {
				t.Fatal(err)
			}
			if err := cache.ShutDownEventHandler(inf, early); err != nil {
				t.Fatalf("ShutDownEventHandler before Run: %v", err)
			}
			// One left in place is shut down when the informer stops.
			kept, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, inf)
			waitClosed(t, "handler call", entered)
			done := make(chan error, 1)
			go func() { done <- cache.ShutDownEventHandler(inf, reg) }()
			select {
			case err := <-done:
				t.Fatalf("ShutDownEventHandler returned (%v) while the handler was running", err)
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ShutDownEventHandler: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("ShutDownEventHandler did not return")
			}
			if inCall.Load() {
				t.Fatal("ShutDownEventHandler returned before the handler call did")
			}
			sc, ok := kept.(interface{ ShutdownChan() <-chan struct{} })
			if !ok {
				t.Fatalf("%T has no ShutdownChan", kept)
			}
			select {
			case <-sc.ShutdownChan():
				t.Fatal("a registered handler's ShutdownChan is closed while the informer runs")
			default:
			}
			stop()
			waitClosed(t, "ShutdownChan after the informer stopped", sc.ShutdownChan())
		})
	}
}

// Issue 9, item 9: removing a registration of another informer is not an
// error and leaves it registered.
// Real time: side by side with client-go's informer, which takes no clock.
func TestParityRemoveAnotherInformersHandler(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			src, lw := newSource(t)
			src.Add(pod("ns", "a", 1))
			a := im.new(lw, cache.SharedIndexInformerOptions{})
			b := im.new(lw, cache.SharedIndexInformerOptions{})
			var adds atomic.Int64
			reg, err := a.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { adds.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.RemoveEventHandler(reg); err != nil {
				t.Fatalf("removing another informer's registration: %v", err)
			}
			start(t, a)
			waitSynced(t, context.Background(), reg.HasSynced)
			src.Add(pod("ns", "b", 2))
			eventually(t, 10*time.Second, "adds", func() string {
				if adds.Load() != 2 {
					return fmt.Sprint(adds.Load())
				}
				return ""
			})
		})
	}
}

// captureKlog sends klog's output to a buffer until the test ends.
func captureKlog(t *testing.T) *safeBuffer {
	state := klog.CaptureState()
	t.Cleanup(state.Restore)
	var buf safeBuffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	klog.SetOutput(&buf)
	return &buf
}

// panicNow panics on the line after its declaration; panicLine is that
// line as klog prints it.
func panicNow(msg string) {
	panic(msg)
}

var panicLine = func() string {
	pc := reflect.ValueOf(panicNow).Pointer()
	file, line := runtime.FuncForPC(pc).FileLine(pc)
	return filepath.Base(file) + ":" + strconv.Itoa(line+1) + "]"
}()

// Issue 9, item 6: a handler's panic is reported as client-go reports it:
// through utilruntime's panic handlers to klog (or to HandlerOptions.Logger
// when given), with the stack and the line that panicked. client-go then
// re-panics unless utilruntime.ReallyCrash is off (it is, in this test);
// ours never does.
// Real time: side by side with client-go's informer, which takes no clock.
func TestParityHandlerPanicIsReported(t *testing.T) {
	crash := utilruntime.ReallyCrash
	utilruntime.ReallyCrash = false
	t.Cleanup(func() { utilruntime.ReallyCrash = crash })
	for _, withLogger := range []bool{false, true} {
		for _, im := range impls {
			t.Run(fmt.Sprintf("%s/logger=%v", im.name, withLogger), func(t *testing.T) {
				klogOut := captureKlog(t)
				var own safeBuffer
				var opts cache.HandlerOptions
				if withLogger {
					l := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&own)))
					opts.Logger = &l
				}
				src, lw := newSource(t)
				src.Add(pod("ns", "bad", 1))
				inf := im.new(lw, cache.SharedIndexInformerOptions{})
				var calls atomic.Int64
				h := actors.NamedHandler("panicky", cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(obj any, _ bool) {
					calls.Add(1)
					if obj.(*corev1.Pod).Name == "bad" {
						panicNow("boom-" + im.name)
					}
				}})
				if _, err := inf.AddEventHandlerWithOptions(h, opts); err != nil {
					t.Fatal(err)
				}
				start(t, inf)
				out, other := klogOut, &own
				if withLogger {
					out, other = &own, klogOut
				}
				eventually(t, 20*time.Second, "panic report", func() string {
					klog.Flush()
					if !strings.Contains(out.String(), "Observed a panic") {
						return "no panic report yet; output: " + out.String()
					}
					return ""
				})
				src.Add(pod("ns", "good", 2)) // the listener goes on
				eventually(t, 20*time.Second, "next call", func() string {
					if calls.Load() != 2 {
						return fmt.Sprint(calls.Load())
					}
					return ""
				})
				klog.Flush()
				got := out.String()
				for _, want := range []string{"boom-" + im.name, "stacktrace", "goroutine ", panicLine} {
					if !strings.Contains(got, want) {
						t.Errorf("report lacks %q:\n%s", want, got)
					}
				}
				if im.name == "actors" {
					for _, want := range []string{`key="ns/bad"`, `handler="panicky"`, `informer="pod"`} {
						if !strings.Contains(got, want) {
							t.Errorf("report lacks %q:\n%s", want, got)
						}
					}
				}
				if strings.Contains(other.String(), "boom-") {
					t.Errorf("the panic also went to the other logger:\n%s", other.String())
				}
			})
		}
	}
}

// failingList is a ListerWatcher whose List always fails.
type failingList struct{}

func (failingList) List(metav1.ListOptions) (kruntime.Object, error) {
	return nil, errors.New("list refused")
}
func (failingList) Watch(metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("watch refused")
}
func (failingList) IsWatchListSemanticsUnSupported() bool { return true }

// SharedIndexInformerOptions: ResyncPeriod, Indexers and ObjectDescription
// behave alike.
// Real time: side by side with client-go's informer, which takes no clock.
func TestParityInformerOptions(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			src, lw := newSource(t)
			src.Add(pod("ns1", "a", 1))
			src.Add(pod("ns2", "b", 1))
			inf := im.new(lw, cache.SharedIndexInformerOptions{
				ResyncPeriod: time.Second,
				Indexers:     cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			})
			var resyncs atomic.Int64
			reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
				if o.(*corev1.Pod).ResourceVersion == n.(*corev1.Pod).ResourceVersion {
					resyncs.Add(1)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			start(t, inf)
			waitSynced(t, context.Background(), reg.HasSynced)
			objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns2")
			if err != nil || len(objs) != 1 || objs[0].(*corev1.Pod).Name != "b" {
				t.Fatalf("ByIndex(ns2) = %v, %v", objs, err)
			}
			eventually(t, 20*time.Second, "resyncs of both objects", func() string {
				if resyncs.Load() < 2 {
					return fmt.Sprint(resyncs.Load())
				}
				return ""
			})

			// ObjectDescription is the reflector's TypeDescription.
			desc := make(chan string, 1)
			failing := im.new(failingList{}, cache.SharedIndexInformerOptions{ObjectDescription: "test pods"})
			if err := failing.SetWatchErrorHandler(func(r *cache.Reflector, _ error) {
				select {
				case desc <- r.TypeDescription():
				default:
				}
			}); err != nil {
				t.Fatal(err)
			}
			start(t, failing)
			select {
			case d := <-desc:
				if d != "test pods" {
					t.Fatalf("TypeDescription %q, want %q", d, "test pods")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("watch error handler not called")
			}
		})
	}
}

// fakeMetrics is a cache.InformerMetricsProvider that records what it is fed.
type fakeMetrics struct {
	mu      sync.Mutex
	created []string
	sets    map[string][]float64
}

type fakeMetric struct {
	p    *fakeMetrics
	name string
}

func (m fakeMetric) Set(v float64)     { m.p.record(m.name, v) }
func (m fakeMetric) Observe(v float64) { m.p.record(m.name, v) }

func (p *fakeMetrics) record(name string, v float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sets == nil {
		p.sets = map[string][]float64{}
	}
	p.sets[name] = append(p.sets[name], v)
}

func (p *fakeMetrics) metric(name string, id cache.InformerNameAndResource) fakeMetric {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.created = append(p.created, name+" "+id.Name()+" "+id.GroupVersionResource().Resource)
	return fakeMetric{p, name}
}

func (p *fakeMetrics) NewQueuedItemMetric(id cache.InformerNameAndResource) cache.GaugeMetric {
	return p.metric("queued", id)
}
func (p *fakeMetrics) NewProcessingLatencyMetric(id cache.InformerNameAndResource) cache.HistogramMetric {
	return p.metric("latency", id)
}
func (p *fakeMetrics) NewStoreResourceVersionMetric(id cache.InformerNameAndResource) cache.GaugeMetric {
	return p.metric("rv", id)
}

func (p *fakeMetrics) values(name string) []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]float64(nil), p.sets[name]...)
}

// SharedIndexInformerOptions.Identifier and InformerMetricsProvider: the
// provider's metrics are created for a reserved identifier only and fed the
// queue length, the processing latency and the cache's resource version.
// Real time: side by side with client-go's informer, which takes no clock.
func TestParityInformerMetricsProvider(t *testing.T) {
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			name, err := cache.NewInformerName("parity-metrics-" + im.name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(name.Release)
			src, lw := newSource(t)
			src.Add(pod("ns", "a", 1))
			src.Add(pod("ns", "b", 1))

			// Without a reserved identifier, the provider is not used.
			unused := &fakeMetrics{}
			_ = im.new(lw, cache.SharedIndexInformerOptions{InformerMetricsProvider: unused})

			p := &fakeMetrics{}
			inf := im.new(lw, cache.SharedIndexInformerOptions{
				Identifier:              name.WithResource(gvr),
				InformerMetricsProvider: p,
			})
			var adds atomic.Int64
			reg, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: func(any, bool) { adds.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			start(t, inf)
			waitSynced(t, context.Background(), reg.HasSynced)
			src.Add(pod("ns", "c", 1))
			eventually(t, 20*time.Second, "adds", func() string {
				if adds.Load() != 3 {
					return fmt.Sprint(adds.Load())
				}
				return ""
			})
			list, err := lw.List(metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			la, err := meta.ListAccessor(list)
			if err != nil {
				t.Fatal(err)
			}
			lastRV, err := strconv.Atoi(la.GetResourceVersion())
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, "metrics", func() string {
				q, l, rv := p.values("queued"), p.values("latency"), p.values("rv")
				if len(q) == 0 || q[len(q)-1] != 0 || len(l) == 0 || len(rv) == 0 || rv[len(rv)-1] != float64(lastRV) {
					return fmt.Sprintf("queued %v latency %v rv %v (want last %d)", q, l, rv, lastRV)
				}
				return ""
			})
			if q := p.values("queued"); !containsPositive(q) {
				t.Errorf("queued gauge never above 0: %v", q)
			}
			p.mu.Lock()
			created := strings.Join(p.created, ",")
			p.mu.Unlock()
			for _, m := range []string{"queued", "latency", "rv"} {
				if want := m + " parity-metrics-" + im.name + " pods"; !strings.Contains(created, want) {
					t.Errorf("metric %q not created: %s", want, created)
				}
			}
			unused.mu.Lock()
			defer unused.mu.Unlock()
			if len(unused.created) != 0 {
				t.Errorf("metrics created without a reserved identifier: %v", unused.created)
			}
		})
	}
}

func containsPositive(vs []float64) bool {
	for _, v := range vs {
		if v > 0 {
			return true
		}
	}
	return false
}

// Identifier names our informer and its resource.
func TestInformerOptionsIdentifierNamesTheInformer(t *testing.T) {
	name, err := cache.NewInformerName("parity-identifier")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(name.Release)
	_, lw := newSource()
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	id := name.WithResource(gvr)
	inf := actors.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{Identifier: id})
	if inf.Name() != "parity-identifier" {
		t.Fatalf("Name() = %q", inf.Name())
	}
	named := actors.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{Identifier: id}, actors.WithName("mine"))
	if named.Name() != "mine" {
		t.Fatalf("WithName does not override the identifier: %q", named.Name())
	}
}

// The typed informer: the same typed handler on client-go's
// TypedSharedIndexInformer and on ours sees the same calls, tombstones as
// cache.DeletedObject with FinalStateUnknown.
// Real time: side by side with client-go's informer, which takes no clock.
func TestParityTypedInformer(t *testing.T) {
	typedImpls := []struct {
		name string
		new  func(lw cache.ListerWatcher) cache.TypedSharedIndexInformer[*corev1.Pod]
	}{
		{"client-go", func(lw cache.ListerWatcher) cache.TypedSharedIndexInformer[*corev1.Pod] {
			return cache.NewTypedSharedIndexInformer[*corev1.Pod](cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}}))
		}},
		{"actors", func(lw cache.ListerWatcher) cache.TypedSharedIndexInformer[*corev1.Pod] {
			return actors.NewTyped[*corev1.Pod](lw, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}}, actors.WithWatchList(false))
		}},
	}
	var results []string
	for _, im := range typedImpls {
		t.Run(im.name, func(t *testing.T) {
			src, lw := newSource(t)
			a, b, c := pod("ns", "a", 1), pod("ns", "b", 1), pod("ns", "c", 1)
			src.Add(a)
			src.Add(b)
			inf := im.new(lw)
			if err := inf.AddTypedIndexers(cache.TypedIndexers[*corev1.Pod]{"gen": func(p *corev1.Pod) ([]string, error) {
				return []string{p.Labels["gen"]}, nil
			}}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []string
			rec := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
			reg, err := inf.AddTypedEventHandler(cache.TypedResourceEventHandlerDetailedFuncs[*corev1.Pod]{
				AddFunc:    func(p *corev1.Pod, initial bool) { rec(fmt.Sprintf("add %s %v", p.Name, initial)) },
				UpdateFunc: func(o, n *corev1.Pod) { rec(fmt.Sprintf("update %s gen %s", n.Name, n.Labels["gen"])) },
				DeleteFunc: func(d cache.DeletedObject[*corev1.Pod]) {
					rec(fmt.Sprintf("delete %s tombstone=%v obj=%v", d.GetKey(), d.FinalStateUnknown != nil, d.OptionalObj != nil))
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inf.AddTypedEventHandler(cache.TypedResourceEventHandlerFuncs[*corev1.Pod]{}, cache.HandlerOptions{}, cache.HandlerOptions{}); err == nil {
				t.Fatal("two HandlerOptions accepted")
			}
			start(t, inf)
			waitSynced(t, context.Background(), reg.HasSynced)
			calls := func(n int) func() string {
				return func() string {
					mu.Lock()
					defer mu.Unlock()
					if len(got) != n {
						return fmt.Sprintf("%d calls, want %d: %s", len(got), n, strings.Join(got, "; "))
					}
					return ""
				}
			}
			src.Modify(pod("ns", "a", 2))
			src.Delete(a)
			src.Add(c)
			eventually(t, 20*time.Second, "watch calls", calls(5))
			src.DeleteDropWatch(b)
			src.ResetWatch() // relist: b's tombstone, c unchanged
			eventually(t, 20*time.Second, "relist calls", calls(7))
			pods, err := inf.GetTypedIndexer().ByTypedIndex("gen", "1")
			if err != nil || len(pods) != 1 || pods[0].Name != "c" {
				t.Fatalf("ByTypedIndex = %v, %v", pods, err)
			}
			mu.Lock()
			defer mu.Unlock()
			// Sorted: client-go v0.37 hands a relist's tombstones before its
			// updates, we after (see docs/architecture.md).
			sort.Strings(got)
			results = append(results, strings.Join(got, "; "))
		})
	}
	if len(results) == 2 && results[0] != results[1] {
		t.Fatalf("client-go: %s\nours:      %s", results[0], results[1])
	}
	if len(results) == 2 && !strings.Contains(results[1], "delete ns/b tombstone=true obj=true") {
		t.Fatalf("no tombstone: %s", results[1])
	}
}
