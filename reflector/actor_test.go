package reflector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
	"k8s.io/utils/ptr"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/telemetry"
)

// waitFor bounds how long a test waits for something that should happen
// at once; it only decides how long a failing test takes.
const waitFor = 10 * time.Second

// recorder is a stand-in queue actor that records what it receives.
type recorder struct{ ch chan any }

func (r *recorder) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *fifo.Replace, *fifo.Deltas:
		r.ch <- m
	}
}

type env struct {
	t     *testing.T
	sys   *actor.ActorSystem
	queue *actor.PID
	pid   *actor.PID
	rec   chan any
	r     *Reflector
	logs  *syncBuffer
	tel   *telemetry.T
}

// fastBackoff keeps the actor tests quick: 1ms doubling to 4ms. They run
// in real time: they test the shell's goroutines and timers; the Machine's
// timing is tested on a fake clock (machine_test.go, internal/sim).
func fastBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 10, Cap: 4 * time.Millisecond}
}

func startEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{t: t, rec: make(chan any, 10000), logs: &syncBuffer{}}
	e.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	e.queue = e.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &recorder{ch: e.rec} }))
	if cfg.Telemetry == nil {
		cfg.Telemetry = telemetry.New(telemetry.Config{
			Logger:   slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Informer: telemetry.InformerInfo{Name: "pods"},
		})
	}
	e.tel = cfg.Telemetry
	if cfg.Backoff == nil {
		cfg.Backoff = fastBackoff()
	}
	if cfg.ExpectedType == nil {
		cfg.ExpectedType = &v1.Pod{}
	}
	e.r = New(cfg)
	e.pid = e.sys.Root.Spawn(e.r.Props(e.queue))
	return e
}

func (e *env) stop() {
	e.t.Helper()
	if err := e.sys.Root.PoisonFuture(e.pid).Wait(); err != nil {
		e.t.Fatalf("stopping the reflector: %v", err)
	}
	if err := e.sys.Root.PoisonFuture(e.queue).Wait(); err != nil {
		e.t.Fatalf("stopping the queue: %v", err)
	}
	e.sys.Shutdown()
}

func (e *env) next() any {
	e.t.Helper()
	select {
	case m := <-e.rec:
		return m
	case <-time.After(waitFor):
		e.t.Fatalf("nothing reached the queue within %v", waitFor)
		return nil
	}
}

func (e *env) nextReplace() *fifo.Replace {
	e.t.Helper()
	m := e.next()
	r, ok := m.(*fifo.Replace)
	if !ok {
		e.t.Fatalf("got %T, want *fifo.Replace", m)
	}
	return r
}

// deltas collects Deltas messages until n deltas came.
func (e *env) deltas(n int) []fifo.Delta {
	e.t.Helper()
	var out []fifo.Delta
	for len(out) < n {
		m := e.next()
		d, ok := m.(*fifo.Deltas)
		if !ok {
			e.t.Fatalf("got %T after %d deltas, want *fifo.Deltas", m, len(out))
		}
		out = append(out, d.Items...)
	}
	if len(out) != n {
		e.t.Fatalf("got %d deltas, want %d: %s", len(out), n, deltasString(out))
	}
	return out
}

func keys(ds []fifo.Delta) string {
	k := make([]string, len(ds))
	for i, d := range ds {
		k[i] = d.Key
	}
	slices.Sort(k)
	return strings.Join(k, ",")
}

