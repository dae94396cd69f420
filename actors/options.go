package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// Option configures an informer (NewSharedIndexInformer,
// NewSharedIndexInformerWithOptions, NewTyped). Most options are
// SharedOptions, which a Factory takes too; WithName and WithResource are
// for a single informer only (a factory names its informers).
type Option interface{ applyInformer(*options) }

// FactoryOption configures a Factory (NewFactory). Every SharedOption is
// one, applied to each of the factory's informers; WithNamespace,
// WithTweakListOptions and WithDynamicClient are for factories only (an
// informer is given its ListerWatcher).
type FactoryOption interface{ applyFactory(*options) }

// SharedOption is an option of both informers and factories. Given to a
// factory, it applies to each of its informers.
type SharedOption interface {
	Option
	FactoryOption
}

// sharedOption, informerOption and factoryOption are the options of each
// kind: an option compiles only where it takes effect.
type sharedOption func(*options)

func (f sharedOption) applyInformer(o *options) { f(o) }
func (f sharedOption) applyFactory(o *options)  { f(o) }

type informerOption func(*options)

func (f informerOption) applyInformer(o *options) { f(o) }

type factoryOption func(*options)

func (f factoryOption) applyFactory(o *options) { f(o) }

type options struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	logger         *slog.Logger
	system         *actor.ActorSystem
	name           string
	gvr            schema.GroupVersionResource
	maxBatch       int
	useWatchList   *bool
	pageSize       int64
	detectMutation *bool

	deltaSampler          DeltaSampler
	histogramEvery        int     // 0: DefaultHandlerHistogramEvery
	traceparentAnnotation *string // nil: DefaultTraceparentAnnotation

	attrs, spanAttrs, gaugeAttrs []attribute.KeyValue

	namespace string
	tweak     func(*metav1.ListOptions)
	transform cache.TransformFunc
	dynamic   dynamic.Interface
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.applyInformer(&o)
		}
	}
	return o
}

// buildFactoryOptions returns the factory's options and the shared ones
// among opts, for its informers.
func buildFactoryOptions(opts []FactoryOption) (options, []Option) {
	var o options
	var shared []Option
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		opt.applyFactory(&o)
		if io, ok := opt.(Option); ok {
			shared = append(shared, io)
		}
	}
	return o, shared
}

// WithTracerProvider sets the provider of the informer's tracer. The default
// is a no-op provider: no span is created and the pipeline pays nothing.
func WithTracerProvider(tp trace.TracerProvider) SharedOption {
	return sharedOption(func(o *options) { o.tracerProvider = tp })
}

// WithMeterProvider sets the provider of the informer's metrics. The default
// is a no-op provider.
func WithMeterProvider(mp metric.MeterProvider) SharedOption {
	return sharedOption(func(o *options) { o.meterProvider = mp })
}

// WithLogger sets the logger for errors the informer recovers from (dropped
// objects, watch errors, handler panics). By default they go where
// client-go's go, through klog; the metrics count these events either way. Without WithActorSystem, an
// informer or factory with a logger creates an actor system of its own that
// logs to it too; without either, informers and factories share one
// process-wide actor system.
func WithLogger(l *slog.Logger) SharedOption {
	return sharedOption(func(o *options) { o.logger = l })
}

// WithActorSystem runs the informer's actors in sys instead of the
// process-wide actor system (or one of its own, with WithLogger). The
// informer never shuts sys down.
func WithActorSystem(sys *actor.ActorSystem) SharedOption {
	return sharedOption(func(o *options) { o.system = sys })
}

// WithName names the informer in spans, metrics and logs. The default is
// derived from the example object's type. A factory names its informers
// after their resources, so it does not take this option.
func WithName(name string) Option {
	return informerOption(func(o *options) { o.name = name })
}

// WithAttributes adds attributes to the informer's root spans (the
// reflector.receive span of each delta, the list span) and to its metrics.
// Keep their values few: each set of values is a metric stream.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return informerOption(func(o *options) { o.attrs = append(o.attrs, attrs...) })
}

// WithGaugeAttributes adds attributes to the informer's gauges only (queue
// and listener backlogs, cache size and resource version): for something
// that comes and goes with the informer, as a sharded member's range does.
// The gauges stop being observed when the informer stops, so their series
// go with it, while a counter's or histogram's series stay for the life of
// the MeterProvider.
func WithGaugeAttributes(attrs ...attribute.KeyValue) Option {
	return informerOption(func(o *options) { o.gaugeAttrs = append(o.gaugeAttrs, attrs...) })
}

// WithSpanAttributes adds attributes to the informer's root spans only.
func WithSpanAttributes(attrs ...attribute.KeyValue) Option {
	return informerOption(func(o *options) { o.spanAttrs = append(o.spanAttrs, attrs...) })
}

// WithResource records the group, version and resource the informer watches,
// for span and metric attributes. A factory sets it for each of its
// informers, so it does not take this option.
func WithResource(gvr schema.GroupVersionResource) Option {
	return informerOption(func(o *options) { o.gvr = gvr })
}

