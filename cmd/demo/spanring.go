package main

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/telemetry"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// ringSpans is how many ended spans the span ring keeps.
const ringSpans = 4096

// ringHandovers is how many handover spans (shard.acquire, shard.release)
// the span ring keeps apart from the others, so that the deltas' spans do
// not push them out.
const ringHandovers = 512

// spanRing is a span processor that keeps the last ringSpans ended spans,
// grouped by trace, for the page's waterfalls: it needs no collector. Its
// memory is bounded by the span count. A span the ring drops to make room
// is the oldest one; a trace goes when its last span does. It also tells
// keys (when not nil) about the deltas of the watched keys. Its methods
// may be called by multiple goroutines simultaneously.
type spanRing struct {
	keys *keyWatch

	mu     sync.Mutex
	buf    []sdktrace.ReadOnlySpan // circular, ended order
	next   int
	traces map[trace.TraceID]*ringTrace
	// handovers are the last ringHandovers handover spans, oldest first.
	handovers []sdktrace.ReadOnlySpan
}

// ringTrace is the spans of one trace in the ring, in ended order.
type ringTrace struct {
	spans []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanProcessor = (*spanRing)(nil)

func newSpanRing(size int, keys *keyWatch) *spanRing {
	return &spanRing{keys: keys, buf: make([]sdktrace.ReadOnlySpan, size), traces: map[trace.TraceID]*ringTrace{}}
}

func (r *spanRing) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *spanRing) Shutdown(context.Context) error                  { return nil }
func (r *spanRing) ForceFlush(context.Context) error                { return nil }

func (r *spanRing) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	id := s.SpanContext().TraceID()
	r.mu.Lock()
	if n := s.Name(); n == shard.SpanAcquire || n == shard.SpanRelease {
		if len(r.handovers) == ringHandovers {
			r.handovers = slices.Delete(r.handovers, 0, 1)
		}
		r.handovers = append(r.handovers, s)
		r.mu.Unlock()
		return
	}
	if old := r.buf[r.next]; old != nil {
		oid := old.SpanContext().TraceID()
		if t := r.traces[oid]; t != nil {
			if i := slices.Index(t.spans, old); i >= 0 {
				t.spans = slices.Delete(t.spans, i, i+1)
			}
			if len(t.spans) == 0 {
				delete(r.traces, oid)
			}
		}
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	t := r.traces[id]
	if t == nil {
		t = &ringTrace{}
		r.traces[id] = t
	}
	t.spans = append(t.spans, s)
	r.mu.Unlock()
	if r.keys != nil && s.Name() == telemetry.SpanReflector {
		r.keys.record(s)
	}
}

// handoverTraces returns the kept handover spans of range rng, each as a
// trace of its own, latest first.
func (r *spanRing) handoverTraces(rng int, limit int) []traceJSON {
	r.mu.Lock()
	spans := slices.Clone(r.handovers)
	r.mu.Unlock()
	out := []traceJSON{}
	for i := len(spans) - 1; i >= 0 && len(out) < limit; i-- {
		s := spans[i]
		if !hasIntAttr(s, shard.AttrRange, int64(rng)) {
			continue
		}
		id := s.SpanContext().TraceID()
		v := ringView{traces: map[trace.TraceID][]sdktrace.ReadOnlySpan{id: {s}}}
		out = append(out, v.describe(id))
	}
	return out
}

func hasIntAttr(s sdktrace.ReadOnlySpan, k attribute.Key, v int64) bool {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.AsInt64() == v
		}
	}
	return false
}

// The page's traces: GET /api/traces, /api/trace and the traces of
// /api/key. With a sharded group, MemberID, Member and Range say which
// member's informer of which range recorded the trace (the root span's
// shard.AttrMember and shard.AttrRange); Member is the demo's name for the member.
type traceJSON struct {
	TraceID    string     `json:"trace_id"`
	Root       string     `json:"root"` // the root span's name
	Key        string     `json:"key"`  // the object's ns/name, "" when none
	Start      string     `json:"start"`
	DurationMs float64    `json:"duration_ms"`
	Stages     int        `json:"stages"` // distinct stages among the spans
	MemberID   string     `json:"member_id,omitempty"`
	Member     string     `json:"member,omitempty"`
	Range      *int       `json:"range,omitempty"`
	Spans      []spanJSON `json:"spans"`
	end        time.Time
}

// spanJSON is one span; StartMs is its start's offset from the trace's.
// The spans of a controller's processing trace, which links to a handler
// span of this trace, are included: their parent_id is "" and their links
// point into this trace.
type spanJSON struct {
	SpanID     string         `json:"span_id"`
	ParentID   string         `json:"parent_id"`
	Name       string         `json:"name"`
	Stage      string         `json:"stage"`
	StartMs    float64        `json:"start_ms"`
	DurationMs float64        `json:"duration_ms"`
	Attrs      map[string]any `json:"attrs"`
	Links      []linkJSON     `json:"links"`
	TraceID    string         `json:"-"`
}

