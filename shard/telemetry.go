package shard

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/actorinformer/actorinformer/actors"
)

// Span and metric attributes of a sharded informer, under
// actorinformer.shard.* as OpenTelemetry's naming conventions ask of keys
// without a semantic convention. The range informers' root spans
// (reflector.receive, the list span) carry group, member name and id,
// range and epoch; their counters and histograms group and member name,
// their gauges the range too (see rangeTelemetry). No metric carries the
// member id, which changes at each start and rejoin: its series would
// churn.
const (
	// AttrGroup is the group's name.
	AttrGroup = attribute.Key("actorinformer.shard.group.name")
	// AttrMember is the member's id (its cluster member id), new at each
	// start and rejoin: on spans only.
	AttrMember = attribute.Key("actorinformer.shard.member.id")
	// AttrMemberName is the member's name (WithMemberName, by default the
	// host's: on Kubernetes the pod's), which stays across rejoins: on
	// spans and metrics.
	AttrMemberName = attribute.Key("actorinformer.shard.member.name")
	// AttrRange is the range's index.
	AttrRange = attribute.Key("actorinformer.shard.range.index")
	// AttrKind is the key of a kind AddKind added to the group (its
	// resource, such as secrets); New's kind has none, so its series are
	// those of a one-kind group.
	AttrKind = attribute.Key("actorinformer.shard.kind")
	// AttrEpoch is the epoch of the handover that gave the member the range.
	AttrEpoch = attribute.Key("actorinformer.shard.epoch")
	// AttrPeer is the other member of a handover span: where the range came
	// from (shard.acquire) or went to (shard.release).
	AttrPeer = attribute.Key("actorinformer.shard.peer.id")
	// AttrFilterMode is the filter mode (server, client, pending).
	AttrFilterMode = attribute.Key("actorinformer.shard.filter.mode")
	// AttrDirection is a handover's direction: acquire or release.
	AttrDirection = attribute.Key("actorinformer.shard.handover.direction")
)

// The handover spans: a range listed until its handlers get it
// (SpanAcquire, on the new owner), a range given up until its last handler
// call has ended (SpanRelease, on the old owner). Both are root spans.
const (
	SpanAcquire = "shard.acquire"
	SpanRelease = "shard.release"
)

// ScopeName is the instrumentation scope of the sharded informer's own
// spans and metrics.
const ScopeName = "github.com/actorinformer/actorinformer/shard"

// HandoverBuckets are the bucket boundaries, in seconds, of the handover
// duration histogram: 5 ms to 2 minutes. An acquisition takes one list of
// the range (milliseconds for a few objects, seconds for tens of
// thousands); a release, the end of the handlers' calls on it, or up to
// the leave timeout (30 s by default).
var HandoverBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// UnservedBuckets are the bucket boundaries, in seconds, of the unserved
// time histogram: 1 ms to 2 minutes. A graceful move leaves a range undelivered
// for a lease write and a catch-up (milliseconds); a range taken from a
// member that was lost, for its list and the wait for that member's lease
// to go void (seconds).
var UnservedBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

type shardTelemetry struct {
	tracer    trace.Tracer
	handovers metric.Int64Counter
	duration  metric.Float64Histogram
	unserved  metric.Float64Histogram
	reg       metric.Registration
	// base returns the metrics' group and member name attributes; spans
	// those and the member's id, which is known only once its group actor
	// has seen it in a topology, after New.
	base  func() []attribute.KeyValue
	spans func() []attribute.KeyValue
}

