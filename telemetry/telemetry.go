package telemetry

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every tracer and meter the
// library creates.
const ScopeName = "github.com/actorinformer/actorinformer"

// Span names, one per stage a delta crosses. docs/tracing.md lists them.
const (
	SpanReflector = "reflector.receive" // root: the reflector got the delta from a watch, list or resync
	SpanList      = "reflector.list"    // one list or relist call; item traces link to it
	SpanQueue     = "fifo.queue"        // time in the delta queue, until the indexer takes it
	SpanIndexer   = "indexer.apply"     // the indexer applying the delta to the cache
	SpanListener  = "listener.deliver"  // time in one listener's mailbox
	SpanHandler   = "handler"           // one handler's execution
)

// Attribute keys. The library's keys (these, package workqueue's and
// package shard's) have one scheme, OpenTelemetry's naming conventions: a
// semantic convention's key where one fits (k8s.namespace.name), otherwise
// actorinformer.{object}.{property} (a package's own keys under its name:
// actorinformer.workqueue.*, actorinformer.shard.*), lower case, words
// joined by underscores. AttrAPIGroup, AttrAPIVersion and AttrAPIResource
// are the informer's Kubernetes API group, version and resource.
const (
	AttrNamespace           = attribute.Key("k8s.namespace.name")
	AttrObjectName          = attribute.Key("actorinformer.object.name")
	AttrObjectUID           = attribute.Key("actorinformer.object.uid")
	AttrResourceVersion     = attribute.Key("actorinformer.object.resource_version")
	AttrDeltaType           = attribute.Key("actorinformer.delta.type")
	AttrInformer            = attribute.Key("actorinformer.informer.name")
	AttrAPIGroup            = attribute.Key("actorinformer.api.group")
	AttrAPIVersion          = attribute.Key("actorinformer.api.version")
	AttrAPIResource         = attribute.Key("actorinformer.api.resource")
	AttrHandler             = attribute.Key("actorinformer.handler.name")
	AttrQueueDepth          = attribute.Key("actorinformer.queue.depth")
	AttrBatchSize           = attribute.Key("actorinformer.batch.size")
	AttrNotification        = attribute.Key("actorinformer.notification.type")
	AttrListItems           = attribute.Key("actorinformer.list.items")
	AttrListResourceVersion = attribute.Key("actorinformer.list.resource_version")
	AttrReason              = attribute.Key("actorinformer.reason")
	AttrListKind            = attribute.Key("actorinformer.list.kind")
)

// DeltaTrace is the trace state one delta carries from stage to stage inside
// the pipeline's own messages. Parent is the span the next stage's span is a
// child of; Since is when the delta entered its current hop, which becomes
// the next span's start time. A nil *DeltaTrace means "not sampled": no stage
// creates a span for it.
type DeltaTrace struct {
	Parent trace.SpanContext
	Since  time.Time
	// QueueDepth is the delta queue's length when the delta was enqueued.
	QueueDepth int
	// ctx, when not nil, is a background context carrying the Parent span,
	// kept from the tracer call that made it so that the next stage does not
	// rebuild it (two allocations per span).
	ctx context.Context
}

// context returns a context carrying dt.Parent, derived from base unless dt
// already has one derived from context.Background.
func (dt *DeltaTrace) context(base context.Context) context.Context {
	if dt.ctx != nil && base == context.Background() {
		return dt.ctx
	}
	return trace.ContextWithSpanContext(base, dt.Parent)
}

