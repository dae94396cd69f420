package indexer

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/telemetry"
)

// A bare actor system leaves no goroutine behind once its actors are
// stopped (checked with goleak below), so no ignore is needed.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

const waitFor = 10 * time.Second // only bounds a hang; never reached when passing

func newSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

// sendBatch asks the test queue to Request the indexer with Batch.
type sendBatch struct{ batch *fifo.Batch }

// sendListed asks the test queue to Request the indexer with fifo.Listed.
type sendListed struct{}

// viaQueue asks the test queue to send msg to the indexer: it arrives after
// whatever the queue sent before.
type viaQueue struct{ msg any }

// queueActor stands in for the delta queue: it sends batches
// and reports the indexer's answers.
type queueActor struct {
	indexer   *actor.PID
	processed chan *fifo.Processed
	resyncs   chan *fifo.Resync
}

func (q *queueActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case sendBatch:
		ctx.Request(q.indexer, m.batch)
	case sendListed:
		ctx.Request(q.indexer, &fifo.Listed{})
	case viaQueue:
		ctx.Send(q.indexer, m.msg)
	case *fifo.Processed:
		q.processed <- m
	case *fifo.Resync:
		q.resyncs <- m
	}
}

// listenerActor stands in for a listener: it reports what it receives.
type listenerActor struct{ got chan *Notifications }

func (l *listenerActor) Receive(ctx actor.Context) {
	if n, ok := ctx.Message().(*Notifications); ok {
		l.got <- n
	}
}

type harness struct {
	t        *testing.T
	sys      *actor.ActorSystem
	store    *Store
	core     *Core
	indexer  *actor.PID
	queue    *queueActor
	queuePID *actor.PID
	pids     []*actor.PID
	stopped  bool
}

func newHarness(t *testing.T, store *Store, clk clock.WithDelayedExecution) *harness {
	return newHarnessWith(t, store, Config{Clock: clk})
}

// newTracedHarness is newHarness with the core's telemetry.
func newTracedHarness(t *testing.T, store *Store, tel *telemetry.T, clk clock.WithDelayedExecution) *harness {
	return newHarnessWith(t, store, Config{Telemetry: tel, Clock: clk})
}

// newHarnessWith runs an indexer actor with a core configured by cfg, and a
// test queue whose mailbox the indexer is given at spawn.
func newHarnessWith(t *testing.T, store *Store, cfg Config) *harness {
	h := &harness{t: t, sys: newSystem(), store: store}
	h.core = NewCore(store.Writer(), cfg)
	h.queue = &queueActor{processed: make(chan *fifo.Processed, 16), resyncs: make(chan *fifo.Resync, 16)}
	h.queuePID = h.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return h.queue }))
	h.indexer = h.sys.Root.Spawn(Props(h.core, h.queuePID))
	// Read by the queue actor only on messages sent after this.
	h.queue.indexer = h.indexer
	h.pids = append(h.pids, h.queuePID)
	t.Cleanup(h.stop)
	return h
}

func (h *harness) listener() (*actor.PID, chan *Notifications) {
	ch := make(chan *Notifications, 64)
	pid := h.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &listenerActor{got: ch} }))
	h.pids = append(h.pids, pid)
	return pid, ch
}

// apply sends deltas through the test queue and waits for Processed.
func (h *harness) apply(deltas ...fifo.Delta) {
	h.t.Helper()
	h.sys.Root.Send(h.queuePID, sendBatch{&fifo.Batch{Deltas: deltas}})
	select {
	case p := <-h.queue.processed:
		if p.Count != len(deltas) {
			h.t.Fatalf("Processed.Count = %d, want %d", p.Count, len(deltas))
		}
	case <-time.After(waitFor):
		h.t.Fatal("no Processed from the indexer")
	}
}

func receive[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("nothing received: %s", what)
		panic("unreachable")
	}
}

// barrier returns once the indexer has handled every message sent before.
func (h *harness) barrier() {
	h.t.Helper()
	m := &AddIndexers{Reply: make(chan error, 1)}
	h.sys.Root.Send(h.indexer, m)
	if err := receive(h.t, m.Reply, "barrier"); err != nil {
		h.t.Fatal(err)
	}
}