func TestActorListThenWatch(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	src := fcache.NewFakeControllerSource()
	defer src.Shutdown()
	for _, n := range []string{"a", "b", "c"} {
		src.Add(pod(n, ""))
	}
	e := startEnv(t, Config{ListerWatcher: src, UseWatchList: ptr.To(false)})
	defer e.stop()

	rep := e.nextReplace()
	if got := keys(rep.Items); got != "ns/a,ns/b,ns/c" || rep.ResourceVersion != "3" {
		t.Fatalf("Replace keys %q RV %q", got, rep.ResourceVersion)
	}
	for _, d := range rep.Items {
		if d.Type != fifo.Replaced || d.Trace != nil {
			t.Fatalf("list delta %+v", d)
		}
	}
	// The watch opens after the Replace went out; events sent before it is
	// open are replayed from RV 3 by the fake source.
	src.Add(pod("d", ""))
	src.Modify(pod("a", ""))
	src.Delete(pod("b", ""))
	got := deltasString(e.deltas(3))
	if want := "Added:ns/d@4 Updated:ns/a@5 Deleted:ns/b@6"; got != want {
		t.Fatalf("deltas %q, want %q", got, want)
	}
	// The status goes out after the deltas, in the same step: the shell
	// may store it just after the queue got them.
	c := &e.tel.Metrics.Counters
	informertest.Eventually(t, waitFor, time.Millisecond, "the status after the deltas", func() string {
		rv := e.r.LastSyncResourceVersion()
		if rv == "6" && c.Relists.Load() == 1 && c.ReflectorEvents.Load() == 6 && c.Dropped.Load() == 0 {
			return ""
		}
		return fmt.Sprintf("RV %q, want 6; relists %d events %d dropped %d, want 1, 6, 0", rv, c.Relists.Load(), c.ReflectorEvents.Load(), c.Dropped.Load())
	})
}

func TestActorResetWatchRelists(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	src := fcache.NewFakeControllerSource()
	defer src.Shutdown()
	src.Add(pod("a", ""))
	lw := &watchSignaller{FakeControllerSource: src, opened: make(chan string, 100)}
	e := startEnv(t, Config{ListerWatcher: lw, UseWatchList: ptr.To(false)})
	defer e.stop()

	if got := keys(e.nextReplace().Items); got != "ns/a" {
		t.Fatalf("first Replace %q", got)
	}
	// A watch opened after the change below would replay it from the
	// source's history: wait for the first one.
	lw.waitOpened(t, "1")
	// A change the watch never sees, then a broken watch whose history is
	// gone: the reflector can only catch up by relisting.
	src.AddDropWatch(pod("b", ""))
	src.ResetWatch()
	rep := e.nextReplace()
	if got := keys(rep.Items); got != "ns/a,ns/b" || rep.ResourceVersion != "2" {
		t.Fatalf("relist Replace keys %q RV %q", got, rep.ResourceVersion)
	}
	// The fake source has no history since the reset: a change made before
	// the watch at RV 2 is open would make that watch "expired".
	lw.waitOpened(t, "2")
	src.Add(pod("c", ""))
	if got := deltasString(e.deltas(1)); got != "Added:ns/c@3" {
		t.Fatalf("deltas after relist %q", got)
	}
	if n := e.tel.Metrics.Counters.Relists.Load(); n != 2 {
		t.Fatalf("relists %d, want 2", n)
	}
}

// watchSignaller reports the RV of every watch its source opened.
type watchSignaller struct {
	*fcache.FakeControllerSource
	opened chan string
}

func (w *watchSignaller) Watch(o metav1.ListOptions) (watch.Interface, error) {
	wi, err := w.FakeControllerSource.Watch(o)
	if err == nil {
		w.opened <- o.ResourceVersion
	}
	return wi, err
}

func (w *watchSignaller) waitOpened(t *testing.T, rv string) {
	t.Helper()
	for {
		select {
		case got := <-w.opened:
			if got == rv {
				return
			}
		case <-time.After(waitFor):
			t.Fatalf("no watch opened at RV %q", rv)
		}
	}
}

