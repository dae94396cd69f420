package actors

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/telemetry"
)

// handlerListener is the informer's side of one handler's listener: the
// listener stage's core (package listener), and the handler call path it
// hands its calls to (listener.Handler), which isolates panics, records
// spans and metrics and keeps the counters. Only the listener's actor (or
// a Coalesced handler's runner) makes the calls, so the struct needs no
// lock; the atomics are read by other goroutines (HasSynced, Stats,
// metrics).
type handlerListener struct {
	core    *listener.Core
	id      indexer.ListenerID
	name    string
	handler ContextEventHandler
	ctx     context.Context
	// coalesce is set for a Coalesced handler.
	coalesce bool
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

	// counters are the listener's progress; counters.Backlog is backlog's,
	// the listener backlog gauge's value.
	counters listener.Counters
	backlog  *telemetry.Backlog
	panics   atomic.Int64
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
	l := &handlerListener{
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
	l.counters.Backlog = &l.backlog.N
	l.counters.Metrics, l.counters.Attrs = tel.Metrics, l.mattrs
	return l
}

// newCore makes the listener's core, once its options are final (Run, or
// AddEventHandler on a running informer).
func (l *handlerListener) newCore() *listener.Core {
	l.core = listener.NewCore(listener.Config{ID: l.id, Coalesce: l.coalesce, Counters: &l.counters})
	return l.core
}

// exit closes exited; later calls do nothing.
func (l *handlerListener) exit() {
	l.exitOnce.Do(func() { close(l.exited) })
}

// Exited is told when the listener actor has stopped (listener.Handler).
func (l *handlerListener) Exited() {
	l.tel.Metrics.DropBacklog(l.backlog)
	l.exit()
}

// Report takes what the listener's core reports (listener.Handler): its
// registration may have synced.
func (l *handlerListener) Report(any) { l.tellSynced() }

// active reports whether the handler may still be called.
func (l *handlerListener) active() bool { return !l.removed.Load() && !l.halted.Load() }

func (l *handlerListener) tellSynced() {
	if l.synced != nil {
		l.synced()
	}
}

// Call makes the calls c asks for, in order (listener.Handler): a Sync
// notification only if c.Syncs, none once the handler is removed or the
// informer stopped; and accounts for each, every listener.CounterFlush
// and at the end.
func (l *handlerListener) Call(c *listener.Calls) {
	var done, initial int64
	items := c.Items
	for i := range items {
		it := &items[i]
		if it.InitialList {
			initial++
		}
		if (!it.Sync || c.Syncs) && l.active() {
			l.call(it)
		}
		if c.Owned {
			// Ours alone: let go of the objects as soon as they are
			// delivered rather than when the whole batch is.
			*it = indexer.Notification{}
		}
		if done++; done >= listener.CounterFlush {
			l.account(done, initial)
			done, initial = 0, 0
		}
	}
	l.account(done, initial)
	if c.InitialBatch {
		l.counters.InitialDone.Store(true)
		l.tellSynced()
	}
}

// account counts done notifications, initial of them initial-list ones.
func (l *handlerListener) account(done, initial int64) {
	if l.counters.Done(done, initial) {
		l.tellSynced()
	}
}

// call makes one handler call.
func (l *handlerListener) call(it *indexer.Notification) {
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
	if l.tel.LoggerGiven {
		l.tel.Logger.Error("event handler panicked; the listener continues with the next notification",
			"informer", l.tel.Info.Name, "handler", l.name, "key", key, "notification", it.Type.String(),
			"panic", fmt.Sprint(r), "stack", stack)
	}
	if span != nil {
		telemetry.RecordPanic(span, fmt.Errorf("handler %s panicked on %s of %q: %v", l.name, it.Type, key, r), stack)
	}
}
