package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/telemetry"
)

const (
	defaultServiceName = "actorinformer-demo"
	// defaultSampleRatio is the share of deltas traced when traces stay in
	// memory: enough to catch complete deltas, little enough to cost nothing.
	defaultSampleRatio = 0.01
)

// otelSetup holds the OpenTelemetry providers the demo hands to the
// informer. The demo never sets OpenTelemetry's globals.
type otelSetup struct {
	tracerProvider trace.TracerProvider // a no-op one when tracing is off
	meterProvider  metric.MeterProvider // nil when metrics are off
	keeper         *spanKeeper          // nil when tracing is off
	// ring and keys serve the page's traces and key search; nil when
	// tracing or the web server is off.
	ring *spanRing
	keys *keyWatch
	// deltaSampler, when not nil, is the informer's delta sampler.
	deltaSampler    actors.DeltaSampler
	traces, metrics string // what was configured, for the banner
	shutdowns       []func(context.Context) error
}

// setupTelemetry configures tracing and metrics from the standard OTEL_*
// environment variables, which the SDK and autoexport also read themselves:
//
//   - OTEL_TRACES_EXPORTER unset: traces stay in memory, sampled at
//     defaultSampleRatio unless OTEL_TRACES_SAMPLER says otherwise, and the
//     demo prints one complete delta at exit; "none": no tracing; anything
//     else (otlp, console): autoexport's exporter, sampled as
//     OTEL_TRACES_SAMPLER says (the SDK's default: every delta), and the
//     delta is printed too.
//   - OTEL_METRICS_EXPORTER unset or "none": no metrics; anything else:
//     autoexport's reader (otlp, console, prometheus).
//   - OTEL_SERVICE_NAME (default actorinformer-demo), OTEL_RESOURCE_ATTRIBUTES.
//
// handlers is the number of handlers a delta is delivered to, and
// controller whether a controller processes the deltas, so the span keeper
// knows when a delta's traces are complete. web says the web server is on:
// the span ring keeps the last spans for its page, and the deltas of the
// keys it watches are traced whatever the sampling ratio. readers are more
// metric readers (the /metrics endpoint's); with any, metrics are on
// whatever OTEL_METRICS_EXPORTER says.
func setupTelemetry(ctx context.Context, handlers int, controller, web bool, readers ...sdkmetric.Reader) (*otelSetup, error) {
	t := &otelSetup{tracerProvider: tracenoop.NewTracerProvider(), traces: "off", metrics: "off"}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", defaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	if err := t.setupTraces(ctx, res, handlers, controller, web); err != nil {
		return nil, errors.Join(err, t.shutdown(ctx))
	}
	if err := t.setupMetrics(ctx, res, readers); err != nil {
		return nil, errors.Join(err, t.shutdown(ctx))
	}
	return t, nil
}

func (t *otelSetup) setupTraces(ctx context.Context, res *resource.Resource, handlers int, controller, web bool) error {
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "none" {
		return nil
	}
	t.keeper = newSpanKeeper(handlers, controller)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSpanProcessor(t.keeper)}
	if web {
		t.keys = newKeyWatch()
		t.ring = newSpanRing(ringSpans, t.keys)
		opts = append(opts, sdktrace.WithSpanProcessor(t.ring))
	}
	// Without a sampler option the SDK follows OTEL_TRACES_SAMPLER, and
	// samples everything when it is unset.
	sampling := "every delta"
	if s := os.Getenv("OTEL_TRACES_SAMPLER"); s != "" {
		sampling = "OTEL_TRACES_SAMPLER=" + s
		if t.keys != nil {
			sampling += " (which decides for the page's watched keys too)"
		}
	} else if exporter == "" {
		// The informer's delta sampler picks the ratio of deltas, and the
		// watched keys' deltas; the provider samples every delta it is
		// handed, and the other root spans (lists, processings not linked
		// to a sampled delta) at the ratio.
		ratio := actors.SampleRatio(defaultSampleRatio)
		if t.keys != nil {
			t.deltaSampler = actors.SampleAny(ratio, t.keys.sampler)
		} else {
			t.deltaSampler = ratio
		}
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(followLinks{deltaRoots{sdktrace.TraceIDRatioBased(defaultSampleRatio)}})))
		sampling = fmt.Sprintf("%g%% of deltas and their processing", defaultSampleRatio*100)
		if t.keys != nil {
			sampling += ", every delta of the keys watched on the page"
		}
	}
	if exporter == "" {
		t.traces = "in memory, " + sampling + "; one delta printed at exit (OTEL_TRACES_EXPORTER=otlp|console|none to change)"
	} else {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return fmt.Errorf("traces exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		t.traces = "OTEL_TRACES_EXPORTER=" + exporter + ", " + sampling
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t.tracerProvider = tp
	t.shutdowns = append(t.shutdowns, tp.Shutdown)
	return nil
}

func (t *otelSetup) setupMetrics(ctx context.Context, res *resource.Resource, readers []sdkmetric.Reader) error {
	opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	for _, r := range readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	exporter := strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER"))
	if exporter != "" && exporter != "none" {
		reader, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return fmt.Errorf("metrics exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(reader))
		t.metrics = "OTEL_METRICS_EXPORTER=" + exporter
	}
	if len(opts) == 1 {
		return nil
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	t.meterProvider = mp
	t.shutdowns = append(t.shutdowns, mp.Shutdown)
	if len(readers) > 0 {
		const prom = "Prometheus text at /metrics on the demo's web server"
		if t.metrics == "off" {
			t.metrics = prom
		} else {
			t.metrics += "; " + prom
		}
	}
	return nil
}

// shutdown flushes and stops the SDK providers.
func (t *otelSetup) shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdowns {
		errs = append(errs, f(ctx))
	}
	t.shutdowns = nil
	return errors.Join(errs...)
}

// followLinks samples a root span that links to a sampled span, such as a
// workqueue.process span linked to a sampled delta's handler span, and
// leaves the others to base. Sampled apart, a delta and its processing
// would be both sampled only at the square of the ratio.
type followLinks struct{ base sdktrace.Sampler }

func (s followLinks) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	for _, l := range p.Links {
		if l.SpanContext.IsSampled() {
			return sdktrace.SamplingResult{
				Decision:   sdktrace.RecordAndSample,
				Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState(),
			}
		}
	}
	return s.base.ShouldSample(p)
}

func (s followLinks) Description() string { return "FollowLinks{" + s.base.Description() + "}" }

// deltaRoots samples every delta's root span, which the informer's delta
// sampler has already chosen, and every handover span of a sharded group
// (a few per range move), and leaves the other root spans to base.
type deltaRoots struct{ base sdktrace.Sampler }

func (s deltaRoots) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == telemetry.SpanReflector || p.Name == shard.SpanAcquire || p.Name == shard.SpanRelease {
		return sdktrace.SamplingResult{
			Decision:   sdktrace.RecordAndSample,
			Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState(),
		}
	}
	return s.base.ShouldSample(p)
}

func (s deltaRoots) Description() string { return "DeltaRoots{" + s.base.Description() + "}" }
