package listener

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/telemetry"
)

// EventHandler is what a listener calls: the methods of
// actors.ContextEventHandler, which is one.
type EventHandler interface {
	OnAdd(ctx context.Context, obj any, isInInitialList bool)
	OnUpdate(ctx context.Context, oldObj, newObj any)
	OnDelete(ctx context.Context, obj any)
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Handler is the handler called.
	Handler EventHandler
	// Name names it in spans, metrics and logs.
	Name string
	// Context is the handlers' context, cancelled when the informer
	// stops; nil: context.Background().
	Context context.Context
	// Telemetry is the informer's; nil: telemetry.Nop().
	Telemetry *telemetry.T
	// Counters are the listener's, the core's too; nil: counted nowhere.
	Counters *Counters
	// Logger reports a panic of the handler, as client-go's
	// processorListener does; nil: klog.Background().
	Logger *klog.Logger
	// HistogramEvery: with metrics on, the duration and event age of every
	// traced call, and of one in HistogramEvery of the others, are
	// recorded; below 1: every call's.
	HistogramEvery int
	// Removed and Halted, when not nil, stop the calls once set: the
	// handler was removed, the informer stopped. A listener in the middle
	// of a large batch then drops the rest (as client-go's listeners drop
	// what they hold when stopped) instead of delaying the stop.
	Removed, Halted *atomic.Bool
	// Synced is told when the handler's registration may have synced:
	// the last pending initial-list notification was done, or the initial
	// batch. Nil: nobody.
	Synced func()
	// Exited is told once the listener actor has stopped (after its
	// handler runner, if any): no call is running or to come. Nil: nobody.
	Exited func()
}

// Handler is a listener's handler call path: it performs what the
// listener's core sends its handler (stage.ToHandler), the Calls of a
// batch, making each call in order, isolated from panics, traced and
// measured, and accounting for them in the listener's Counters. Only the
// listener's actor (or a Coalesced handler's runner) calls it, one call at
// a time.
type Handler struct {
	h        EventHandler
	name     string
	ctx      context.Context
	tel      *telemetry.T
	counters *Counters
	logger   klog.Logger
	removed  *atomic.Bool
	halted   *atomic.Bool
	synced   func()
	exited   func()
	mattrs   metric.MeasurementOption
	// observed is set when tracing or metrics are on (both are fixed when
	// the informer is built): otherwise call goes straight to the handler.
	observed bool
	// metered is set when metrics are on; histSkip counts down the
	// untraced calls to skip before the next measured one (see measured).
	metered   bool
	histEvery int
	histSkip  int
}

// NewHandler returns the call path cfg describes.
func NewHandler(cfg HandlerConfig) *Handler {
	h := &Handler{
		h: cfg.Handler, name: cfg.Name, ctx: cfg.Context, tel: cfg.Telemetry, counters: cfg.Counters,
		removed: cfg.Removed, halted: cfg.Halted, synced: cfg.Synced, exited: cfg.Exited, histEvery: max(1, cfg.HistogramEvery),
	}
	if h.ctx == nil {
		h.ctx = context.Background()
	}
	if h.tel == nil {
		h.tel = telemetry.Nop()
	}
	if h.counters == nil {
		h.counters = &Counters{}
	}
	if cfg.Logger != nil {
		h.logger = *cfg.Logger
	} else {
		h.logger = klog.Background()
	}
	h.mattrs = h.tel.Metrics.HandlerAttrs(h.name)
	h.observed = h.tel.Tracing() || h.tel.Metrics.Enabled()
	h.metered = h.tel.Metrics.Enabled()
	return h
}

// active reports whether the handler may still be called.
func (h *Handler) active() bool {
	return (h.removed == nil || !h.removed.Load()) && (h.halted == nil || !h.halted.Load())
}

func (h *Handler) tellSynced() {
	if h.synced != nil {
		h.synced()
	}
}

// Call makes the calls c asks for, in order: a Sync notification only if
// c.Syncs, none once the handler is removed or the informer stopped; and
// accounts for each, every CounterFlush and at the end. Then it releases
// the indexer's batch c views, if any: c's items must not be read after.
func (h *Handler) Call(c *Calls) {
	defer c.release()
	var done, initial int64
	items := c.Items
	for i := range items {
		it := &items[i]
		if it.InitialList {
			initial++
		}
		if (!it.Sync || c.Syncs) && h.active() {
			h.call(it)
		}
		if c.Owned {
			// Ours alone: let go of the objects as soon as they are
			// delivered rather than when the whole batch is.
			*it = indexer.Notification{}
		}
		if done++; done >= CounterFlush {
			h.account(done, initial)
			done, initial = 0, 0
		}
	}
	h.account(done, initial)
	if c.InitialBatch {
		h.counters.InitialDone.Store(true)
		h.tellSynced()
	}
}

