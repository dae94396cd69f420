package actors

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// listener delivers notifications to one handler, in order: its core
// decides what to call and what to send, and it makes the handler calls
// (listener.Path) and keeps the counters. Only the listener's actor calls it,
// so the struct needs no lock; the atomics are read by other goroutines
// (HasSynced, Stats, metrics).
type handlerListener struct {
	core    listener.Core
	id      indexer.ListenerID
	name    string
	handler ContextEventHandler
	ctx     context.Context
	// resync is the resync period in force (0: none); requestedResync the
	// handler's request after the minimum is applied (client-go's
	// requestedResyncPeriod); added is when the handler was added, from
	// which its first resync period counts. Set before the listener
	// subscribes, under the informer's lock.
	resync          time.Duration
	requestedResync time.Duration
	added           time.Time
	tel             *telemetry.T
	mattrs          metric.MeasurementOption
	// observed is set when tracing or metrics are on (both are fixed when
	// the informer is built): otherwise call goes straight to the handler.
	observed bool
	// metered is set when metrics are on. Then the per-call histograms
	// (handler duration and event age) are recorded for every traced call
	// and for one in histEvery of the others; histSkip counts down the
	// untraced calls to skip before the next recorded one.
	metered   bool
	histEvery int
	histSkip  int

	// pending counts initial-list notifications sent but not yet delivered.
	pending atomic.Int64
	// backlog counts notifications sent but not yet delivered; it is the
	// listener backlog gauge's value.
	backlog *telemetry.Backlog
	// initialDone is set once the listener has every object the cache held
	// when it subscribed: at once for handlers added before start, after the
	// synthetic initial batch for the others.
	initialDone atomic.Bool
	delivered   atomic.Int64
	panics      atomic.Int64
	// removed is set by RemoveEventHandler: from then on the handler is
	// not called, even for notifications already in the mailbox.
	removed atomic.Bool
	// halted is the informer's: set when it stops, so that a listener in
	// the middle of a large batch drops the rest instead of delaying the
	// stop (client-go's listeners drop what they hold when stopped, too).
	halted *atomic.Bool
	// synced is told when the listener has delivered its last pending
	// initial notification or its initial batch: registrations' done
	// signals depend on that. nil in tests that build a bare listener.
	synced func()
	// logger reports handler panics, as client-go's processorListener
	// does: HandlerOptions.Logger, else klog.Background().
	logger klog.Logger
	// exited is closed once no handler call is running or to come: the
	// listener actor has stopped, or the listener was removed (or the
	// informer stopped) before it was spawned. It is the registration's
	// ShutdownChan.
	exited   chan struct{}
	exitOnce sync.Once
}

func newListener(id indexer.ListenerID, h ContextEventHandler, name string, resync time.Duration, tel *telemetry.T, halted *atomic.Bool) *handlerListener {
	return &handlerListener{
		core:    listener.Core{ID: id},
		halted:  halted,
		id:      id,
		name:    name,
		handler: h,
		ctx:     context.Background(),
		resync:  resync,
		tel:     tel,
		mattrs:  tel.Metrics.HandlerAttrs(name),
		backlog: tel.Metrics.NewBacklog(name),

		observed:  tel.Tracing() || tel.Metrics.Enabled(),
		metered:   tel.Metrics.Enabled(),
		histEvery: DefaultHandlerHistogramEvery,
		logger:    klog.Background(),
		exited:    make(chan struct{}),
	}
}

// exit closes exited; later calls do nothing.
func (l *handlerListener) exit() {
	l.exitOnce.Do(func() { close(l.exited) })
}

// deliver takes in one batch through the core, for tests and benchmarks
// that drive a bare listener (it sends nothing for a batch).
func (l *handlerListener) deliver(n *indexer.Notifications) { l.core.Notifications(n, l) }

// Active reports whether the handler may still be called (listener.Path).
func (l *handlerListener) Active() bool { return !l.removed.Load() && !l.halted.Load() }

// Progress accounts for done notifications (listener.Path).
func (l *handlerListener) Progress(done, initial int64) { l.flush(done, initial) }

// InitialBatchDone is told once the synthetic initial batch is taken in
// (listener.Path).
func (l *handlerListener) InitialBatchDone() {
	l.initialDone.Store(true)
	l.tellSynced()
}

func (l *handlerListener) tellSynced() {
	if l.synced != nil {
		l.synced()
	}
}

func (l *handlerListener) flush(done, initial int64) {
	if done > 0 {
		l.backlog.N.Add(-done)
		l.delivered.Add(done)
		l.tel.Metrics.Delivered(int(done), l.mattrs)
	}
	if initial > 0 && l.pending.Add(-initial) == 0 {
		l.tellSynced()
	}
}

// Call makes one handler call (listener.Path).
func (l *handlerListener) Call(it *indexer.Notification) {
	if !l.observed {
		l.invoke(l.ctx, it, nil)
		return
	}
	ctx := l.ctx
	var span trace.Span
	if it.Trace != nil && l.tel.Tracing() {
		now := time.Now()
		dt := l.tel.Stage(it.Trace, telemetry.SpanListener, it.Trace.Since, now, telemetry.AttrHandler.String(l.name))
		ctx, span = l.tel.StartChild(ctx, dt, telemetry.SpanHandler, now,
			telemetry.AttrHandler.String(l.name), telemetry.AttrNotification.String(it.Type.String()))
	}
	if l.measured(span != nil) {
		start := time.Now()
		l.invoke(ctx, it, span)
		// ctx carries the handler span of a traced delta: the SDK attaches
		// it to the measurements as an exemplar.
		l.tel.Metrics.HandlerCall(ctx, it.Received, start, time.Now(), l.mattrs)
	} else {
		l.invoke(ctx, it, span)
	}
	if span != nil {
		span.End()
	}
}

