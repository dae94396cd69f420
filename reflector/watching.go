package reflector

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/fifo"
)

// stream is the data of a running watch: a watch's (watching) or a
// WatchList stream's (watchListing).
type stream struct {
	// requested is when the watch was requested, for timeout detection;
	// start is when it began as a normal watch (after a WatchList's
	// initial events, the end of them), for very-short-watch detection.
	requested, start time.Time
	timeout          time.Duration // the timeout it asked for
	// propagateRV: every event moves the RV on. From RV "" or "0" the
	// server first sends synthetic Added events in no RV order; only a
	// later non-Added event (nonAdded) proves the stream is past them.
	propagateRV bool
	nonAdded    bool
	events      int // events taken, for very-short-watch detection
}

// stream returns the running watch's data, nil when no watch runs.
func (m *Machine) stream() *stream {
	switch st := m.state.(type) {
	case *watching:
		return &st.stream
	case *watchListing:
		return &st.stream
	}
	return nil
}

// watching is StateWatching: a watch is open (or being opened); its
// events become Deltas.
type watching struct {
	stream
}

func (*watching) kind() State { return StateWatching }

// newStream starts the data of a new watch (or WatchList stream) and
// returns its timeout, for a new request.
func (m *Machine) newStream() (stream, *int64) {
	m.gen++
	s := int64(m.s.minTimeout.Seconds() + m.s.rand()*(m.s.maxTimeout.Seconds()-m.s.minTimeout.Seconds()))
	now := m.s.clock.Now()
	reason := m.loop.restartReason
	if reason == "" {
		reason = RestartInitial
	}
	m.loop.restartReason = RestartError // until the watch ends otherwise
	m.s.tel.Metrics.WatchRestart(reason)
	return stream{requested: now, start: now, timeout: time.Duration(s) * time.Second}, &s
}

func (m *Machine) startWatch(e *effects) {
	st, timeout := m.newStream()
	rv := m.rv()
	st.propagateRV = rv != "" && rv != "0"
	m.enter(&watching{stream: st})
	e.Watch = &WatchRequest{Gen: m.gen, Options: metav1.ListOptions{
		ResourceVersion:     rv,
		TimeoutSeconds:      timeout,
		AllowWatchBookmarks: true,
	}}
}

// watchEventsIn takes one batch of events of the running watch or
// WatchList stream. at is when the batch arrived (zero unless tracing or
// metrics are on).
func (m *Machine) watchEventsIn(e *effects, events []watch.Event, at time.Time) {
	switch st := m.state.(type) {
	case *watching:
		m.s.tel.Metrics.ReflectorReceived(len(events))
		m.stampBatch(at)
		m.watchEvents(e, st, events, at)
	case *watchListing:
		m.s.tel.Metrics.ReflectorReceived(len(events))
		m.stampBatch(at)
		m.watchListEvents(e, st, events, at)
	}
}

// watchEvents is client-go's handleWatch over one batch.
func (m *Machine) watchEvents(e *effects, w *watching, events []watch.Event, at time.Time) {
	var out *fifo.Deltas
	lastRV, rvSeen := "", false
	var streamErr error
	for i := range events {
		ev := &events[i]
		if ev.Type == watch.Error {
			// client-go stops at the error: later events are not used.
			streamErr = errorFromEvent(ev.Object)
			break
		}
		acc, ok := m.accept(ev)
		if !ok {
			continue
		}
		var t fifo.DeltaType
		switch ev.Type {
		case watch.Added:
			t = fifo.Added
		case watch.Modified:
			w.nonAdded = true
			t = fifo.Updated
		case watch.Deleted:
			w.nonAdded = true
			t = fifo.Deleted
		case watch.Bookmark:
			// A bookmark moves the RV on, here and, through the queue in
			// order with the events, in the cache (client-go's
			// store.Bookmark).
			w.nonAdded = true
			if out == nil {
				out = fifo.NewDeltas(len(events) - i)
			}
			out.Items = append(out.Items, fifo.NewBookmark(acc.GetResourceVersion()))
		default:
			m.drop(DropUnknownType, string(ev.Type), nil)
		}
		if t != 0 {
			if d, ok := m.delta(t, ev.Object, acc, string(ev.Type), at, trace.SpanContext{}); ok {
				if out == nil {
					out = fifo.NewDeltas(len(events) - i)
				}
				out.Items = append(out.Items, d)
			}
		}
		if w.propagateRV || w.nonAdded {
			lastRV, rvSeen = acc.GetResourceVersion(), true
		}
		w.events++
	}
	if out != nil {
		m.toQueue(out)
	}
	if rvSeen {
		m.setRV(lastRV)
	}
	if streamErr != nil {
		m.watchStreamError(e, streamErr)
	}
}