// Config is what an informer hands to its stages.
type Config struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Logger         *slog.Logger
	// Informer describes the informer for span and metric attributes.
	Informer InformerInfo
	// QueuedItems and ProcessingLatency are the delta queue's metrics of a
	// client-go cache.InformerMetricsProvider (nil: none), fed as client-go's
	// RealFIFO feeds them.
	QueuedItems       GaugeMetric
	ProcessingLatency HistogramMetric
	// DeltaSampler, when not nil, chooses the deltas that go on to the
	// provider's sampler (Choose); the others get no span work at all.
	DeltaSampler DeltaSampler
	// TraceparentAnnotation names the object annotation holding the W3C
	// traceparent of the writer's span, which a sampled delta's root span
	// links to; "" turns the link off.
	TraceparentAnnotation string
	// Attributes are added to the informer's root spans and metrics (a
	// sharded informer's group, member and range); SpanAttributes to its
	// root spans only (values that change too often for a metric stream).
	Attributes, SpanAttributes []attribute.KeyValue
	// GaugeAttributes are added to the informer's gauges only (queue and
	// listener backlogs, cache size and resource version, WatchList wait):
	// attributes of something that comes and goes with the informer (a
	// sharded member's range). The gauges stop being observed when the
	// informer stops, so their series go with it; the counters' and
	// histograms' series stay for the life of the MeterProvider.
	GaugeAttributes []attribute.KeyValue
}

// GaugeMetric is client-go's cache.GaugeMetric.
type GaugeMetric interface{ Set(float64) }

// HistogramMetric is client-go's cache.HistogramMetric.
type HistogramMetric interface{ Observe(float64) }

// InformerInfo names the informer and the resource it watches.
type InformerInfo struct {
	Name                     string
	Group, Version, Resource string
}

// T is the per-informer telemetry handle. Its methods may be called by
// multiple goroutines simultaneously.
type T struct {
	// LoggerGiven: Logger is the user's (WithLogger), not klog's default;
	// reports that klog gets anyway (a handler panic's) go to it as well.
	LoggerGiven bool
	tracer      trace.Tracer // nil when the provider is a no-op one
	Logger      *slog.Logger
	Metrics     *Metrics
	Info        InformerInfo
	base        []attribute.KeyValue
	baseSet     metric.MeasurementOption
	// gauge: base plus the gauge-only attributes, on the gauges.
	gauge    []attribute.KeyValue
	gaugeSet metric.MeasurementOption
	// spanBase: base plus the span-only attributes, on root spans.
	spanBase []attribute.KeyValue

	// QueuedItems is set to the number of queued deltas whenever the queue
	// changes; ProcessingLatency observes, in seconds, how long the indexer
	// takes to apply a batch and hand it to the listeners. Nil: not fed.
	QueuedItems       GaugeMetric
	ProcessingLatency HistogramMetric

	roots     atomic.Pointer[rootOptions] // the last shared root span options
	lastStart atomic.Int64                // UnixNano of the last root span's start
	kind      trace.SpanStartOption       // the root spans' kind, boxed once

	sampler     DeltaSampler // nil: every delta goes to the provider
	traceparent string       // annotation with the writer's traceparent; "": none
}