// stop stops every actor, the indexer first, and checks that no goroutine
// is left (its resync timer included). Run at cleanup, also after a failure.
func (h *harness) stop() {
	if h.stopped {
		return
	}
	h.stopped = true
	if err := h.sys.Root.PoisonFuture(h.indexer).Wait(); err != nil {
		h.t.Errorf("stopping the indexer: %v", err)
	}
	for _, pid := range h.pids {
		_ = h.sys.Root.PoisonFuture(pid).Wait()
	}
	h.sys.Shutdown()
	goleak.VerifyNone(h.t, leakcheck.Options()...)
}

func TestActorBatchesAndFanOut(t *testing.T) {
	store := NewStore(nil, nil)
	h := newHarness(t, store, nil)
	p1, ch1 := h.listener()
	p2, ch2 := h.listener()
	b1, b2 := new(counts), new(counts)
	s1, s2 := b1.subscribe(1), b2.subscribe(2)
	s1.Target, s2.Target = p1, p2
	h.sys.Root.Send(h.indexer, s1)
	h.sys.Root.Send(h.indexer, s2)

	h.apply(delta(fifo.Added, pod("a", "x", "1")), delta(fifo.Added, pod("a", "y", "1")))
	h.apply(delta(fifo.Updated, pod("a", "x", "2")))

	for batch, want := range [][]expected{
		{{Type: NotifyAdd, Key: "a/x", NewRV: "1"}, {Type: NotifyAdd, Key: "a/y", NewRV: "1"}},
		{{Type: NotifyUpdate, Key: "a/x", OldRV: "1", NewRV: "2"}},
	} {
		n1 := receive(t, ch1, "batch for listener 1")
		n2 := receive(t, ch2, "batch for listener 2")
		if n1 != n2 {
			t.Errorf("batch %d: listeners got different values", batch)
		}
		if got := summarize(n1.Items); !slices.Equal(got, want) {
			t.Errorf("batch %d: got %+v, want %+v", batch, got, want)
		}
	}
	if b1.backlog() != 3 || b2.backlog() != 3 {
		t.Errorf("backlogs %d, %d; want 3, 3", b1.backlog(), b2.backlog())
	}
	if !store.Sealed() || !errors.Is(store.Add(pod("a", "z", "1")), ErrReadOnly) {
		t.Error("the running indexer did not seal its store")
	}
	if store.Len() != 2 {
		t.Errorf("Len = %d", store.Len())
	}

	// An unsubscribed listener receives nothing more.
	h.sys.Root.Send(h.indexer, &Unsubscribe{ID: 2})
	h.apply(delta(fifo.Deleted, pod("a", "y", "1")))
	if n := receive(t, ch1, "batch after unsubscribe"); n.Items[0].Type != NotifyDelete {
		t.Errorf("listener 1 got %+v", n.Items)
	}
	// The indexer sent to the listeners before answering the queue, so
	// anything for p2 is in its mailbox; draining it settles the question.
	_ = h.sys.Root.PoisonFuture(p2).Wait()
	h.pids = slices.DeleteFunc(h.pids, func(p *actor.PID) bool { return p == p2 }) // poisoning it twice would make a dead letter
	if len(ch2) != 0 {
		t.Error("an unsubscribed listener received a batch")
	}
	h.stop()
}

func TestActorSubscribeInitial(t *testing.T) {
	store := NewStore(nil, nil)
	for _, p := range []any{pod("a", "x", "1"), pod("a", "y", "1")} {
		if err := store.Add(p); err != nil { // seeded before the informer starts
			t.Fatal(err)
		}
	}
	h := newHarness(t, store, nil)
	pid, ch := h.listener()
	pending := new(counts)
	sub := pending.subscribe(1)
	sub.Target, sub.Initial = pid, true
	h.sys.Root.Send(h.indexer, sub)
	h.apply(delta(fifo.Updated, pod("a", "x", "2")))

	initial := receive(t, ch, "initial batch")
	if !initial.Initial || len(initial.Items) != 2 {
		t.Fatalf("initial batch %+v", initial)
	}
	for _, it := range initial.Items {
		if it.Type != NotifyAdd || !it.InitialList {
			t.Fatalf("initial item %+v", it)
		}
	}
	if pending.pending() != 2 {
		t.Errorf("Pending = %d", pending.pending())
	}
	later := receive(t, ch, "later batch")
	if later.Initial || len(later.Items) != 1 || later.Items[0].Type != NotifyUpdate {
		t.Fatalf("later batch %+v", later)
	}
	h.stop()
}

