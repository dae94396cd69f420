package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/internal/telemetry"
)

// maxPartialTraces bounds the traces the keeper follows at once; traces
// that never complete (list spans, deltas a handler was removed from) are
// forgotten to make room.
const maxPartialTraces = 256

// spanKeeper is a span processor that keeps the spans of one complete
// delta: its root span, the queue and indexer spans, a listener and handler
// span per handler, and the tracing handler's own span. It prefers an
// Updated delta from the watch, and stops collecting once it has one, so it
// costs nothing afterwards. Its methods may be called by multiple goroutines
// simultaneously.
type spanKeeper struct {
	handlers int
	done     atomic.Bool

	mu      sync.Mutex
	partial map[trace.TraceID][]sdktrace.ReadOnlySpan
	kept    []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanProcessor = (*spanKeeper)(nil)

func newSpanKeeper(handlers int) *spanKeeper {
	return &spanKeeper{handlers: handlers, partial: map[trace.TraceID][]sdktrace.ReadOnlySpan{}}
}

func (k *spanKeeper) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (k *spanKeeper) Shutdown(context.Context) error                  { return nil }
func (k *spanKeeper) ForceFlush(context.Context) error                { return nil }

func (k *spanKeeper) OnEnd(s sdktrace.ReadOnlySpan) {
	if k.done.Load() {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done.Load() {
		return
	}
	id := s.SpanContext().TraceID()
	spans, ok := k.partial[id]
	if !ok && len(k.partial) >= maxPartialTraces {
		for old := range k.partial {
			delete(k.partial, old)
			break
		}
	}
	spans = append(spans, s)
	k.partial[id] = spans
	if !k.complete(spans) {
		return
	}
	delete(k.partial, id)
	if k.kept == nil || rootAttr(spans, telemetry.AttrDeltaType) == "Updated" {
		k.kept = spans
	}
	if rootAttr(spans, telemetry.AttrDeltaType) == "Updated" {
		k.done.Store(true)
		k.partial = nil
	}
}

func (k *spanKeeper) complete(spans []sdktrace.ReadOnlySpan) bool {
	var root, queue, apply, deliver, handler, user int
	for _, s := range spans {
		switch s.Name() {
		case telemetry.SpanReflector:
			root++
		case telemetry.SpanQueue:
			queue++
		case telemetry.SpanIndexer:
			apply++
		case telemetry.SpanListener:
			deliver++
		case telemetry.SpanHandler:
			handler++
		case userSpanName:
			user++
		}
	}
	return root == 1 && queue >= 1 && apply >= 1 && deliver >= k.handlers && handler >= k.handlers && user >= 1
}

// Kept returns the spans of the delta kept so far, or nil.
func (k *spanKeeper) Kept() []sdktrace.ReadOnlySpan {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.kept)
}

func rootAttr(spans []sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, s := range spans {
		if s.Name() == telemetry.SpanReflector {
			return attr(s, key)
		}
	}
	return ""
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// writeSpanTree prints spans as an indented tree, children in start order,
// with each span's start offset from the first root and its duration.
func writeSpanTree(w io.Writer, spans []sdktrace.ReadOnlySpan) {
	if len(spans) == 0 {
		return
	}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent().SpanID(); s.Parent().IsValid() && ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int {
		return cmp.Or(a.StartTime().Compare(b.StartTime()), cmp.Compare(a.Name(), b.Name()))
	}
	slices.SortFunc(roots, byStart)
	for _, c := range children {
		slices.SortFunc(c, byStart)
	}

	type line struct {
		label string
		s     sdktrace.ReadOnlySpan
	}
	var lines []line
	var walk func(s sdktrace.ReadOnlySpan, prefix, branch string)
	walk = func(s sdktrace.ReadOnlySpan, prefix, branch string) {
		lines = append(lines, line{prefix + branch + s.Name(), s})
		switch branch {
		case "├─ ":
			prefix += "│  "
		case "└─ ":
			prefix += "   "
		}
		kids := children[s.SpanContext().SpanID()]
		for i, c := range kids {
			if i == len(kids)-1 {
				walk(c, prefix, "└─ ")
			} else {
				walk(c, prefix, "├─ ")
			}
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	width := 0
	for _, l := range lines {
		width = max(width, utf8.RuneCountInString(l.label))
	}
	t0 := roots[0].StartTime()
	fmt.Fprintf(w, "  %-*s %9s %9s\n", width, "span", "start", "duration")
	for _, l := range lines {
		pad := strings.Repeat(" ", width-utf8.RuneCountInString(l.label))
		fmt.Fprintf(w, "  %s%s %9s %9s  %s\n", l.label, pad,
			"+"+fmtDuration(l.s.StartTime().Sub(t0)), fmtDuration(l.s.EndTime().Sub(l.s.StartTime())), spanDetails(l.s))
	}
}

// spanDetails picks the attributes worth a glance.
func spanDetails(s sdktrace.ReadOnlySpan) string {
	var parts []string
	add := func(label, v string) {
		if v != "" {
			parts = append(parts, label+v)
		}
	}
	switch s.Name() {
	case telemetry.SpanReflector:
		add("", attr(s, telemetry.AttrDeltaType))
		add("", joinKey(attr(s, telemetry.AttrNamespace), attr(s, telemetry.AttrObjectName)))
		add("rv=", attr(s, telemetry.AttrResourceVersion))
	case telemetry.SpanQueue:
		add("depth=", attr(s, telemetry.AttrQueueDepth))
	case telemetry.SpanIndexer:
		add("batch=", attr(s, telemetry.AttrBatchSize))
		add("notify=", attr(s, telemetry.AttrNotification))
	case telemetry.SpanListener, telemetry.SpanHandler:
		h := attr(s, telemetry.AttrHandler)
		add("handler=", h[strings.LastIndexByte(h, '/')+1:])
	case userSpanName:
		add("", attr(s, "demo.event"))
		add("", attr(s, "demo.key"))
	}
	if st := s.Status(); st.Code == codes.Error {
		parts = append(parts, "ERROR: "+st.Description)
	}
	return strings.Join(parts, " ")
}

func joinKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// fmtDuration is a short, fixed-precision duration: 12µs, 3.45ms, 1.20s.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