// measured tells whether this call's duration and event age are recorded:
// metrics are on, and the call is traced or the histEvery-th untraced one
// (the first one included).
func (l *handlerListener) measured(traced bool) bool {
	if !l.metered {
		return false
	}
	if traced {
		return true
	}
	if l.histSkip > 0 {
		l.histSkip--
		return false
	}
	l.histSkip = l.histEvery - 1
	return true
}

// invoke runs the handler, isolating a panic: it is reported as client-go
// reports it (utilruntime.PanicHandlers, to the handler's klog logger, with
// the stack), logged with the informer's slog logger, counted and recorded
// on the handler span; then the listener goes on with the next
// notification. Unlike client-go, it neither re-panics
// (utilruntime.ReallyCrash) nor sleeps a second before the next one.
func (l *handlerListener) invoke(ctx context.Context, it *indexer.Notification, span trace.Span) {
	defer func() {
		if r := recover(); r != nil {
			l.panicked(r, it, span)
		}
	}()
	switch it.Type {
	case indexer.NotifyAdd:
		l.handler.OnAdd(ctx, it.New, it.InitialList)
	case indexer.NotifyUpdate:
		l.handler.OnUpdate(ctx, it.Old, it.New)
	case indexer.NotifyDelete:
		l.handler.OnDelete(ctx, it.New)
	}
}

// panicked reports a handler panic. It must be called straight from the
// deferred function that recovered it: the call depth given to the klog
// logger counts on it, so that the log line names the file and line that
// panicked (the frames above it: utilruntime's logPanic, panicked, the
// deferred function, the runtime's panic; as client-go's handleCrash).
func (l *handlerListener) panicked(r any, it *indexer.Notification, span trace.Span) {
	stack := string(debug.Stack())
	key := it.Key()
	l.panics.Add(1)
	l.tel.Metrics.HandlerPanic(l.mattrs)
	// The report itself is client-go's, word for word; what it cannot say
	// (which informer, handler and object) follows on a line of its own.
	pctx := klog.NewContext(context.Background(), l.logger.WithCallDepth(4))
	for _, fn := range utilruntime.PanicHandlers {
		fn(pctx, r)
	}
	l.logger.Error(nil, "Event handler panicked; its listener goes on with the next notification",
		"informer", l.tel.Info.Name, "handler", l.name, "key", key, "notification", it.Type.String())
	l.tel.Logger.Error("event handler panicked; the listener continues with the next notification",
		"informer", l.tel.Info.Name, "handler", l.name, "key", key, "notification", it.Type.String(),
		"panic", fmt.Sprint(r), "stack", stack)
	if span != nil {
		telemetry.RecordPanic(span, fmt.Errorf("handler %s panicked on %s of %q: %v", l.name, it.Type, key, r), stack)
	}
}

// listenerActor is the listener's thin actor shell: one mailbox per handler,
// so a slow handler only grows its own backlog. It decodes a message, calls
// the core and delivers what the core returned: the indexer is the PID it
// was given at spawn (not the sender of a request, so that it keeps working
// whichever stage restarted).
type listenerActor struct {
	l       *handlerListener
	indexer *actor.PID
	// runner makes a Coalesced handler's calls (see listener.RunCalls); nil for
	// the others, whose calls the listener actor makes.
	runner *actor.PID
}

func (a *listenerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *indexer.Notifications:
		a.send(ctx, a.l.core.Notifications(m, a.l))
	case *indexer.DrainMarker:
		a.send(ctx, a.l.core.DrainMarker())
	case *listener.CallsDone:
		a.send(ctx, a.l.core.CallsDone(a.l))
	case *actor.Started:
		if a.l.core.Pending != nil {
			// A child: stopped with the listener, after its running call.
			r := &handlerRunner{l: a.l}
			a.runner = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return r }))
			a.send(ctx, a.l.core.RunnerStarted())
		}
	case *actor.Stopped:
		a.l.tel.Metrics.DropBacklog(a.l.backlog)
		a.l.exit()
	}
}

// send delivers the core's messages in order.
func (a *listenerActor) send(ctx actor.Context, msgs []stage.Msg) {
	for _, m := range msgs {
		var to *actor.PID
		switch m.To {
		case stage.ToIndexer:
			to = a.indexer
		case stage.ToListener(uint64(a.l.id)):
			to = a.runner
		}
		if to == nil {
			// A bug of ours: the supervisor restarts the actor.
			panic(fmt.Sprintf("listener %s: no address for %v", a.l.name, m.To))
		}
		if m.Mode == stage.Request {
			ctx.Request(to, m.Body)
		} else {
			ctx.Send(to, m.Body)
		}
	}
	clear(msgs) // see stage.Msg
}

// handlerRunner makes a Coalesced handler's calls, one pending key per
// listener.RunCalls, so that its listener actor goes on merging meanwhile.
type handlerRunner struct{ l *handlerListener }

func (r *handlerRunner) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*listener.RunCalls); ok {
		m.Key.Run(r.l)
		ctx.Send(ctx.Parent(), listener.CallsDoneMsg)
	}
}