func newShardTelemetry(s *Informer) *shardTelemetry {
	tp, mp, _ := actors.TelemetryOf(s.o.actorOpts...)
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	t := &shardTelemetry{tracer: tp.Tracer(ScopeName), base: s.baseAttrs, spans: s.spanAttrs}
	m := mp.Meter(ScopeName)
	t.handovers, _ = m.Int64Counter("actorinformer.shard.handovers", metric.WithDescription("Ranges acquired and released by this member."))
	t.duration, _ = m.Float64Histogram("actorinformer.shard.handover.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(HandoverBuckets...),
		metric.WithDescription("How long a handover took on this member: from listing the range to delivering it (acquire), or from the ask to the end of the last handler call (release)."))
	t.unserved, _ = m.Float64Histogram("actorinformer.shard.range.unserved", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(UnservedBuckets...),
		metric.WithDescription("How long each range this member acquired went undelivered, as it sees it: from its record seen released by the previous deliverer, or without that from the start of its list, to its handlers getting the range."))
	owned, _ := m.Int64ObservableGauge("actorinformer.shard.ranges", metric.WithDescription("Ranges this member delivers."))
	objects, _ := m.Int64ObservableGauge("actorinformer.shard.range.objects", metric.WithDescription("Objects cached per delivered range."))
	mode, _ := m.Int64ObservableGauge("actorinformer.shard.filter.mode", metric.WithDescription("1 for the filter mode in effect (actorinformer.shard.filter.mode: server, client or pending)."))
	dropped, _ := m.Int64ObservableCounter("actorinformer.shard.filtered", metric.WithDescription("Objects received from the API server outside the requested ranges, dropped on the client."))
	undelivered, _ := m.Int64ObservableGauge("actorinformer.shard.group.undelivered", metric.WithDescription("Ranges of the group that no member of this member's view delivers, as far as it knows (Status().Undelivered); not observed while the member is out of its group."))
	t.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		base := s.baseAttrs()
		act := *s.delivered.Load()
		o.ObserveInt64(owned, int64(len(act)), metric.WithAttributes(base...))
		kinds := s.allKinds()
		for _, ri := range act {
			for _, k := range kinds {
				attrs := append(k.kindAttrs(base), AttrRange.Int(ri.r.Index))
				o.ObserveInt64(objects, int64(cacheLen(ri.of(k).inf.GetIndexer())), metric.WithAttributes(attrs...))
			}
		}
		o.ObserveInt64(mode, 1, metric.WithAttributes(append(base[:len(base):len(base)], AttrFilterMode.String(s.filter.Mode().String()))...))
		o.ObserveInt64(dropped, s.filter.dropped.Load(), metric.WithAttributes(base...))
		if u := s.undelivered(); u != nil {
			o.ObserveInt64(undelivered, int64(len(u)), metric.WithAttributes(base...))
		}
		return nil
	}, owned, objects, mode, dropped, undelivered)
	return t
}

// kindAttrs are attrs, capped so that an append copies them, with the
// kind's key for an added kind.
func (s *Informer) kindAttrs(attrs []attribute.KeyValue) []attribute.KeyValue {
	out := attrs[:len(attrs):len(attrs)]
	if s.kindKey != "" {
		out = append(out, AttrKind.String(s.kindKey))
	}
	return out
}

// rangeTelemetry are a range informer's name and attributes: its spans
// carry the group, member name and id, range and epoch; its counters and
// histograms the group and member name only, so that a released range or
// an earlier incarnation leaves no series behind (they would stay for the
// life of the MeterProvider); its gauges, which stop with it, the range
// too.
func (s *Informer) rangeTelemetry(r Range, epoch uint64) []actors.Option {
	return []actors.Option{
		actors.WithName("shard." + s.group),
		actors.WithAttributes(s.kindAttrs(s.baseAttrs())...),
		actors.WithSpanAttributes(AttrMember.String(string(s.member())), AttrRange.Int(r.Index), AttrEpoch.Int64(int64(epoch))),
		actors.WithGaugeAttributes(AttrRange.Int(r.Index)),
	}
}

func (t *shardTelemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// startHandover starts a handover span (shard.acquire, shard.release): a
// root span with the group, member, range and epoch.
func (t *shardTelemetry) startHandover(ctx context.Context, name string, r Range, epoch uint64) trace.Span {
	attrs := append(t.spans(), AttrRange.Int(r.Index), AttrEpoch.Int64(int64(epoch)))
	_, span := t.tracer.Start(context.WithoutCancel(ctx), name, trace.WithNewRoot(), trace.WithAttributes(attrs...))
	return span
}

func (t *shardTelemetry) endHandover(span trace.Span, direction, peer string, took time.Duration) {
	if span != nil {
		span.SetAttributes(AttrPeer.String(peer))
		span.End()
	}
	attrs := metric.WithAttributes(append(t.base(), AttrDirection.String(direction))...)
	t.handovers.Add(context.Background(), 1, attrs)
	t.duration.Record(context.Background(), took.Seconds(), attrs)
}

// recordUnserved records an acquired range's unserved time (Handover.Unserved).
func (t *shardTelemetry) recordUnserved(d time.Duration) {
	t.unserved.Record(context.Background(), d.Seconds(), metric.WithAttributes(t.base()...))
}

func (t *shardTelemetry) abortHandover(span trace.Span) {
	if span != nil {
		span.SetStatus(codes.Error, "the range's owner changed while it was listed")
		span.End()
	}
}