func TestActorForbiddenListBacksOffAndCallsHandler(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	forbidden := apierrors.NewForbidden(podsGR, "", errors.New("rbac says no"))
	var lists atomic.Int32
	calls := make(chan error, 100)
	var sawReflector atomic.Bool
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return nil, forbidden
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
			t.Error("watch called although every list failed")
			return nil, errors.New("no")
		},
	}
	e := startEnv(t, Config{
		ListerWatcher: lw,
		Name:          "forbidden-pods",
		UseWatchList:  ptr.To(false),
		WatchErrorHandler: func(_ context.Context, r *cache.Reflector, err error) {
			sawReflector.Store(r != nil && r.Name() == "forbidden-pods" && r.TypeDescription() == "*v1.Pod")
			select {
			case calls <- err:
			default:
			}
		},
	})
	for i := range 3 {
		select {
		case err := <-calls:
			if !apierrors.IsForbidden(err) {
				t.Fatalf("call %d: %v", i, err)
			}
		case <-time.After(waitFor):
			t.Fatalf("handler called %d times", i)
		}
	}
	e.stop()
	if !sawReflector.Load() {
		t.Fatal("the handler did not get a usable *cache.Reflector")
	}
	if n := lists.Load(); n < 3 {
		t.Fatalf("%d lists", n)
	}
	select {
	case m := <-e.rec:
		t.Fatalf("emitted %T although every list failed", m)
	default:
	}
	if n := e.tel.Metrics.Counters.WatchErrors.Load(); n < 3 {
		t.Fatalf("errors counted %d", n)
	}
}

// TestActorWatchErrorHandlerPanics checks that a watch error handler that
// panics is logged and does not stop the reflector from retrying.
func TestActorWatchErrorHandlerPanics(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	calls := make(chan struct{}, 100)
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			return nil, errors.New("list failed")
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return nil, errors.New("no") },
	}
	e := startEnv(t, Config{
		ListerWatcher: lw,
		UseWatchList:  ptr.To(false),
		WatchErrorHandler: func(context.Context, *cache.Reflector, error) {
			calls <- struct{}{}
			panic("handler bug")
		},
	})
	for i := range 3 {
		select {
		case <-calls:
		case <-time.After(waitFor):
			t.Fatalf("handler called %d times", i)
		}
	}
	e.stop()
	if logs := e.logs.String(); !strings.Contains(logs, "watch error handler panicked") || !strings.Contains(logs, "handler bug") {
		t.Fatalf("panic not logged:\n%s", logs)
	}
}

func TestActorDefaultErrorHandlerLogs(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	listed := make(chan struct{}, 100)
	lw := &cache.ListWatch{ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
		listed <- struct{}{}
		return nil, errors.New("apiserver on fire")
	}}
	e := startEnv(t, Config{ListerWatcher: lw, UseWatchList: ptr.To(false)})
	for range 2 {
		select {
		case <-listed:
		case <-time.After(waitFor):
			t.Fatal("no list")
		}
	}
	e.stop()
	if logs := e.logs.String(); !strings.Contains(logs, "level=ERROR msg=\"Failed to watch\"") || !strings.Contains(logs, "apiserver on fire") {
		t.Fatalf("default handler did not log the error:\n%s", logs)
	}
}

func TestActorWatchList(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	var watches []metav1.ListOptions
	opened := make(chan *watch.FakeWatcher, 1)
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			t.Error("listed although the WatchList stream worked")
			return nil, errors.New("no")
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			watches = append(watches, o)
			w := watch.NewFakeWithChanSize(10, false)
			w.Add(pod("p1", "1"))
			w.Add(pod("p2", "2"))
			w.Action(watch.Bookmark, bookmark("2", true))
			opened <- w
			return w, nil
		},
	}
	e := startEnv(t, Config{ListerWatcher: lw, UseWatchList: ptr.To(true)})
	defer e.stop()
	rep := e.nextReplace()
	if got := keys(rep.Items); got != "ns/p1,ns/p2" || rep.ResourceVersion != "2" {
		t.Fatalf("Replace keys %q RV %q", got, rep.ResourceVersion)
	}
	// The status goes out after the Replace, in the same step: the shell
	// may store it just after the queue got the Replace.
	informertest.Eventually(t, waitFor, time.Millisecond, "the status after the Replace", func() string {
		if !e.r.LastSyncUsedWatchList() {
			return "LastSyncUsedWatchList is false"
		}
		return ""
	})
	w := <-opened
	w.Modify(pod("p1", "3"))
	if got := deltasString(e.deltas(1)); got != "Updated:ns/p1@3" {
		t.Fatalf("deltas %q", got)
	}
	if len(watches) != 1 || watches[0].SendInitialEvents == nil || !*watches[0].SendInitialEvents ||
		watches[0].ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || !watches[0].AllowWatchBookmarks {
		t.Fatalf("watch options %+v", watches)
	}
}

func TestActorStopWhileCallsBlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		lw   func(entered chan struct{}) cache.ListerWatcher
	}{
		{"list", func(entered chan struct{}) cache.ListerWatcher {
			return &cache.ListWatch{ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
				close(entered)
				<-ctx.Done()
				return nil, ctx.Err()
			}}
		}},
		{"watch", func(entered chan struct{}) cache.ListerWatcher {
			return &cache.ListWatch{
				ListFunc: func(metav1.ListOptions) (runtime.Object, error) { return podList("1"), nil },
				WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
					close(entered)
					return watch.NewFake(), nil // never sends anything
				},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, leakcheck.Options()...)
			entered := make(chan struct{})
			e := startEnv(t, Config{ListerWatcher: tc.lw(entered), UseWatchList: ptr.To(false)})
			select {
			case <-entered:
			case <-time.After(waitFor):
				t.Fatal("call not made")
			}
			e.stop()
		})
	}
}

// TestActorStopAbandonsCallsIgnoringContext: stopping the actor does not
// wait for a List or Watch call that ignores its cancelled context (it
// would otherwise take protoactor's 10 s poison timeout); once the call
// returns, its goroutine ends, reports nothing, and stops the watcher the
// call returned.
func TestActorStopAbandonsCallsIgnoringContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		lw   func(entered, release chan struct{}, w watch.Interface) cache.ListerWatcher
	}{
		{"list", func(entered, release chan struct{}, w watch.Interface) cache.ListerWatcher {
			return &cache.ListWatch{
				ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
					close(entered)
					<-release
					return podList("1", pod("a", "1")), nil
				},
				WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return w, nil },
			}
		}},
		{"watch", func(entered, release chan struct{}, w watch.Interface) cache.ListerWatcher {
			return &cache.ListWatch{
				ListFunc: func(metav1.ListOptions) (runtime.Object, error) { return podList("1"), nil },
				WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
					close(entered)
					<-release
					return w, nil
				},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, leakcheck.Options()...)
			entered, release := make(chan struct{}), make(chan struct{})
			w := watch.NewFake()
			e := startEnv(t, Config{ListerWatcher: tc.lw(entered, release, w), UseWatchList: ptr.To(false)})
			select {
			case <-entered:
			case <-time.After(waitFor):
				t.Fatal("call not made")
			}
			stopped := make(chan error, 1)
			go func() { stopped <- e.sys.Root.PoisonFuture(e.pid).Wait() }()
			select {
			case err := <-stopped:
				if err != nil {
					t.Fatalf("stopping the reflector: %v", err)
				}
			case <-time.After(5 * time.Second): // far below the 10 s poison timeout
				close(release)
				t.Fatal("the reflector did not stop while a call ignoring its context was blocked")
			}
			close(release)
			if tc.name == "watch" {
				select {
				case _, ok := <-w.ResultChan():
					if ok {
						t.Fatal("event on the late watch")
					}
				case <-time.After(waitFor):
					t.Fatal("the watch returned after the stop was not stopped")
				}
			}
			if err := e.sys.Root.PoisonFuture(e.queue).Wait(); err != nil {
				t.Fatalf("stopping the queue: %v", err)
			}
			e.sys.Shutdown()
		})
	}
}

