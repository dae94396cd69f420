package actors_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

// stopBound is how long Run may take to return once its context is
// cancelled in these tests: generous, yet well below protoactor's 10 s
// poison timeout, which is what a Run stuck waiting for a call would take.
// It is a functional bound, not a performance claim.
const stopBound = 5 * time.Second

// runnable is what the stop tests need of either informer.
type runnable interface {
	RunWithContext(context.Context)
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// bothInformers builds client-go's informer and ours over the same kind of
// ListerWatcher, to run the same steps on each.
var bothInformers = []struct {
	name string
	new  func(cache.ListerWatcher) runnable
}{
	{"client-go", func(lw cache.ListerWatcher) runnable {
		return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	}},
	{"actorinformer", func(lw cache.ListerWatcher) runnable {
		return actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	}},
}

// plainListWatch is a cache.ListWatch that says it cannot stream lists
// (WatchList), so that both informers list and then watch.
type plainListWatch struct{ *cache.ListWatch }

func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// startRun runs inf in a goroutine; done closes when Run returns. At
// cleanup the context is cancelled and Run waited for (bounded).
func startRun(t *testing.T, inf runnable) (cancel context.CancelFunc, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(ch) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Error("Run did not return at cleanup")
		}
	})
	return cancel, ch
}

// returnsWithin fails t unless done closes within stopBound.
func returnsWithin(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(stopBound):
		t.Fatalf("Run did not return within %v of the cancel", stopBound)
	}
}

// gate is a channel closed once.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() { <-g.ch }

func waitGate(t *testing.T, g *gate, what string) {
	t.Helper()
	select {
	case <-g.ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

// The stop tests run in real time: they test the shells' goroutines and the
// stop itself, side by side with client-go, which the simulator does not run.

// TestStopWhileListIgnoresContext: a List that ignores its context and
// blocks does not hold Run back; client-go's Run returns at once too. Once
// the List returns, no goroutine is left and no watch was opened.
func TestStopWhileListIgnoresContext(t *testing.T) {
	for _, impl := range bothInformers {
		t.Run(impl.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, leakcheck.Options(goleak.IgnoreCurrent())...)
			entered, release := newGate(), newGate()
			var watches atomic.Int32
			lw := plainListWatch{&cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					entered.open()
					release.wait() // ignores the context
					return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					watches.Add(1)
					return watch.NewFake(), nil
				},
			}}
			t.Cleanup(release.open)
			cancel, done := startRun(t, impl.new(lw))
			waitGate(t, entered, "List")
			cancel()
			returnsWithin(t, done)
			release.open()
			if n := watches.Load(); n != 0 {
				t.Fatalf("%d watches opened after a list cancelled by the stop", n)
			}
		})
	}
}

// closingWatcher is a watcher that has one event queued; the test closes
// its result channel (as a server ends a watch) or its Stop does, which
// takes stopDelay and is recorded.
type closingWatcher struct {
	ch        chan watch.Event
	once      sync.Once
	stopDelay time.Duration
	stopped   atomic.Bool
}

func newClosingWatcher(ev watch.Event, stopDelay time.Duration) *closingWatcher {
	w := &closingWatcher{ch: make(chan watch.Event, 1), stopDelay: stopDelay}
	w.ch <- ev
	return w
}

func (w *closingWatcher) close() { w.once.Do(func() { close(w.ch) }) }

func (w *closingWatcher) Stop() {
	time.Sleep(w.stopDelay) // a slow Stop (a connection being torn down)
	w.close()
	w.stopped.Store(true)
}

func (w *closingWatcher) ResultChan() <-chan watch.Event { return w.ch }

func podAt(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// addSeen returns a handler that opens g when it gets an add of name.
func addSeen(name string, g *gate) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Name == name {
			g.open()
		}
	}}
}

// TestNoWatchAfterStop: a watch that ends once the informer is stopped (as
// a real one does when its context is cancelled) is not opened again, so a
// Watch that would block ignoring its context is never called; client-go
// checks its context before each watch. Run returns promptly.
func TestNoWatchAfterStop(t *testing.T) {
	for _, impl := range bothInformers {
		t.Run(impl.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, leakcheck.Options(goleak.IgnoreCurrent())...)
			release := newGate()
			var watches, lateWatches atomic.Int32
			first := newClosingWatcher(watch.Event{Type: watch.Added, Object: podAt("b", "2")}, 0)
			lw := plainListWatch{&cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Pod{*podAt("a", "1")}}, nil
				},
				WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
					if ctx.Err() != nil {
						lateWatches.Add(1)
					}
					if watches.Add(1) == 1 {
						return first, nil
					}
					release.wait() // ignores the context
					return watch.NewFake(), nil
				},
			}}
			t.Cleanup(release.open)
			inf := impl.new(lw)
			seen := newGate()
			if _, err := inf.AddEventHandler(addSeen("b", seen)); err != nil {
				t.Fatal(err)
			}
			cancel, done := startRun(t, inf)
			waitGate(t, seen, "the watch event's add")
			cancel()
			first.close() // the server ends the watch after the cancel
			returnsWithin(t, done)
			release.open()
			if n := lateWatches.Load(); n != 0 {
				t.Fatalf("%d watches opened after the cancel", n)
			}
			if n := watches.Load(); n != 1 {
				t.Fatalf("%d watches opened, want 1", n)
			}
		})
	}
}

// TestWatchStoppedBeforeRunReturns: the watch being read is stopped, its
// Stop returned, by the time Run returns, however slow Stop is: client-go
// stops it in its deferred cleanup.
func TestWatchStoppedBeforeRunReturns(t *testing.T) {
	for _, impl := range bothInformers {
		t.Run(impl.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, leakcheck.Options(goleak.IgnoreCurrent())...)
			var watches atomic.Int32
			w := newClosingWatcher(watch.Event{Type: watch.Added, Object: podAt("b", "2")}, 300*time.Millisecond)
			lw := plainListWatch{&cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					if watches.Add(1) == 1 {
						return w, nil
					}
					return watch.NewFake(), nil
				},
			}}
			inf := impl.new(lw)
			seen := newGate()
			if _, err := inf.AddEventHandler(addSeen("b", seen)); err != nil {
				t.Fatal(err)
			}
			cancel, done := startRun(t, inf)
			waitGate(t, seen, "the watch event's add")
			cancel()
			returnsWithin(t, done)
			if !w.stopped.Load() {
				t.Fatal("Run returned before the watch's Stop did")
			}
		})
	}
}

// TestStopWhileWatchIgnoresContext: a Watch call in flight that ignores
// its context does not hold Run back (client-go's Run waits for it: see
// docs/architecture.md). Once the call returns, the watcher it returned is
// stopped and no goroutine is left.
func TestStopWhileWatchIgnoresContext(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options(goleak.IgnoreCurrent())...)
	entered, release := newGate(), newGate()
	w := newClosingWatcher(watch.Event{Type: watch.Added, Object: podAt("b", "2")}, 0)
	var watches atomic.Int32
	lw := plainListWatch{&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			watches.Add(1)
			entered.open()
			release.wait() // ignores the context
			return w, nil
		},
	}}
	t.Cleanup(release.open)
	cancel, done := startRun(t, actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil))
	waitGate(t, entered, "Watch")
	cancel()
	returnsWithin(t, done)
	release.open()
	eventually(t, 10*time.Second, "the late watcher stopped", func() string {
		if !w.stopped.Load() {
			return "not stopped"
		}
		return ""
	})
	if n := watches.Load(); n != 1 {
		t.Fatalf("%d watches opened, want 1", n)
	}
}