// account counts done notifications, initial of them initial-list ones.
func (h *Handler) account(done, initial int64) {
	if h.counters.Done(done, initial) {
		h.tellSynced()
	}
}

// call makes one handler call.
func (h *Handler) call(it *indexer.Notification) {
	if !h.observed {
		h.invoke(h.ctx, it, nil)
		return
	}
	ctx := h.ctx
	var span trace.Span
	if it.Trace != nil && h.tel.Tracing() {
		now := time.Now()
		dt := h.tel.Stage(it.Trace, telemetry.SpanListener, it.Trace.Since, now, telemetry.AttrHandler.String(h.name))
		ctx, span = h.tel.StartChild(ctx, dt, telemetry.SpanHandler, now,
			telemetry.AttrHandler.String(h.name), telemetry.AttrNotification.String(it.Type.String()))
	}
	if h.measured(span != nil) {
		start := time.Now()
		h.invoke(ctx, it, span)
		// ctx carries the handler span of a traced delta: the SDK attaches
		// it to the measurements as an exemplar.
		h.tel.Metrics.HandlerCall(ctx, it.Received, start, time.Now(), h.mattrs)
	} else {
		h.invoke(ctx, it, span)
	}
	if span != nil {
		span.End()
	}
}

// measured tells whether this call's duration and event age are recorded:
// metrics are on, and the call is traced or the histEvery-th untraced one
// (the first one included).
func (h *Handler) measured(traced bool) bool {
	if !h.metered {
		return false
	}
	if traced {
		return true
	}
	if h.histSkip > 0 {
		h.histSkip--
		return false
	}
	h.histSkip = h.histEvery - 1
	return true
}

// invoke runs the handler, isolating a panic: it is reported as client-go
// reports it (utilruntime.PanicHandlers, to the handler's klog logger, with
// the stack), logged with the informer's slog logger, counted and recorded
// on the handler span; then the listener goes on with the next
// notification. Unlike client-go, it neither re-panics
// (utilruntime.ReallyCrash) nor sleeps a second before the next one.
func (h *Handler) invoke(ctx context.Context, it *indexer.Notification, span trace.Span) {
	defer func() {
		if r := recover(); r != nil {
			h.panicked(r, it, span)
		}
	}()
	switch it.Type {
	case indexer.NotifyAdd:
		h.h.OnAdd(ctx, it.New, it.InitialList)
	case indexer.NotifyUpdate:
		h.h.OnUpdate(ctx, it.Old, it.New)
	case indexer.NotifyDelete:
		h.h.OnDelete(ctx, it.New)
	}
}

// panicked reports a handler panic. It must be called straight from the
// deferred function that recovered it: the call depth given to the klog
// logger counts on it, so that the log line names the file and line that
// panicked (the frames above it: utilruntime's logPanic, panicked, the
// deferred function, the runtime's panic; as client-go's handleCrash).
func (h *Handler) panicked(r any, it *indexer.Notification, span trace.Span) {
	stack := string(debug.Stack())
	key := it.Key()
	h.counters.Panics.Add(1)
	h.tel.Metrics.HandlerPanic(h.mattrs)
	// The report itself is client-go's, word for word; what it cannot say
	// (which informer, handler and object) follows on a line of its own.
	pctx := klog.NewContext(context.Background(), h.logger.WithCallDepth(4))
	for _, fn := range utilruntime.PanicHandlers {
		fn(pctx, r)
	}
	h.logger.Error(nil, "Event handler panicked; its listener goes on with the next notification",
		"informer", h.tel.Info.Name, "handler", h.name, "key", key, "notification", it.Type.String())
	if h.tel.LoggerGiven {
		h.tel.Logger.Error("event handler panicked; the listener continues with the next notification",
			"informer", h.tel.Info.Name, "handler", h.name, "key", key, "notification", it.Type.String(),
			"panic", fmt.Sprint(r), "stack", stack)
	}
	if span != nil {
		telemetry.RecordPanic(span, fmt.Errorf("handler %s panicked on %s of %q: %v", h.name, it.Type, key, r), stack)
	}
}

// release lets go of the indexer's batch c views, if any (see
// indexer.Notifications.Release).
func (c *Calls) release() {
	if b := c.batch; b != nil {
		c.batch, c.Items = nil, nil
		b.Release()
	}
}