// TestActorStopWaitsForCallsEndingSoon: a List or Watch call in progress
// when the actor stops, which returns soon after its context is cancelled,
// has returned by the time the actor has stopped. Otherwise the call goes
// on after the informer's Run returned: a source torn down right after Run
// (client-go's FakeControllerSource locks itself forever in Shutdown) then
// holds the abandoned goroutine for good.
func TestActorStopWaitsForCallsEndingSoon(t *testing.T) {
	for _, tc := range []struct {
		name string
		lw   func(entered chan struct{}, returned *atomic.Bool) cache.ListerWatcher
	}{
		{"list", func(entered chan struct{}, returned *atomic.Bool) cache.ListerWatcher {
			return &cache.ListWatch{ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
				close(entered)
				<-ctx.Done()
				time.Sleep(50 * time.Millisecond) // the call's own cleanup
				returned.Store(true)
				return nil, ctx.Err()
			}}
		}},
		{"watch", func(entered chan struct{}, returned *atomic.Bool) cache.ListerWatcher {
			return &cache.ListWatch{
				ListFunc: func(metav1.ListOptions) (runtime.Object, error) { return podList("1"), nil },
				WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
					close(entered)
					<-ctx.Done()
					time.Sleep(50 * time.Millisecond)
					returned.Store(true)
					return nil, ctx.Err()
				},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, leakcheck.Options()...)
			entered := make(chan struct{})
			var returned atomic.Bool
			e := startEnv(t, Config{ListerWatcher: tc.lw(entered, &returned), UseWatchList: ptr.To(false)})
			select {
			case <-entered:
			case <-time.After(waitFor):
				t.Fatal("call not made")
			}
			e.stop()
			if !returned.Load() {
				t.Fatal("the actor stopped while its call was still running")
			}
		})
	}
}

// A stream full of malformed objects neither crashes nor restarts the
// actor (a restart would list again), and the good objects get through.
func TestActorMalformedStream(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	rng := rand.New(rand.NewPCG(7, 7))
	var events []watch.Event
	good, bookmarks := 0, 0
	for i := range 2000 {
		t := []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, "", "WEIRD"}[rng.IntN(6)]
		obj := randomObject(rng)
		if p, ok := obj.(*v1.Pod); ok && p != nil {
			switch t {
			case watch.Added, watch.Modified, watch.Deleted:
				p.Name = fmt.Sprintf("good-%d", i)
				p.Namespace = "ns"
				good++
			case watch.Bookmark:
				p.ResourceVersion = fmt.Sprintf("bm-%d", i)
				bookmarks++ // goes on to the queue, for the cache's version
			}
		}
		events = append(events, watch.Event{Type: t, Object: obj})
	}
	var lists atomic.Int32
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			return podList("1"), nil
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(len(events), false)
			for _, ev := range events {
				w.Action(ev.Type, ev.Object)
			}
			return w, nil
		},
	}
	e := startEnv(t, Config{ListerWatcher: lw, UseWatchList: ptr.To(false)})
	defer e.stop()
	e.nextReplace()
	ds := e.deltas(good + bookmarks)
	for _, d := range ds {
		if d.Type == fifo.Bookmark {
			if rv := d.BookmarkRV(); !strings.HasPrefix(rv, "bm-") || d.Key != "" {
				t.Fatalf("unexpected bookmark %+v", d)
			}
			bookmarks--
			continue
		}
		if !strings.HasPrefix(d.Key, "ns/good-") {
			t.Fatalf("unexpected delta %+v", d)
		}
	}
	if bookmarks != 0 {
		t.Fatalf("%d bookmarks missing", bookmarks)
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d lists: the actor restarted or relisted", n)
	}
	if e.tel.Metrics.Counters.Dropped.Load() == 0 {
		t.Fatal("nothing dropped")
	}
}
