package reflector

import (
	"fmt"
	"time"
)

// The wait of a WatchList stream for its initial-events-end bookmark.
//
// A source that cannot stream lists may still accept the WatchList request
// as a plain watch: client-go's fake clientsets behind a plain
// cache.ListWatch (one not made by cache.ToListWatcherWithWatchListSemantics)
// send the objects they hold as Added events and never the bookmark. The
// informer cannot sync before the bookmark, so it would wait forever, as
// client-go's reflector does (it logs every 10 s and keeps waiting).
//
// The reflector logs the same way, and falls back once the stream shows it
// will not send the bookmark. kube-apiserver sends it about a second after
// the last initial event (its cacher dispatches bookmarks every second,
// jittered by 0.25), so a stream that has not sent it
//
//   - WatchListGiveUpAfter after it opened, with no event since or ever, or
//   - WatchListGiveUpAfter after its first event that is not Added (the
//     initial events are all Added and come first: a Modified or Deleted
//     event, or a plain bookmark, proves they are over)
//
// is taken as a source without WatchList: the reflector turns WatchList off
// for the informer's life and lists and watches instead. A stream still
// delivering Added events keeps waiting (a large list takes time), with the
// warning repeated every WatchListWarnEvery.
const (
	// WatchListWarnEvery is how often a stream still waiting for its
	// initial-events-end bookmark is logged (client-go's 10 s).
	WatchListWarnEvery = 10 * time.Second
	// WatchListGiveUpAfter bounds the wait for the initial-events-end
	// bookmark of a stream that is quiet or past its initial events.
	WatchListGiveUpAfter = 10 * time.Second
)

// ReasonNoInitialEventsEnd is the watch error metric's reason for a WatchList
// stream given up for want of its initial-events-end bookmark.
const ReasonNoInitialEventsEnd = "no_initial_events_end"

// errNoInitialEventsEnd is why a WatchList stream was given up.
type errNoInitialEventsEnd struct {
	events int
	waited time.Duration
}

func (e *errNoInitialEventsEnd) Error() string {
	return fmt.Sprintf("the WatchList stream sent %d events and no initial-events-end bookmark in %v: the source does not support WatchList",
		e.events, e.waited.Round(time.Millisecond))
}

// bookmarkWait is a WatchList stream's wait for its initial-events-end
// bookmark, from the time the watch opened (WatchOpened). Its
// zero value is a stream not open yet: nothing is checked.
type bookmarkWait struct {
	opened      time.Time // when the watch opened; zero: not yet
	last        time.Time // the last event; zero: none yet
	pastInitial time.Time // the first event that is not Added; zero: none yet
	events      int
	warned      time.Time // the last warning; zero: none yet
}

// waitVerdict is what a check of a bookmarkWait decides.
type waitVerdict uint8

const (
	waitOn     waitVerdict = iota // keep waiting
	waitWarn                      // keep waiting, and log it
	waitGiveUp                    // the source does not support WatchList
)

// open starts the wait: the watch opened at now.
func (w *bookmarkWait) open(now time.Time) { *w = bookmarkWait{opened: now} }

// observe takes a batch of n events received at now; pastInitial tells
// whether the stream has had an event that is not Added.
func (w *bookmarkWait) observe(now time.Time, n int, pastInitial bool) {
	if w.opened.IsZero() || n == 0 {
		return
	}
	w.events += n
	w.last = now
	if pastInitial && w.pastInitial.IsZero() {
		w.pastInitial = now
	}
}

// giveUpAt is when the wait ends with no bookmark.
func (w *bookmarkWait) giveUpAt() time.Time {
	quiet := w.opened
	if !w.last.IsZero() {
		quiet = w.last
	}
	at := quiet.Add(WatchListGiveUpAfter)
	if !w.pastInitial.IsZero() {
		if p := w.pastInitial.Add(WatchListGiveUpAfter); p.Before(at) {
			at = p
		}
	}
	return at
}

// warnAt is when the next warning is due.
func (w *bookmarkWait) warnAt() time.Time {
	if w.warned.IsZero() {
		return w.opened.Add(WatchListWarnEvery)
	}
	return w.warned.Add(WatchListWarnEvery)
}