func TestActorResyncTick(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := NewStore(nil, nil)
	h := newHarness(t, store, clk)
	pid, ch := h.listener()
	// An hour: no check timer is armed (no list), ticks come on demand.
	h.sys.Root.Send(h.indexer, &Subscribe{ID: 7, Target: pid, ResyncPeriod: time.Hour})
	h.barrier() // subscribed at the current fake time

	// Not due yet: no Resync.
	clk.Step(time.Hour - time.Nanosecond)
	h.sys.Root.Send(h.indexer, &ResyncTick{})
	h.apply(delta(fifo.Added, pod("a", "x", "1")))
	receive(t, ch, "add")
	if len(h.queue.resyncs) != 0 {
		t.Fatal("Resync sent for a listener not due")
	}

	// Due: the queue, given at spawn, gets a Resync even though it never
	// sent the indexer anything.
	clk.Step(time.Nanosecond)
	h.sys.Root.Send(h.indexer, &ResyncTick{})
	receive(t, h.queue.resyncs, "Resync for a due listener")

	// Not due: no Resync. The queue's Processed follows anything the tick
	// would have sent.
	clk.Step(time.Minute)
	h.sys.Root.Send(h.indexer, &ResyncTick{})
	h.apply(delta(fifo.Sync, pod("a", "x", "1")))
	if len(h.queue.resyncs) != 0 {
		t.Fatal("Resync sent for a listener not due")
	}
	// The last tick emptied the syncing set.
	if n := receive(t, ch, "sync"); !n.Items[0].Sync || n.SyncsTo(7) {
		t.Fatalf("sync batch %+v syncing %v", n.Items, n.Syncing)
	}

	clk.Step(time.Hour)
	h.sys.Root.Send(h.indexer, &ResyncTick{})
	receive(t, h.queue.resyncs, "second Resync")
	h.apply(delta(fifo.Sync, pod("a", "x", "1")))
	if n := receive(t, ch, "sync"); !n.SyncsTo(7) {
		t.Fatalf("syncing set %v does not hold the due listener", n.Syncing)
	}
	h.stop()
}

// TestActorResyncTimer: the shell runs the check timer on the core's
// clock: it starts when the queue reports a list (fifo.Listed) and is
// re-armed after each check; a relist restarts it; stopping leaks nothing.
// (The schedule itself: internal/sim's testdata/resync_*.txt.)
func TestActorResyncTimer(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newHarnessWith(t, NewStore(nil, nil), Config{Clock: clk, ResyncCheckPeriod: time.Minute})
	pid, _ := h.listener()
	h.apply(delta(fifo.Added, pod("a", "x", "1")))
	h.sys.Root.Send(h.indexer, &Subscribe{ID: 1, Target: pid, ResyncPeriod: time.Minute})
	h.barrier()
	if clk.HasWaiters() {
		t.Fatal("a timer before any list")
	}
	h.sys.Root.Send(h.indexer, &fifo.Listed{})
	h.barrier() // the timer is set
	clk.Step(time.Minute)
	receive(t, h.queue.resyncs, "Resync from the timer")
	h.barrier() // the tick is handled: the timer is set again
	clk.Step(time.Minute)
	receive(t, h.queue.resyncs, "Resync from the re-armed timer")
	h.barrier()
	// A relist half a period later restarts it: a period from then. The
	// queue's Processed for a batch follows any Resync sent before it.
	clk.Step(30 * time.Second)
	h.sys.Root.Send(h.indexer, &fifo.Listed{})
	h.barrier()
	clk.Step(30 * time.Second) // when the timer was due before the relist
	h.apply(delta(fifo.Added, pod("a", "y", "1")))
	if n := len(h.queue.resyncs); n != 0 {
		t.Fatal("a Resync a period after the last check: the relist did not restart the timer")
	}
	clk.Step(30 * time.Second)
	receive(t, h.queue.resyncs, "Resync after a restart")
	h.stop()
}

