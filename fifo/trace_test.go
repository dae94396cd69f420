package fifo

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

func pom(ns, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7",
	}}
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

func TestQueue_tracing(t *testing.T) {
	informertest.NeedsTracing(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel := telemetry.New(telemetry.Config{TracerProvider: tp})

	// The list span the Replace's tombstones link to.
	_, listSpan := tel.StartList(context.Background(), "0")
	listSpan.End()
	listTrace := &telemetry.DeltaTrace{Parent: listSpan.SpanContext()}
	rec.Reset()

	k := newKnown()
	k.set("ns/gone", pom("ns", "gone"))
	k.set("ns/kept", pom("ns", "kept"))
	start := time.Unix(1000, 0)
	q := New(Config{Known: k, Telemetry: tel, Clock: testingclock.NewFakePassiveClock(start)})

	q.add([]Delta{{Type: Added, Key: "ns/queued", Object: pom("ns", "queued")}})
	q.replace([]Delta{{Type: Replaced, Key: "ns/kept", Object: pom("ns", "kept")}}, "5", listTrace)

	got := popAll(t, q)
	if len(got) != 5 {
		t.Fatalf("got %s", describe(got))
	}
	tombs := got[1:3] // after the Added, before the listed item and the bookmark
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 tombstone root spans", len(spans))
	}
	for i, s := range spans {
		d := tombs[i]
		if d.Trace == nil {
			t.Fatalf("tombstone %s has no trace", d.Key)
		}
		if s.Name() != telemetry.SpanReflector {
			t.Errorf("span name %q", s.Name())
		}
		if s.Parent().IsValid() {
			t.Errorf("tombstone span is not a root")
		}
		if !s.StartTime().Equal(start) {
			t.Errorf("start %v, want %v", s.StartTime(), start)
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != listSpan.SpanContext().SpanID() {
			t.Errorf("span %s not linked to the list span: %v", d.Key, s.Links())
		}
		if d.Trace.Parent.SpanID() != s.SpanContext().SpanID() {
			t.Errorf("trace parent is not the root span")
		}
		if got := attrOf(s, telemetry.AttrDeltaType); got != "Deleted" {
			t.Errorf("delta type %q", got)
		}
		if got := attrOf(s, telemetry.AttrNamespace); got != "ns" {
			t.Errorf("namespace %q", got)
		}
	}
	// Tombstone order: the queued key, then the cache-only key.
	if attrOf(spans[0], telemetry.AttrObjectName) != "queued" || attrOf(spans[1], telemetry.AttrObjectName) != "gone" {
		t.Errorf("names %q %q", attrOf(spans[0], telemetry.AttrObjectName), attrOf(spans[1], telemetry.AttrObjectName))
	}
	if attrOf(spans[1], telemetry.AttrObjectUID) != "uid-gone" {
		t.Errorf("uid %q", attrOf(spans[1], telemetry.AttrObjectUID))
	}
	// Depth stamped when queued: the Added ahead of the first one.
	if tombs[0].Trace.QueueDepth != 1 || tombs[1].Trace.QueueDepth != 2 {
		t.Errorf("depths %d %d", tombs[0].Trace.QueueDepth, tombs[1].Trace.QueueDepth)
	}

	// Resync: Sync root spans without links.
	rec.Reset()
	k.del("ns/gone")
	q.resync()
	got = popAll(t, q)
	spans = rec.Ended()
	if len(got) != 1 || got[0].Type != Sync || got[0].Trace == nil || len(spans) != 1 {
		t.Fatalf("resync: %s, %d spans", describe(got), len(spans))
	}
	if attrOf(spans[0], telemetry.AttrDeltaType) != "Sync" || len(spans[0].Links()) != 0 {
		t.Errorf("sync span: type %q links %v", attrOf(spans[0], telemetry.AttrDeltaType), spans[0].Links())
	}

	// A merged delete records an event under its own trace.
	_, parent := tp.Tracer("test").Start(context.Background(), "root")
	parent.End()
	rec.Reset()
	dt := &telemetry.DeltaTrace{Parent: parent.SpanContext()}
	q.add([]Delta{{Type: Deleted, Key: "ns/kept", Object: pom("ns", "kept")}, {Type: Deleted, Key: "ns/kept", Object: pom("ns", "kept"), Trace: dt}})
	spans = rec.Ended()
	if len(spans) != 1 || spans[0].Name() != telemetry.SpanQueue || spans[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("merge spans: %v", spans)
	}
	ev := spans[0].Events()
	if len(ev) != 1 || ev[0].Name != EventMerged || len(ev[0].Attributes) != 1 ||
		ev[0].Attributes[0] != telemetry.AttrReason.String(ReasonDuplicateDelete) {
		t.Fatalf("merge events: %v", ev)
	}
	popAll(t, q)
}

func TestQueue_tracingNeverSampled(t *testing.T) {
	informertest.NeedsTracing(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel := telemetry.New(telemetry.Config{TracerProvider: tp})
	if !tel.Tracing() {
		t.Fatal("tracing off")
	}
	k := newKnown(o("a", 1), o("b", 1))
	q := New(Config{Known: k, Telemetry: tel})
	q.replace([]Delta{replaced("a", 1)}, "1", &telemetry.DeltaTrace{Parent: trace.SpanContext{}})
	q.resync()
	got := popAll(t, q)
	if len(got) != 3 { // tombstone, item, bookmark; the resync skips pending keys
		t.Fatalf("got %s", describe(got))
	}
	for _, d := range got {
		if d.Trace != nil {
			t.Errorf("%s %s has a trace", d.Type, d.Key)
		}
	}
	if n := len(rec.Ended()) + len(rec.Started()); n != 0 {
		t.Fatalf("%d spans recorded", n)
	}
}