// check decides at now.
func (w *bookmarkWait) check(now time.Time) waitVerdict {
	switch {
	case w.opened.IsZero():
		return waitOn
	case !now.Before(w.giveUpAt()):
		return waitGiveUp
	case !now.Before(w.warnAt()):
		w.warned = now
		return waitWarn
	}
	return waitOn
}

// nextCheck is how long after now the next check is due.
func (w *bookmarkWait) nextCheck(now time.Time) time.Duration {
	at := w.giveUpAt()
	if warn := w.warnAt(); warn.Before(at) {
		at = warn
	}
	return max(at.Sub(now), 0)
}

// logArgs describes the wait as log attributes.
func (w *bookmarkWait) logArgs(now time.Time) []any {
	last := "none"
	if !w.last.IsZero() {
		last = now.Sub(w.last).Round(time.Millisecond).String() + " ago"
	}
	return []any{"events", w.events, "lastEvent", last, "waiting", now.Sub(w.opened).Round(time.Millisecond)}
}

// watchListHint is what the WatchList warnings suggest.
const watchListHint = "a source without WatchList support (client-go's fake clientset behind a plain cache.ListWatch) never sends it: " +
	"build the ListWatch with cache.ToListWatcherWithWatchListSemantics(lw, client), or pass actors.WithWatchList(false)"

// watchOpened takes the news that the watch call of the WatchList stream
// wl returned a watch; the shell reports it before the watch's events. It
// starts the wait for the stream's initial-events-end bookmark, which sets
// the check timer.
func (m *Machine) watchOpened(e *effects, wl *watchListing) {
	now := m.s.clock.Now()
	wl.wait.open(now)
	e.Check = &waitRequest{Gen: m.gen, Duration: wl.wait.nextCheck(now)}
}

// watchListCheck is the check timer's WatchListCheck for the stream wl,
// still without its initial-events-end bookmark: it is logged, or given up
// (WatchList off, list and watch instead).
func (m *Machine) watchListCheck(e *effects, wl *watchListing) {
	w := &wl.wait
	if w.opened.IsZero() {
		return // WatchOpened arms the checks
	}
	now := m.s.clock.Now()
	switch w.check(now) {
	case waitGiveUp:
		err := &errNoInitialEventsEnd{events: w.events, waited: now.Sub(w.opened)}
		m.s.log.Warn("WatchList stream hasn't received the required bookmark event marking the end of initial events (k8s.io/initial-events-end): "+
			"the source does not support WatchList; WatchList is off for this informer, which lists and watches instead",
			append([]any{"informer", m.s.name, "type", m.s.typeDesc, "hint", watchListHint}, w.logArgs(now)...)...)
		m.giveUpWatchList(e, wl, err)
		return
	case waitWarn:
		m.s.log.Warn("WatchList stream hasn't received the required bookmark event marking the end of initial events (k8s.io/initial-events-end): the informer cannot sync before it",
			append([]any{"informer", m.s.name, "type", m.s.typeDesc, "giveUpAfter", WatchListGiveUpAfter, "hint", watchListHint},
				w.logArgs(now)...)...)
	}
	e.Check = &waitRequest{Gen: m.gen, Duration: w.nextCheck(now)}
}

// giveUpWatchList ends a stream that will not send its initial-events-end
// bookmark, turns WatchList off for good (in the Machine, which a
// restarted actor keeps, and in the status) and lists instead, as
// client-go's fallback does.
func (m *Machine) giveUpWatchList(e *effects, wl *watchListing, err error) {
	e.StopWatch = true
	m.countError(err, false)
	m.loop.restartReason = RestartError
	wl.endSpan(err)
	m.sync.status.UseWatchList = false
	m.sync.dirty = true
	m.startList(e)
}

// awaitInitialEvents publishes whether a WatchList stream is waiting for its
// initial-events-end bookmark (Status, and the waiting gauge).
func (m *Machine) awaitInitialEvents(on bool) {
	var since time.Time
	if on {
		since = m.s.clock.Now()
	}
	m.sync.status.AwaitingInitialEventsEnd, m.sync.status.AwaitingSince = on, since
	m.sync.dirty = true
	m.s.tel.Metrics.AwaitingInitialEvents(on)
}
