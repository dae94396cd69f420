package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/telemetry"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// maxPartialTraces bounds the traces the keeper follows at once; traces
// that never complete (list spans, deltas a handler was removed from) are
// forgotten to make room.
const maxPartialTraces = 256

// spanKeeper is a span processor that keeps the spans of one complete
// delta: its root span, the queue and indexer spans, a listener and handler
// span per handler, and the tracing handler's own span; with a controller,
// instead of the latter, the trace of the key's processing linked to the
// delta's handler span: its workqueue.process span and the reconcile span
// under it. It prefers an Updated delta from the watch, and stops collecting
// once it has one, so it costs nothing afterwards. Its methods may be called
// by multiple goroutines simultaneously.
type spanKeeper struct {
	handlers   int
	controller bool
	done       atomic.Bool

	mu      sync.Mutex
	partial map[trace.TraceID][]sdktrace.ReadOnlySpan
	// With a controller, the complete deltas and processings whose
	// counterpart has not ended yet: a worker may be done with a key before
	// the handler that added it returns.
	deltas, processes map[trace.TraceID][]sdktrace.ReadOnlySpan
	kept, keptProcess []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanProcessor = (*spanKeeper)(nil)

func newSpanKeeper(handlers int, controller bool) *spanKeeper {
	return &spanKeeper{
		handlers: handlers, controller: controller,
		partial: map[trace.TraceID][]sdktrace.ReadOnlySpan{},
		deltas:  map[trace.TraceID][]sdktrace.ReadOnlySpan{}, processes: map[trace.TraceID][]sdktrace.ReadOnlySpan{},
	}
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
	spans := addBounded(k.partial, id, s)
	switch {
	case k.completeDelta(spans):
		delete(k.partial, id)
		if !k.controller {
			k.keep(spans, nil)
			return
		}
		for pid, proc := range k.processes {
			if linksInto(proc, spans) {
				delete(k.processes, pid)
				k.keep(spans, proc)
				return
			}
		}
		setBounded(k.deltas, id, spans)
	case k.controller && s.Name() == aiworkqueue.SpanProcess && hasSpan(spans, userSpanName):
		delete(k.partial, id)
		for did, delta := range k.deltas {
			if linksInto(spans, delta) {
				delete(k.deltas, did)
				k.keep(delta, spans)
				return
			}
		}
		setBounded(k.processes, id, spans)
	}
}

// keep keeps a complete delta and, with a controller, its processing,
// unless an Updated delta is kept already.
func (k *spanKeeper) keep(delta, process []sdktrace.ReadOnlySpan) {
	updated := rootAttr(delta, telemetry.AttrDeltaType) == "Updated"
	if k.kept == nil || updated {
		k.kept, k.keptProcess = delta, process
	}
	if updated {
		k.done.Store(true)
		k.partial, k.deltas, k.processes = nil, nil, nil
	}
}

// addBounded appends s to m[id], first forgetting another trace if m is
// full: traces that never complete (list spans, deltas a handler was
// removed from) make room.
func addBounded(m map[trace.TraceID][]sdktrace.ReadOnlySpan, id trace.TraceID, s sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	spans, ok := m[id]
	if !ok {
		makeRoom(m)
	}
	spans = append(spans, s)
	m[id] = spans
	return spans
}

func setBounded(m map[trace.TraceID][]sdktrace.ReadOnlySpan, id trace.TraceID, spans []sdktrace.ReadOnlySpan) {
	makeRoom(m)
	m[id] = spans
}

func makeRoom(m map[trace.TraceID][]sdktrace.ReadOnlySpan) {
	if len(m) < maxPartialTraces {
		return
	}
	for old := range m {
		delete(m, old)
		return
	}
}

// completeDelta reports whether spans hold a whole delta's trace: with a
// controller up to the handler spans, without one also the tracing
// handler's span.
func (k *spanKeeper) completeDelta(spans []sdktrace.ReadOnlySpan) bool {
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
	return root == 1 && queue >= 1 && apply >= 1 && deliver >= k.handlers && handler >= k.handlers && (k.controller || user >= 1)
}

func hasSpan(spans []sdktrace.ReadOnlySpan, name string) bool {
	return slices.ContainsFunc(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name })
}

// linksInto reports whether a span of from links to a span of to.
func linksInto(from, to []sdktrace.ReadOnlySpan) bool {
	for _, s := range from {
		for _, l := range s.Links() {
			for _, t := range to {
				if t.SpanContext().SpanID() == l.SpanContext.SpanID() && t.SpanContext().TraceID() == l.SpanContext.TraceID() {
					return true
				}
			}
		}
	}
	return false
}

// Kept returns the spans of the delta kept so far and those of its
// processing (nil without a controller), or nils.
func (k *spanKeeper) Kept() (delta, process []sdktrace.ReadOnlySpan) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.kept), slices.Clone(k.keptProcess)
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

// writeSpanTree prints the spans of each trace as an indented tree,
// children in start order, with each span's start offset from the first
// root of the first trace and its duration. Under a span with links, a line
// names each linked span (if among those printed) and its trace.
func writeSpanTree(w io.Writer, traces ...[]sdktrace.ReadOnlySpan) {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, spans := range traces {
		for _, s := range spans {
			byID[s.SpanContext().SpanID()] = s
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int {
		return cmp.Or(a.StartTime().Compare(b.StartTime()), cmp.Compare(a.Name(), b.Name()))
	}
	type line struct {
		label string
		s     sdktrace.ReadOnlySpan // nil: a link line, label is all
	}
	var lines []line
	var t0 time.Time
	for _, spans := range traces {
		children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
		var roots []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if p := s.Parent().SpanID(); s.Parent().IsValid() && byID[p] != nil {
				children[p] = append(children[p], s)
			} else {
				roots = append(roots, s)
			}
		}
		if len(roots) == 0 {
			continue
		}
		slices.SortFunc(roots, byStart)
		for _, c := range children {
			slices.SortFunc(c, byStart)
		}
		if t0.IsZero() {
			t0 = roots[0].StartTime()
		}
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
			bar := "   "
			if len(kids) > 0 {
				bar = "│  "
			}
			for _, l := range s.Links() {
				from := "span " + l.SpanContext.SpanID().String() + " (not shown)"
				if t, ok := byID[l.SpanContext.SpanID()]; ok {
					from = strings.TrimSpace(t.Name() + " " + spanDetails(t))
				}
				lines = append(lines, line{label: prefix + bar + "linked from " + from + " in trace " + l.SpanContext.TraceID().String()})
			}
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
	}
	width := 0
	for _, l := range lines {
		if l.s != nil {
			width = max(width, utf8.RuneCountInString(l.label))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "  %-*s %9s %9s\n", width, "span", "start", "duration")
	for _, l := range lines {
		if l.s == nil {
			fmt.Fprintf(w, "  %s\n", l.label)
			continue
		}
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
	case aiworkqueue.SpanProcess:
		add("item=", attr(s, aiworkqueue.AttrItem))
		add("adds=", attr(s, aiworkqueue.AttrAdds))
		if wait, err := strconv.ParseFloat(attr(s, aiworkqueue.AttrWait), 64); err == nil {
			add("wait=", fmtDuration(time.Duration(wait*float64(time.Second))))
		}
		add("requeues=", attr(s, aiworkqueue.AttrRequeues))
	case userSpanName:
		add("", attr(s, "demo.event"))
		add("", attr(s, "demo.key"))
		add("", attr(s, "demo.result"))
		add("rv=", attr(s, "demo.rv"))
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
