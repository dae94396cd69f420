package reflector

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// State is where the reflector is in client-go's ListAndWatch cycle.
type State uint8

const (
	// StateIdle: not started.
	StateIdle State = iota
	// StateListing: a (paginated) list is in flight.
	StateListing
	// StateWatchListing: a WatchList stream is in flight, collecting the
	// initial events until the initial-events-end bookmark.
	StateWatchListing
	// StateWatching: a watch is open (or being opened); events become Deltas.
	StateWatching
	// StateBackingOff: waiting for the backoff timer before the next step.
	StateBackingOff
	// StateStopped: stopped for good.
	StateStopped
)

var stateNames = [...]string{"Idle", "Listing", "WatchListing", "Watching", "BackingOff", "Stopped"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// state is the Machine's state as one value: its kind and the data only
// that kind has. Entering a state builds its value (listing.go,
// watching.go, watchlisting.go, backoff.go); leaving it drops it.
type state interface {
	kind() State
}

// idle: not started, or restarting (the next Started begins again).
type idle struct{}

// stopped: stopped for good; inputs are ignored.
type stopped struct{}

func (idle) kind() State    { return StateIdle }
func (stopped) kind() State { return StateStopped }

// ListResult is what a list (all its pages) returned.
type ListResult struct {
	List      runtime.Object
	Paginated bool
	Err       error
	// ReceivedAt is when the list returned; set only when tracing or
	// metrics are on.
	ReceivedAt time.Time
	// Span is the list span; items' root spans link to it. Zero when not tracing.
	Span trace.SpanContext
}

// Machine is client-go's ListAndWatch loop as a plain state machine: its
// one input, Step, takes a message (a report of its shell, a timer's, the
// actor's lifecycle) and returns the messages to send: the Replace and
// Deltas for the queue, then its effects (messages.go). It does no I/O and
// starts no goroutine. Reports carry the Gen of the request they answer;
// reports of an older Gen are stale and ignored.
//
// A Machine is not safe for concurrent use; the reflector actor owns it.
type Machine struct {
	s     *settings // the handle's, read-only
	out   stage.Outbox
	gen   uint64
	state state
	sync  syncState
	loop  loopState
	// delay is the backoff (wait.Backoff.DelayWithReset, as client-go's).
	delay wait.DelayFunc
	// stamp is the Received stamp of the deltas of the batch in hand
	// (zero when metrics are off).
	stamp telemetry.Stamp
	// keys are the watched objects' keys, reused across their events.
	keys watchKeys
}

// syncState is what the reflector has synced, across ListAndWatch
// iterations: its Status (reported to the informer when dirty; the last
// synced resource version is Status.ResourceVersion), and how to list
// next.
type syncState struct {
	status Status
	dirty  bool
	// rvUnavailable is client-go's isLastSyncResourceVersionUnavailable:
	// the last RV was reported expired or too large, so relist at "".
	rvUnavailable bool
	// paginated: the first list came back paginated (the watch cache is
	// off), so keep paginating.
	paginated bool
	// start is when the running list or WatchList sync began (metrics
	// only).
	start time.Time
}

// loopState belongs to one ListAndWatch iteration and the watches it
// restarts.
type loopState struct {
	// retry bounds the re-watches at once after internal errors.
	retry cache.RetryWithDeadline
	// restartReason is why the next watch starts ("": RestartInitial).
	restartReason string
}

// NewMachine returns a Machine over r's settings, starting from r's status
// (the last synced resource version, whether WatchList is on). The actor
// made by Props makes one, which its restarts keep; this is for driving the
// logic without an actor system (internal/sim).
func (r *Reflector) NewMachine() *Machine { return newMachine(r) }

func newMachine(r *Reflector) *Machine {
	m := &Machine{
		s:     r.settings,
		state: idle{},
		delay: r.backoff.DelayWithReset(r.clock, backoffReset),
	}
	m.sync.status = r.Status()
	m.sync.status.AwaitingInitialEventsEnd, m.sync.status.AwaitingSince = false, time.Time{}
	return m
}

// State returns the current state.
func (m *Machine) State() State { return m.state.kind() }

// The reflector's timers.
var (
	backoffTimer = stage.TimerOf(stage.Reflector, 0)
	checkTimer   = stage.TimerOf(stage.Reflector, 1)
)

// Step is the Machine's one input (see package stage): it takes one
// message and returns what must be sent because of it, valid until the
// next Step: the *fifo.Replace and *fifo.Deltas for the queue, then the
// effects (see messages.go), in order. Lifecycle(stage.Started) begins a
// ListAndWatch; Restarting stops everything, and the Started after it
// begins again from the last synced resource version; Stopping stops for
// good.
func (m *Machine) Step(in Input) []stage.Msg {
	m.out.Reset()
	var e effects
	switch x := in.(type) {
	case *WatchEvents:
		if x.Gen == m.gen {
			m.watchEventsIn(&e, x.Events, x.At)
		}
		x.recycle()
	case *ListDone:
		if l, ok := m.state.(*listing); ok && x.Gen == m.gen {
			m.listDone(&e, l, x.Result)
		}
	case *WatchEnded:
		if x.Gen == m.gen {
			m.watchEnded(&e)
		}
	case *WatchFailed:
		if x.Gen == m.gen {
			m.watchFailed(&e, x.Err)
		}
	case *WatchOpened:
		if wl, ok := m.state.(*watchListing); ok && x.Gen == m.gen {
			m.watchOpened(&e, wl)
		}
	case *WatchListCheck:
		if wl, ok := m.state.(*watchListing); ok && x.Gen == m.gen {
			m.watchListCheck(&e, wl)
		}
	case *BackoffElapsed:
		if b, ok := m.state.(*backingOff); ok && x.Gen == m.gen {
			m.backoffElapsed(&e, b)
		}
	case Lifecycle:
		switch stage.Lifecycle(x) {
		case stage.Started:
			if _, ok := m.state.(idle); ok {
				m.listAndWatch(&e)
			}
		case stage.Restarting:
			m.stop(&e, idle{}) // the Started after it begins again
			m.loop.restartReason = ""
		case stage.Stopping:
			m.stop(&e, stopped{})
		}
	}
	return m.emit(e)
}

// effects is what one input of the Machine does besides the messages for
// the queue, sent after them in this order (see emit): stop the running
// list or watch if StopWatch (also before a new List or Watch); report
// HandleError to the watch error handler; then start List, Watch or Wait
// (at most one of them is set); Check, set while a WatchList stream waits
// for its initial-events-end bookmark, (re)sets the check timer.
type effects struct {
	StopWatch   bool
	HandleError error
	List        *ListRequest
	Watch       *WatchRequest
	Wait        *waitRequest
	Check       *waitRequest
}

// waitRequest asks for a timer: a BackoffElapsed (or, for the check
// timer, a WatchListCheck) with Gen after Duration.
type waitRequest struct {
	Gen      uint64
	Duration time.Duration
}

var stopWatch = &StopWatch{}

// emit sends an input's effects after its messages for the queue, in
// order; the status, if the input changed it, goes before them all.
func (m *Machine) emit(e effects) []stage.Msg {
	if e.StopWatch || e.List != nil || e.Watch != nil {
		m.out.Send(stage.ToSource, stopWatch)
	}
	if e.HandleError != nil {
		m.out.Send(stage.ToInformer, &WatchError{Err: e.HandleError})
	}
	switch {
	case e.List != nil:
		m.out.Send(stage.ToSource, e.List)
	case e.Watch != nil:
		m.out.Send(stage.ToSource, e.Watch)
	case e.Wait != nil:
		m.out.Send(backoffTimer, &stage.SetTimer{After: e.Wait.Duration, Fire: &BackoffElapsed{Gen: e.Wait.Gen}})
	}
	if e.Check != nil {
		m.out.Send(checkTimer, &stage.SetTimer{After: e.Check.Duration, Fire: &WatchListCheck{Gen: e.Check.Gen}})
	}
	if m.sync.dirty {
		m.sync.dirty = false
		// First: a reader of LastSyncResourceVersion sees the version
		// before the queue has the objects (and, when the queue and the
		// indexer run on this goroutine, before the informer has
		// synced), as with client-go's reflector, which sets it after
		// queueing them and before they are processed. Sent last, a
		// synced informer could report no version yet.
		m.out.Send(stage.ToInformer, &m.sync.status)
		msgs := m.out.Msgs()
		st := msgs[len(msgs)-1]
		copy(msgs[1:], msgs[:len(msgs)-1])
		msgs[0] = st
		return msgs
	}
	return m.out.Msgs()
}

// enter makes next the current state. The state left drops its data: a
// WatchList stream's list span ends (if no error ended it before) and the
// informer is told that no stream waits for its bookmark; entering a
// WatchList stream tells it that one does.
func (m *Machine) enter(next state) {
	if wl, ok := m.state.(*watchListing); ok && wl != next {
		wl.endSpan(nil)
		if _, still := next.(*watchListing); !still {
			m.awaitInitialEvents(false)
		}
	}
	if _, ok := next.(*watchListing); ok {
		m.awaitInitialEvents(true)
	}
	m.state = next
}

// stop stops what runs and enters to (idle for a restart, stopped for
// good); a stopped Machine stays stopped.
func (m *Machine) stop(e *effects, to state) {
	if _, ok := m.state.(stopped); ok {
		return
	}
	m.gen++
	m.out.Send(backoffTimer, stage.StopTimerMsg)
	m.out.Send(checkTimer, stage.StopTimerMsg)
	e.StopWatch = true
	m.enter(to)
}

// listAndWatch is one iteration of client-go's ListAndWatch.
func (m *Machine) listAndWatch(e *effects) {
	m.loop.retry = cache.NewRetryWithDeadline(m.s.cfg.MaxInternalErrorRetryDuration, time.Minute, apierrors.IsInternalError, m.s.clock)
	if m.sync.status.UseWatchList {
		m.startWatchList(e)
		return
	}
	m.startList(e)
}

// endListAndWatch ends a ListAndWatch iteration: report err (if any) to
// the watch error handler, then wait for the backoff before the next one,
// as client-go's Run loop does after every iteration.
func (m *Machine) endListAndWatch(e *effects, err error) {
	if err != nil {
		e.HandleError = err
	}
	m.waitThen(e, stepListAndWatch)
}

// toQueue queues a message for the queue.
func (m *Machine) toQueue(body any) { m.out.Send(stage.ToQueue, body) }

// rv is the last synced resource version.
func (m *Machine) rv() string { return m.sync.status.ResourceVersion }

// relistRV: "0" for the first list (served from the watch cache), the last
// RV after, "" (a quorum read) once that RV was reported expired or too
// large.
func (m *Machine) relistRV() string {
	if m.sync.rvUnavailable {
		return ""
	}
	if m.rv() == "" {
		return "0"
	}
	return m.rv()
}

func (m *Machine) rewatchRV() string {
	if m.sync.rvUnavailable {
		return ""
	}
	return m.rv()
}

func (m *Machine) setRV(rv string) {
	if rv == m.rv() {
		return
	}
	m.sync.status.ResourceVersion = rv
	m.sync.dirty = true
}

// synced counts a sync (a list's or a WatchList stream's Replace) in the
// status, and empties the watch's keys: the Replace drops the objects gone
// since the last sync, which no Deleted event took out of them.
func (m *Machine) synced(watchList bool) {
	m.keys.reset()
	m.sync.status.Syncs++
	m.sync.status.LastSyncUsedWatchList = watchList
	m.sync.dirty = true
}

// syncStarted notes when a list or WatchList sync begins (metrics only).
func (m *Machine) syncStarted() {
	if m.s.metered {
		m.sync.start = m.s.clock.Now()
	}
}

// listTimed records the duration of the list or WatchList sync that just
// succeeded: the reflector's first, or a relist.
func (m *Machine) listTimed() {
	if m.s.metered && !m.sync.start.IsZero() {
		m.s.tel.Metrics.ListDuration(m.s.clock.Since(m.sync.start), m.sync.status.Syncs == 0)
		m.sync.start = time.Time{}
	}
}

// stampBatch sets the Received stamp of the deltas made from a batch
// received at at (zero: not stamped).
func (m *Machine) stampBatch(at time.Time) {
	if m.s.metered && !at.IsZero() {
		m.stamp = telemetry.StampAt(at)
	} else {
		m.stamp = telemetry.Stamp{}
	}
}

func (m *Machine) countError(err error, fromEvent bool) {
	m.s.tel.Metrics.WatchError(errorReason(err, fromEvent))
}