func TestActorAddIndexers(t *testing.T) {
	store := NewStore(nil, nil)
	h := newHarness(t, store, nil)
	h.apply(delta(fifo.Added, podIP("a", "x", "1", "10.0.0.1")), delta(fifo.Added, podIP("b", "y", "1", "10.0.0.2")))

	// Through the store: the hook the actor installed.
	if err := store.AddIndexers(cache.Indexers{"ip": podIPIndex}); err != nil {
		t.Fatal(err)
	}
	if keys, _ := store.IndexKeys("ip", "10.0.0.1"); !slices.Equal(keys, []string{"a/x"}) {
		t.Fatalf("IndexKeys = %v", keys)
	}
	if err := store.AddIndexers(cache.Indexers{"ip": podIPIndex}); err == nil {
		t.Fatal("no error for a conflicting name")
	}
	// As a message.
	m := &AddIndexers{Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, Reply: make(chan error, 1)}
	h.sys.Root.Send(h.indexer, m)
	if err := receive(t, m.Reply, "AddIndexers reply"); err != nil {
		t.Fatal(err)
	}
	if keys, _ := store.IndexKeys(cache.NamespaceIndex, "b"); !slices.Equal(keys, []string{"b/y"}) {
		t.Fatalf("IndexKeys = %v", keys)
	}
	h.stop()
	if err := store.AddIndexers(cache.Indexers{"late": podIPIndex}); !errors.Is(err, ErrStopped) {
		t.Fatalf("AddIndexers after stop = %v, want ErrStopped", err)
	}
}

// TestActorBatchWithoutSender: a batch sent without Request is applied and
// acknowledged to the queue the indexer was given, whoever sent it.
func TestActorBatchWithoutSender(t *testing.T) {
	store := NewStore(nil, nil)
	h := newHarness(t, store, nil)
	h.sys.Root.Send(h.indexer, &fifo.Batch{Deltas: []fifo.Delta{delta(fifo.Added, pod("a", "x", "1"))}})
	if p := receive(t, h.queue.processed, "Processed for a batch sent without Request"); p.Count != 1 {
		t.Fatalf("Processed.Count = %d, want 1", p.Count)
	}
	h.apply(delta(fifo.Added, pod("a", "y", "1")))
	if store.Len() != 2 || len(h.queue.processed) != 0 {
		t.Fatalf("Len = %d, extra answers %d", store.Len(), len(h.queue.processed))
	}
	h.stop()
}

// panicOnce is a mutation detector whose first AddObject panics: a bug in
// the indexer actor's Receive, as far as its supervisor can tell.
type panicOnce struct{ calls atomic.Int32 }

func (d *panicOnce) AddObject(any) {
	if d.calls.Add(1) == 1 {
		panic("detector bug")
	}
}
func (d *panicOnce) Run(<-chan struct{}) {}

// TestActorRestartKeepsResyncing: after the indexer actor is restarted (a
// panic while applying a batch), resync checks still reach the queue. The
// queue's mailbox is given at spawn, not learned from the messages the
// queue sends: a restarted actor would otherwise not know it until the
// next batch, and a quiet informer would never resync again.
func TestActorRestartKeepsResyncing(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	det := &panicOnce{}
	h := newHarnessWith(t, NewStore(nil, nil), Config{Clock: clk, ResyncCheckPeriod: time.Minute, MutationDetector: det})
	pid, got := h.listener()
	h.sys.Root.Send(h.indexer, &Subscribe{ID: 1, Target: pid, ResyncPeriod: time.Minute})
	h.sys.Root.Send(h.queuePID, sendListed{}) // the checks start
	m := &AddIndexers{Reply: make(chan error, 1)}
	h.sys.Root.Send(h.queuePID, viaQueue{m}) // a barrier behind the Listed
	if err := receive(t, m.Reply, "barrier"); err != nil {
		t.Fatal(err)
	}

	clk.Step(time.Minute)
	receive(t, h.queue.resyncs, "Resync before the restart")

	h.apply(delta(fifo.Added, pod("a", "x", "1"))) // panics: acknowledged by the restart
	if det.calls.Load() != 1 {
		t.Fatalf("detector called %d times, want the 1 that panicked", det.calls.Load())
	}
	// The delta was written before the panic: the restart sent its
	// notification (Core.Recover).
	if n := receive(t, got, "the notification of the delta applied before the panic"); len(n.Items) != 1 || n.Items[0].Type != NotifyAdd || key(n.Items[0].New) != "a/x" {
		t.Fatalf("after the restart the listener got %+v, want the add of a/x", n.Items)
	}
	// The restart ran Started (re-arming the timer) before the actor took
	// any other message.
	h.barrier()

	for i := range 2 {
		clk.Step(time.Minute)
		receive(t, h.queue.resyncs, fmt.Sprintf("Resync %d after the restart", i+1))
	}
	h.stop()
}