// New builds a T. Nil providers and logger mean no-op.
func New(cfg Config) *T {
	t := &T{Logger: cfg.Logger, Info: cfg.Informer, kind: trace.WithSpanKind(trace.SpanKindConsumer),
		QueuedItems: cfg.QueuedItems, ProcessingLatency: cfg.ProcessingLatency,
		sampler: cfg.DeltaSampler, traceparent: cfg.TraceparentAnnotation}
	t.LoggerGiven = t.Logger != nil
	if t.Logger == nil {
		t.Logger = KlogLogger()
	}
	if !CompiledOut && cfg.TracerProvider != nil && !isNoopTracerProvider(cfg.TracerProvider) {
		t.tracer = cfg.TracerProvider.Tracer(ScopeName)
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	t.base = []attribute.KeyValue{
		AttrInformer.String(cfg.Informer.Name),
		AttrAPIGroup.String(cfg.Informer.Group),
		AttrAPIVersion.String(cfg.Informer.Version),
		AttrAPIResource.String(cfg.Informer.Resource),
	}
	t.base = append(t.base, cfg.Attributes...)
	t.baseSet = metric.WithAttributeSet(attribute.NewSet(t.base...))
	t.spanBase = append(slices.Clip(t.base), cfg.SpanAttributes...)
	t.gauge = append(slices.Clip(t.base), cfg.GaugeAttributes...)
	t.gaugeSet = metric.WithAttributeSet(attribute.NewSet(t.gauge...))
	t.Metrics = newMetrics(mp.Meter(ScopeName), t)
	return t
}

// KlogLogger is the logger of an informer given none: the informer's log
// lines go where client-go's go, through klog.
func KlogLogger() *slog.Logger {
	return slog.New(keepAttrs{h: logr.ToSlogHandler(klog.Background()), attrs: [][]slog.Attr{nil}})
}

// keepAttrs is a slog.Handler that keeps the attributes and groups of
// Logger.With and WithGroup itself and gives them to the handler it wraps
// with each record: klog's slog handler (v2.140) drops them, so that a
// logger's "member" or "group" never reached klog's output.
type keepAttrs struct {
	h      slog.Handler
	groups []string
	// attrs[i] were added with i groups open (len(groups)+1 entries).
	attrs [][]slog.Attr
}

func (k keepAttrs) Enabled(ctx context.Context, l slog.Level) bool { return k.h.Enabled(ctx, l) }

func (k keepAttrs) Handle(ctx context.Context, r slog.Record) error {
	inner := slices.Clone(k.attrs[len(k.groups)])
	r.Attrs(func(a slog.Attr) bool {
		inner = append(inner, a)
		return true
	})
	for i := len(k.groups) - 1; i >= 0; i-- {
		group := make([]any, len(inner))
		for j, a := range inner {
			group[j] = a
		}
		inner = append(slices.Clone(k.attrs[i]), slog.Group(k.groups[i], group...))
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(inner...)
	return k.h.Handle(ctx, out)
}

func (k keepAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return k
	}
	attrs := slices.Clone(k.attrs)
	last := len(attrs) - 1
	attrs[last] = append(slices.Clip(attrs[last]), as...)
	return keepAttrs{h: k.h, groups: k.groups, attrs: attrs}
}

func (k keepAttrs) WithGroup(name string) slog.Handler {
	if name == "" {
		return k
	}
	return keepAttrs{h: k.h, groups: append(slices.Clip(k.groups), name), attrs: append(slices.Clip(k.attrs), nil)}
}

// Nop returns a T that records nothing.
func Nop() *T { return New(Config{Logger: slog.New(slog.DiscardHandler)}) }

func isNoopTracerProvider(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return true
	}
	// The deprecated trace.NewNoopTracerProvider has an unexported type.
	return reflect.TypeOf(tp).String() == "trace.noopTracerProvider"
}

// Tracing reports whether spans may be created at all.
func (t *T) Tracing() bool { return !CompiledOut && t != nil && t.tracer != nil }

// BaseAttributes are the informer-level attributes put on root spans.
func (t *T) BaseAttributes() []attribute.KeyValue { return t.spanBase }

// ObjectMeta is the little the root span needs to know about an object.
type ObjectMeta struct {
	Namespace, Name, UID, ResourceVersion string
	// Annotations, when not nil, are searched for the writer's traceparent
	// (Config.TraceparentAnnotation), once the span is known to record.
	Annotations map[string]string
}

// StartDelta opens and closes the root span of one delta: the reflector
// receiving it at start and handing it on now. link, when valid, points at
// the list span the delta came from; a valid traceparent in meta.Annotations
// adds a link to the writer's span. It returns nil when tracing is off or the
// sampler drops the delta. Callers ask Choose first: StartDelta does not.
//
// Most deltas are not sampled, so what happens before the sampler decides is
// kept to the SDK's own cost: the sampler sees the span name, kind and link
// but not the attributes, which are set only once the span is known to
// record; and the start options are shared by the deltas of one batch.
func (t *T) StartDelta(deltaType string, meta ObjectMeta, start time.Time, link trace.SpanContext) *DeltaTrace {
	if CompiledOut || t.tracer == nil {
		return nil
	}
	// context.Background has no span, so the span is a root without
	// trace.WithNewRoot, which would cost the SDK two allocations.
	ctx, span := t.tracer.Start(context.Background(), SpanReflector, t.rootOptions(start, link)...)
	if !span.IsRecording() {
		span.End()
		return nil
	}
	attrs := make([]attribute.KeyValue, 0, len(t.spanBase)+5)
	attrs = append(attrs, t.spanBase...)
	attrs = append(attrs,
		AttrDeltaType.String(deltaType),
		AttrNamespace.String(meta.Namespace),
		AttrObjectName.String(meta.Name),
		AttrObjectUID.String(meta.UID),
		AttrResourceVersion.String(meta.ResourceVersion),
	)
	span.SetAttributes(attrs...)
	t.writerLink(span, &meta)
	now := time.Now()
	span.End(trace.WithTimestamp(now))
	return &DeltaTrace{Parent: span.SpanContext(), Since: now, ctx: ctx}
}