// watchEnded takes the close of the running watch's (or WatchList
// stream's) result channel.
func (m *Machine) watchEnded(e *effects) {
	st := m.stream()
	if st == nil {
		return
	}
	short := st.events == 0 && m.s.clock.Since(st.start) < time.Second
	if !short {
		m.loop.restartReason = RestartClosed
		if st.timeout > 0 && m.s.clock.Since(st.requested) >= st.timeout {
			m.loop.restartReason = RestartTimeout
		}
	}
	switch m.state.(type) {
	case *watching:
		if short {
			m.watchStreamError(e, &cache.VeryShortWatchError{Name: m.s.name})
			return
		}
		m.loop.retry.After(nil)
		m.s.log.Debug("Watch close", "reflector", m.s.name, "type", m.s.typeDesc, "totalItems", st.events)
		m.startWatch(e)
	case *watchListing:
		if short {
			err := &cache.VeryShortWatchError{Name: m.s.name}
			m.countError(err, false)
			m.watchListFailed(e, err)
			return
		}
		// Closed before the initial-events-end bookmark: stream again.
		m.startWatchList(e)
	}
}

// watchFailed takes the error of the running watch's (or WatchList
// stream's) call.
func (m *Machine) watchFailed(e *effects, err error) {
	switch m.state.(type) {
	case *watching:
		m.countError(err, false)
		m.loop.restartReason = restartReason(err)
		if isWatchErrorRetriable(err) {
			m.s.log.Debug("Watch failed - backing off", "reflector", m.s.name, "type", m.s.typeDesc, "err", err)
			m.waitThen(e, stepWatch)
			return
		}
		m.endListAndWatch(e, err)
	case *watchListing:
		m.countError(err, false)
		m.loop.restartReason = restartReason(err)
		m.watchListFailed(e, err)
	}
}

// watchStreamError is client-go's handling of an error that ended a watch
// (error event or very short watch): none of them reaches the watch error
// handler. 429 backs off and re-watches; internal errors re-watch at once
// while MaxInternalErrorRetryDuration allows; anything else (410 included)
// ends the ListAndWatch, so the next one relists at the last RV after the
// backoff (and at "" if that list is expired too).
func (m *Machine) watchStreamError(e *effects, err error) {
	e.StopWatch = true
	m.countError(err, true)
	m.loop.restartReason = restartReason(err)
	m.loop.retry.After(err)
	switch {
	case isExpiredError(err):
		m.s.log.Debug("Watch closed", "reflector", m.s.name, "type", m.s.typeDesc, "err", err)
		m.endListAndWatch(e, nil)
	case apierrors.IsTooManyRequests(err):
		m.s.log.Debug("Watch returned 429 - backing off", "reflector", m.s.name, "type", m.s.typeDesc)
		m.waitThen(e, stepWatch)
	case apierrors.IsInternalError(err) && m.loop.retry.ShouldRetry():
		m.s.log.Debug("Retrying watch after internal error", "reflector", m.s.name, "type", m.s.typeDesc, "err", err)
		m.startWatch(e)
	default:
		m.s.log.Warn("watch ended with error", "reflector", m.s.name, "type", m.s.typeDesc, "err", err)
		m.endListAndWatch(e, nil)
	}
}
