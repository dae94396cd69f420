package reflector

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/telemetry"
)

// watchListing is StateWatchListing: a WatchList stream is in flight; its
// initial events collect until the initial-events-end bookmark turns them
// into one Replace, and the same watch goes on as a normal one.
type watchListing struct {
	stream
	items []fifo.Delta   // in arrival order; Type 0 marks a deleted one
	index map[string]int // key → index in items
	holes int            // deleted entries in items
	rv    string         // RV of the last event past the synthetic Added ones
	span  trace.Span     // the sync's list span; nil when not tracing
	wait  bookmarkWait   // the wait for the initial-events-end bookmark
}

func (*watchListing) kind() State { return StateWatchListing }

func (m *Machine) startWatchList(e *effects) {
	st, timeout := m.newStream()
	m.syncStarted()
	wl := &watchListing{stream: st, index: map[string]int{}}
	rv := m.rewatchRV()
	m.enter(wl)
	if m.s.tracing {
		_, wl.span = m.s.tel.StartList(context.Background(), rv)
	}
	m.s.tel.Metrics.Relist()
	e.Watch = &WatchRequest{Gen: m.gen, WatchList: true, Options: metav1.ListOptions{
		ResourceVersion:      rv,
		AllowWatchBookmarks:  true,
		SendInitialEvents:    ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		TimeoutSeconds:       timeout,
	}}
}

// watchListFailed is client-go's watchList error path: back off and retry
// on connection refused / 429, retry at once from RV "" on expired or too
// large, fall back to a list otherwise.
func (m *Machine) watchListFailed(e *effects, err error) {
	wl, _ := m.state.(*watchListing)
	switch {
	case isWatchErrorRetriable(err):
		m.s.log.Debug("watch-list failed - backing off", "reflector", m.s.name, "type", m.s.typeDesc, "err", err)
		wl.endSpan(err)
		m.waitThen(e, stepWatchList)
	case isExpiredError(err) || isTooLargeResourceVersionError(err):
		m.sync.rvUnavailable = true
		m.startWatchList(e)
	default:
		m.s.log.Debug("Data couldn't be fetched in watchlist mode. Falling back to regular list.",
			"reflector", m.s.name, "type", m.s.typeDesc, "err", err)
		wl.endSpan(err)
		m.startList(e)
	}
}

// endSpan ends the stream's list span, recording err if any; once.
func (wl *watchListing) endSpan(err error) {
	if wl == nil || wl.span == nil {
		return
	}
	if err != nil {
		wl.span.RecordError(err)
		wl.span.SetStatus(codes.Error, err.Error())
	}
	wl.span.End()
	wl.span = nil
}

// watchListEvents is client-go's handleListWatch over one batch: objects
// collect in a temporary store until the initial-events-end bookmark.
func (m *Machine) watchListEvents(e *effects, wl *watchListing, events []watch.Event, at time.Time) {
	var link trace.SpanContext
	if wl.span != nil {
		link = wl.span.SpanContext()
	}
	for i := range events {
		ev := &events[i]
		if ev.Type == watch.Error {
			err := errorFromEvent(ev.Object)
			e.StopWatch = true
			m.countError(err, true)
			m.loop.restartReason = restartReason(err)
			m.watchListFailed(e, err)
			return
		}
		acc, ok := m.accept(ev)
		if !ok {
			continue
		}
		done := false
		switch ev.Type {
		case watch.Added:
			m.wlPut(wl, ev, acc, at, link)
		case watch.Modified:
			wl.nonAdded = true
			m.wlPut(wl, ev, acc, at, link)
		case watch.Deleted:
			wl.nonAdded = true
			m.wlDelete(wl, ev)
		case watch.Bookmark:
			wl.nonAdded = true
			done = acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		default:
			m.drop(DropUnknownType, string(ev.Type), nil)
		}
		if wl.nonAdded {
			wl.rv = acc.GetResourceVersion()
		}
		wl.events++
		if done {
			w := m.finishWatchList(wl)
			// The same watch goes on as a normal one.
			m.watchEvents(e, w, events[i+1:], at)
			return
		}
	}
	if !wl.wait.opened.IsZero() {
		wl.wait.observe(m.s.clock.Now(), len(events), wl.nonAdded)
	}
}

func (m *Machine) wlPut(wl *watchListing, ev *watch.Event, acc metav1.Object, at time.Time, link trace.SpanContext) {
	d, ok := m.delta(fifo.Replaced, ev.Object, acc, string(ev.Type), at, link)
	if !ok {
		return
	}
	if i, ok := wl.index[d.Key]; ok {
		wl.items[i] = d
		return
	}
	wl.index[d.Key] = len(wl.items)
	wl.items = append(wl.items, d)
}

func (m *Machine) wlDelete(wl *watchListing, ev *watch.Event) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(ev.Object)
	if err != nil {
		m.drop(DropNoKey, string(ev.Type), err)
		return
	}
	if i, ok := wl.index[key]; ok {
		wl.items[i] = fifo.Delta{}
		delete(wl.index, key)
		wl.holes++
	}
}

// finishWatchList emits the one Replace of a WatchList sync and turns the
// stream into a normal watch, which it returns.
func (m *Machine) finishWatchList(wl *watchListing) *watching {
	items := wl.items
	if wl.holes > 0 {
		kept := items[:0]
		for _, d := range items {
			if d.Type != 0 {
				kept = append(kept, d)
			}
		}
		clear(items[len(kept):])
		items = kept
	}
	if items == nil {
		items = []fifo.Delta{}
	}
	rv := wl.rv
	rep := &fifo.Replace{Items: items, ResourceVersion: rv}
	if wl.span != nil {
		wl.span.SetAttributes(telemetry.AttrListItems.Int(len(items)))
		rep.ListTrace = &telemetry.DeltaTrace{Parent: wl.span.SpanContext(), Since: m.s.clock.Now()}
	}
	m.toQueue(rep)
	m.listTimed()
	m.sync.rvUnavailable = false
	m.setRV(rv)
	m.synced(true)
	m.s.log.Debug("Caches populated by watch-list", "reflector", m.s.name, "type", m.s.typeDesc, "items", len(items), "resourceVersion", rv)

	w := &watching{stream: wl.stream}
	w.propagateRV = true
	w.events = 0
	w.nonAdded = false
	w.start = m.s.clock.Now()
	m.enter(w)
	return w
}
