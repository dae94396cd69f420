package reflector

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

// TestWatchReaderOneBatchWithTheActor: the watch reader sends a batch only
// when the actor holds none; meanwhile it fills the next, up to MaxBatch
// events, and stops reading when it is full; it sends that batch once the
// first is given back, in order, and WatchEnded after the last one.
func TestWatchReaderOneBatchWithTheActor(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	got := make(chan any, 10)
	self := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *WatchEvents, *WatchEnded:
			got <- m
		}
	}))
	ch := make(chan watch.Event)
	quit := make(chan struct{})
	defer close(quit)
	send := func(name string) bool {
		select {
		case ch <- watch.Event{Type: watch.Modified, Object: pod(name, "1")}:
			return true
		case <-quit:
			return false
		}
	}
	lw := &cache.ListWatch{WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewProxyWatcher(ch), nil }}
	r := New(Config{ListerWatcher: lw, MaxBatch: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &source{r: r, root: sys.Root, self: self, runCtx: ctx, cancelRun: cancel}
	done := make(chan struct{})
	go func() { defer close(done); s.runWatch(ctx, WatchRequest{Gen: 7}) }()

	next := func() any {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("the reader sent nothing")
			return nil
		}
	}
	batch := func(want ...string) *WatchEvents {
		t.Helper()
		w, ok := next().(*WatchEvents)
		if !ok || w.Gen != 7 || len(w.Events) != len(want) {
			t.Fatalf("got %+v, want a batch of %v", w, want)
		}
		for i, ev := range w.Events {
			if n := ev.Object.(interface{ GetName() string }).GetName(); n != want[i] {
				t.Fatalf("event %d: %s, want %s", i, n, want[i])
			}
		}
		return w
	}

	send("a")
	first := batch("a")
	// The actor holds first: b, c, d fill the next batch; e waits.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for _, n := range []string{"b", "c", "d", "e"} {
			if !send(n) {
				return
			}
		}
	}()
	select {
	case m := <-got:
		t.Fatalf("sent a %T while the actor held a batch", m)
	case <-time.After(200 * time.Millisecond):
	}
	select {
	case <-sent:
		t.Fatal("the reader took a fourth event with a full batch and one with the actor")
	default:
	}
	first.recycle()
	second := batch("b", "c", "d")
	<-sent // e was read once the batch went
	second.recycle()
	batch("e").recycle()
	close(ch)
	if _, ok := next().(*WatchEnded); !ok {
		t.Fatal("no WatchEnded after the last batch")
	}
	<-done
}

// The reader runs the actor's pass itself while a millisecond brings at
// most slowEvents events, and hands batches over for the millisecond after
// one that brought more.
func TestWatchReaderRunsThePassOnlyWhileEventsComeSlowly(t *testing.T) {
	var r watchReader
	at := time.Unix(1000, 0)
	for i := range slowEvents {
		if !r.slow(at.Add(time.Duration(i)*time.Microsecond), 1) {
			t.Fatalf("event %d of a millisecond not run by the reader", i+1)
		}
	}
	if r.slow(at.Add(100*time.Microsecond), 1) {
		t.Fatalf("event %d of a millisecond run by the reader", slowEvents+1)
	}
	next := at.Add(time.Millisecond)
	if r.slow(next, 1) || r.slow(next.Add(500*time.Microsecond), 1) {
		t.Fatal("the millisecond after a fast one run by the reader")
	}
	if !r.slow(next.Add(2*time.Millisecond), 1) {
		t.Fatal("a batch after a slow millisecond not run by the reader")
	}
	if r.slow(next.Add(4*time.Millisecond), slowEvents+1) {
		t.Fatal("a batch of more than slowEvents run by the reader")
	}
}