// rootOptions are the root span's start options. The deltas of a list, or
// of a watch batch, share start and link: from the second delta with the same
// start on, the options built for it are reused, as boxing them costs
// allocations for every delta otherwise. A lone delta gets its options
// directly, which costs fewer allocations than building a shared set.
func (t *T) rootOptions(start time.Time, link trace.SpanContext) []trace.SpanStartOption {
	if c := t.roots.Load(); c != nil && c.start == start && c.link.Equal(link) {
		return c.opts
	}
	if ns := start.UnixNano(); t.lastStart.Swap(ns) != ns {
		if link.IsValid() {
			return []trace.SpanStartOption{trace.WithTimestamp(start), t.kind, trace.WithLinks(trace.Link{SpanContext: link})}
		}
		return []trace.SpanStartOption{trace.WithTimestamp(start), t.kind}
	}
	c := &rootOptions{start: start, link: link}
	c.opts = []trace.SpanStartOption{trace.WithTimestamp(start), t.kind}
	if link.IsValid() {
		c.opts = append(c.opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	t.roots.Store(c)
	return c.opts
}

type rootOptions struct {
	start time.Time
	link  trace.SpanContext
	opts  []trace.SpanStartOption // read-only once stored
}

// StartList opens the span of one list call. The caller ends it. When
// tracing is off it returns a non-recording span whose context is invalid.
func (t *T) StartList(ctx context.Context, resourceVersion string) (context.Context, trace.Span) {
	if CompiledOut || t.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.tracer.Start(ctx, SpanList, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append([]attribute.KeyValue{AttrListResourceVersion.String(resourceVersion)}, t.spanBase...)...))
}

// Stage records one finished stage span (start..end) as a child of
// dt.Parent and returns the trace state for the next hop, starting at end.
// dt must not be nil.
func (t *T) Stage(dt *DeltaTrace, name string, start, end time.Time, attrs ...attribute.KeyValue) *DeltaTrace {
	ctx, span := t.tracer.Start(dt.context(context.Background()), name, trace.WithTimestamp(start))
	if len(attrs) > 0 {
		// Set here rather than as a start option: one copy fewer.
		span.SetAttributes(attrs...)
	}
	span.End(trace.WithTimestamp(end))
	return &DeltaTrace{Parent: span.SpanContext(), Since: end, ctx: ctx}
}

// StartChild opens a span as a child of dt.Parent starting at start and
// returns it with a context carrying it; the caller ends it. Used for handler
// spans, whose context is handed to context-aware handlers.
func (t *T) StartChild(base context.Context, dt *DeltaTrace, name string, start time.Time, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(trace.ContextWithSpanContext(base, dt.Parent), name, trace.WithTimestamp(start))
	if len(attrs) > 0 {
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// Event adds a zero-length span named name under dt, used to record that a
// delta was dropped or merged (the span's event says why).
func (t *T) Event(dt *DeltaTrace, spanName, event string, attrs ...attribute.KeyValue) {
	if CompiledOut || dt == nil || t.tracer == nil {
		return
	}
	_, span := t.tracer.Start(dt.context(context.Background()), spanName)
	span.AddEvent(event, trace.WithAttributes(attrs...))
	span.End()
}

// RecordPanic marks span as failed by a handler panic.
func RecordPanic(span trace.Span, err error, stack string) {
	span.RecordError(err, trace.WithAttributes(attribute.String("exception.stacktrace", stack)))
	span.SetStatus(codes.Error, err.Error())
}
