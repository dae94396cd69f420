package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"
)

// DeltaInfo is what a DeltaSampler sees of one delta, before any span work.
type DeltaInfo struct {
	// Type is the delta's type: Added, Updated, Deleted (watch deltas and
	// tombstones), Replaced (list items) or Sync (resyncs).
	Type cache.DeltaType
	// Key is the object's cache key: "namespace/name", or "name" for a
	// cluster-scoped object.
	Key string
	// Object is the object as the handlers get it: after the transform; a
	// tombstone's is a cache.DeletedFinalStateUnknown.
	Object any
	// ResourceVersion is the object's resourceVersion (for a tombstone, that
	// of the last known object, or "" when there is none).
	ResourceVersion string
}

// DeltaSampler chooses which deltas are traced. SampleDelta is called once
// per delta, on the pipeline's hot path, by the reflector and by the delta
// queue (tombstones, resyncs), possibly from several goroutines at once; it
// must be quick and must not block.
type DeltaSampler interface {
	SampleDelta(d DeltaInfo) bool
}

// Choose reports whether a delta goes on to the tracer provider, whose
// sampler then has the last word: false when tracing is off or the
// informer's DeltaSampler does not choose it; true otherwise (always, when
// there is no DeltaSampler).
func (t *T) Choose(d DeltaInfo) bool {
	if CompiledOut || t.tracer == nil {
		return false
	}
	return t.sampler == nil || t.sampler.SampleDelta(d)
}

// traceparentKey is the W3C Trace Context header the propagator reads.
const traceparentKey = "traceparent"

// traceparentCarrier presents one annotation value as the traceparent
// header to propagation.TraceContext.
type traceparentCarrier string

func (c traceparentCarrier) Get(key string) string {
	if key == traceparentKey {
		return string(c)
	}
	return ""
}
func (traceparentCarrier) Set(string, string) {}
func (traceparentCarrier) Keys() []string     { return []string{traceparentKey} }

// ParseTraceparent parses a W3C traceparent value ("00-<trace id>-<span
// id>-<flags>") with OpenTelemetry's TraceContext propagator. ok is false
// when the value is malformed.
func ParseTraceparent(v string) (sc trace.SpanContext, ok bool) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), traceparentCarrier(v))
	sc = trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// writerLink links span to the span context in the object's traceparent
// annotation, if it has a valid one. A malformed value is counted and
// logged at debug level, nothing more.
func (t *T) writerLink(span trace.Span, meta *ObjectMeta) {
	if t.traceparent == "" || meta.Annotations == nil {
		return
	}
	v := meta.Annotations[t.traceparent]
	if v == "" {
		return
	}
	sc, ok := ParseTraceparent(v)
	if !ok {
		t.Metrics.MalformedTraceparent()
		if len(v) > maxLoggedValue {
			v = v[:maxLoggedValue] + "…"
		}
		t.Logger.Debug("ignoring a malformed traceparent annotation", "informer", t.Info.Name,
			"namespace", meta.Namespace, "name", meta.Name, "annotation", t.traceparent, "value", v)
		return
	}
	span.AddLink(trace.Link{SpanContext: sc})
}

// maxLoggedValue bounds how much of a malformed annotation is logged.
const maxLoggedValue = 128