// WithMaxBatch bounds the number of deltas the delta queue hands to the
// indexer in one message (default 4096).
func WithMaxBatch(n int) SharedOption {
	return sharedOption(func(o *options) { o.maxBatch = n })
}

// WithWatchList turns the reflector's WatchList streaming (a watch that
// sends the initial list as events) on or off. By default it follows
// client-go's WatchListClient feature gate, on in client-go v0.37. Either way
// it is off when the ListerWatcher says it does not support WatchList: a
// ListerWatcher made by cache.ToListWatcherWithWatchListSemantics over a
// client that says so (client-go's fake clientsets do), as client-go's
// generated informers and actors.Factory make them.
//
// When WatchList is on, the informer falls back to a list:
//   - for one sync, when the stream fails (client-go's fallback): an error
//     from the watch call or in the stream, or a stream closed at once;
//   - for good, when the stream does not send its initial-events-end
//     bookmark within 10 s (reflector.WatchListGiveUpAfter) of opening with
//     no event since, of its last event, or of its first event that is not
//     an Added one: a source that accepts the request as a plain watch, such
//     as client-go's fake clientset behind a plain cache.ListWatch, sends
//     its objects and never the bookmark. The informer logs a warning while
//     it waits (every 10 s) and when it gives up, and Stats().Reflector and
//     the actorinformer.reflector.watchlist.waiting gauge show the wait.
//
// A source that keeps sending Added events without the bookmark keeps the
// informer waiting, with the warning repeated: turn WatchList off for it.
func WithWatchList(enabled bool) SharedOption {
	return sharedOption(func(o *options) { o.useWatchList = &enabled })
}

// WithPageSize sets the page size of paginated lists (default 500).
func WithPageSize(n int64) SharedOption {
	return sharedOption(func(o *options) { o.pageSize = n })
}

// WithCacheMutationDetector turns client-go's cache mutation detector on or
// off for the informer, whatever KUBE_CACHE_MUTATION_DETECTOR says. By
// default it follows that variable, as client-go's informers do: when it is
// true, every object written to the cache is copied, and a check every
// second makes the process panic if a cached object no longer equals its
// copy (a handler or a lister's user changed an object every handler
// shares). For tests and debugging only: the copies are kept for minutes.
// Off, it costs nothing.
func WithCacheMutationDetector(enabled bool) SharedOption {
	return sharedOption(func(o *options) { o.detectMutation = &enabled })
}

// DefaultHandlerHistogramEvery is WithHandlerHistogramEvery's default.
const DefaultHandlerHistogramEvery = 8

// WithHandlerHistogramEvery sets how the per-call histograms
// (actorinformer.handler.duration and actorinformer.handler.event_age) are
// sampled when a MeterProvider is set: every call of a traced delta is
// recorded, and one in n of the others, starting with the first (default
// DefaultHandlerHistogramEvery; 1 records every call). Recording costs two
// clock reads and two histogram records per call, which the handlers' own
// calls may not be able to afford: see docs/tracing.md. n < 1 means 1.
func WithHandlerHistogramEvery(n int) SharedOption {
	return sharedOption(func(o *options) { o.histogramEvery = max(n, 1) })
}

func (o *options) handlerHistogramEvery() int {
	if o.histogramEvery == 0 {
		return DefaultHandlerHistogramEvery
	}
	return o.histogramEvery
}

// Factory-only options (FactoryOption): an informer is given its
// ListerWatcher, so they do not compile there.

// WithNamespace limits a factory's informers to one namespace.
func WithNamespace(namespace string) FactoryOption {
	return factoryOption(func(o *options) { o.namespace = namespace })
}

// WithTweakListOptions lets a factory adjust every list and watch request
// (label or field selectors, for instance).
func WithTweakListOptions(tweak func(*metav1.ListOptions)) FactoryOption {
	return factoryOption(func(o *options) { o.tweak = tweak })
}

// WithTransform sets the informer's transform, as SetTransform before Run;
// given to a factory, every informer's.
func WithTransform(t cache.TransformFunc) SharedOption {
	return sharedOption(func(o *options) { o.transform = t })
}

// WithDynamicClient gives a factory the client for ForResource (custom
// resources as *unstructured.Unstructured).
func WithDynamicClient(c dynamic.Interface) FactoryOption {
	return factoryOption(func(o *options) { o.dynamic = c })
}

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// ActorSystemOf returns the actor system opts set with WithActorSystem, nil
// when they set none. It lets packages that build informers from their
// user's options, such as ctrlruntime, honour it.
func ActorSystemOf(opts ...Option) *actor.ActorSystem {
	return buildOptions(opts).system
}

// TelemetryOf returns the tracer and meter providers and the logger opts
// set, nil for those they leave unset: for packages that build informers
// from a user's options and record spans, metrics and logs of their own
// with the same providers (package shard).
func TelemetryOf(opts ...Option) (trace.TracerProvider, metric.MeterProvider, *slog.Logger) {
	o := buildOptions(opts)
	return o.tracerProvider, o.meterProvider, o.logger
}