type linkJSON struct {
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

// view is a consistent copy of the ring's traces.
type ringView struct {
	traces map[trace.TraceID][]sdktrace.ReadOnlySpan
	// folded maps a processing trace to the trace it continues: its root
	// span, not a delta's, links to a span of that trace.
	folded    map[trace.TraceID]trace.TraceID
	followers map[trace.TraceID][]trace.TraceID
}

func (r *spanRing) view() ringView {
	r.mu.Lock()
	v := ringView{traces: make(map[trace.TraceID][]sdktrace.ReadOnlySpan, len(r.traces))}
	for id, t := range r.traces {
		v.traces[id] = slices.Clone(t.spans)
	}
	r.mu.Unlock()
	v.folded = map[trace.TraceID]trace.TraceID{}
	v.followers = map[trace.TraceID][]trace.TraceID{}
	for id, spans := range v.traces {
		for _, s := range spans {
			if s.Parent().IsValid() || s.Name() == telemetry.SpanReflector {
				continue
			}
			for _, l := range s.Links() {
				to := l.SpanContext.TraceID()
				if _, ok := v.traces[to]; ok && to != id {
					v.folded[id] = to
					v.followers[to] = append(v.followers[to], id)
					break
				}
			}
		}
	}
	return v
}

// list returns up to limit traces of deltas and lists, most recent first
// (view "recent") or slowest first ("slowest"). Processing traces are
// shown within the delta's trace they continue, and not listed apart;
// those of deltas not traced, sampled on their own, only by get.
func (r *spanRing) list(view string, limit int) []traceJSON {
	v := r.view()
	out := make([]traceJSON, 0, len(v.traces))
	for id := range v.traces {
		if _, ok := v.folded[id]; ok {
			continue
		}
		t := v.describe(id)
		if t.Root == aiworkqueue.SpanProcess {
			continue
		}
		out = append(out, t)
	}
	if view == "slowest" {
		slices.SortFunc(out, func(a, b traceJSON) int {
			return cmp.Or(cmp.Compare(b.DurationMs, a.DurationMs), strings.Compare(a.TraceID, b.TraceID))
		})
	} else {
		slices.SortFunc(out, func(a, b traceJSON) int {
			return cmp.Or(b.end.Compare(a.end), strings.Compare(a.TraceID, b.TraceID))
		})
	}
	return out[:min(limit, len(out))]
}

// get returns the trace id, with the processing traces that continue it,
// or false if the ring does not have it.
func (r *spanRing) get(id trace.TraceID) (traceJSON, bool) {
	v := r.view()
	if _, ok := v.traces[id]; !ok {
		return traceJSON{}, false
	}
	return v.describe(id), true
}

func (v ringView) describe(id trace.TraceID) traceJSON {
	spans := slices.Clone(v.traces[id])
	for _, f := range v.followers[id] {
		spans = append(spans, v.traces[f]...)
	}
	slices.SortStableFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	t := traceJSON{TraceID: id.String(), Spans: make([]spanJSON, 0, len(spans))}
	if len(spans) == 0 {
		return t
	}
	start, end := spans[0].StartTime(), spans[0].EndTime()
	var root sdktrace.ReadOnlySpan
	for _, s := range spans {
		end = later(end, s.EndTime())
		if root == nil && !s.Parent().IsValid() && s.SpanContext().TraceID() == id {
			root = s
		}
	}
	if root == nil {
		root = spans[0]
	}
	t.Root = root.Name()
	t.Key = spanKey(root)
	for _, kv := range root.Attributes() {
		switch kv.Key {
		case shard.AttrMember:
			t.MemberID = kv.Value.AsString()
		case shard.AttrRange:
			r := int(kv.Value.AsInt64())
			t.Range = &r
		}
	}
	t.Start = start.UTC().Format(time.RFC3339Nano)
	t.DurationMs = ms(end.Sub(start))
	t.end = end
	stages := map[string]struct{}{}
	for _, s := range spans {
		sj := spanJSON{
			SpanID:     s.SpanContext().SpanID().String(),
			Name:       s.Name(),
			Stage:      spanStage(s),
			StartMs:    ms(s.StartTime().Sub(start)),
			DurationMs: ms(s.EndTime().Sub(s.StartTime())),
			Attrs:      map[string]any{},
			Links:      []linkJSON{},
			TraceID:    s.SpanContext().TraceID().String(),
		}
		if s.Parent().IsValid() {
			sj.ParentID = s.Parent().SpanID().String()
		}
		for _, kv := range s.Attributes() {
			sj.Attrs[string(kv.Key)] = kv.Value.AsInterface()
		}
		if st := s.Status(); st.Code == codes.Error {
			sj.Attrs["otel.status_code"] = "ERROR"
			sj.Attrs["otel.status_description"] = st.Description
		}
		for _, e := range s.Events() {
			sj.Attrs["event."+e.Name] = e.Time.Sub(start).Seconds() * 1000
		}
		for _, l := range s.Links() {
			sj.Links = append(sj.Links, linkJSON{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String()})
		}
		if t.Key == "" {
			t.Key = spanKey(s)
		}
		stages[sj.Stage] = struct{}{}
		t.Spans = append(t.Spans, sj)
	}
	t.Stages = len(stages)
	return t
}

// spanStage is the pipeline stage a span belongs to: reflector, fifo,
// indexer, the handler's name, workqueue, or reconcile.
func spanStage(s sdktrace.ReadOnlySpan) string {
	name := s.Name()
	switch name {
	case telemetry.SpanListener, telemetry.SpanHandler:
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.AttrHandler {
				return kv.Value.AsString()
			}
		}
		return name
	case userSpanName:
		return "reconcile"
	case aiworkqueue.SpanProcess:
		return "workqueue"
	}
	if stage, _, ok := strings.Cut(name, "."); ok {
		return stage
	}
	return name
}

// spanKey is the object key of a delta's span (ns/name), or the demo's
// demo.key attribute, or "".
func spanKey(s sdktrace.ReadOnlySpan) string {
	var ns, name, key string
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case telemetry.AttrNamespace:
			ns = kv.Value.AsString()
		case telemetry.AttrObjectName:
			name = kv.Value.AsString()
		case "demo.key", aiworkqueue.AttrItem:
			key = kv.Value.Emit()
		}
	}
	switch {
	case name != "" && ns != "":
		return ns + "/" + name
	case name != "":
		return name
	}
	return key
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
