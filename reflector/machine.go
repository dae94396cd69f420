package reflector

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// defaultPageSize is tools/pager's default page size.
const defaultPageSize = 500

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

// nextStep is what a backoff leads to.
type nextStep uint8

const (
	stepListAndWatch nextStep = iota // client-go's next ListAndWatch: watch-list or list, then watch
	stepWatch                        // re-watch from the last RV, no relist
	stepWatchList                    // retry the watch-list stream
)

// waitRequest asks for a timer: a BackoffElapsed (or, for the check
// timer, a WatchListCheck) with Gen after Duration.
type waitRequest struct {
	Gen      uint64
	Duration time.Duration
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

// Machine is client-go's ListAndWatch loop as a plain state machine: each
// method takes one input (a list result, watch events, a timer) and returns
// the effects for the shell to carry out. It does no I/O and starts no
// goroutine. Reports carry the Gen of the request they answer; reports of
// an older Gen are stale and ignored.
//
// A Machine is not safe for concurrent use; the reflector actor owns it.
type Machine struct {
	// status is what the Machine reports to the informer (stage.ToInformer)
	// after each input that changed it (dirty).
	status Status
	dirty  bool

	name, typeDesc         string
	expectedType           reflect.Type
	expectedGVK            *schema.GroupVersionKind
	transform              cache.TransformFunc
	pageSize               int64
	useWatchList           bool
	minTimeout, maxTimeout time.Duration
	maxInternalRetry       time.Duration
	// clock is Config.Clock (default clock.RealClock{}): watch durations,
	// the backoff's reset and the internal-error retry deadline read it.
	clock   clock.Clock
	delay   wait.DelayFunc
	rand    func() float64
	tel     *telemetry.T
	log     *slog.Logger
	tracing bool
	// metered is set when metrics are on: deltas are stamped with stamp,
	// their batch's receive time, and lists are timed.
	metered bool
	stamp   telemetry.Stamp

	out   stage.Outbox
	state State
	gen   uint64

	rv              string
	rvUnavailable   bool // client-go's isLastSyncResourceVersionUnavailable
	paginatedResult bool
	restartReason   string    // why the next watch starts ("": RestartInitial)
	syncStart       time.Time // when the running list or WatchList sync began (metrics only)
	retry           cache.RetryWithDeadline

	// The data of the current state; each is meaningful only in the
	// states its type names, and reset on entering them.
	list    listing      // StateListing
	stream  streaming    // StateWatching, StateWatchListing
	wl      watchListing // StateWatchListing
	backoff backingOff   // StateBackingOff
}

// listing is StateListing's data: the list in flight, which is the sync's
// first attempt or its one retry at RV "".
type listing struct {
	rv      string // the RV the sync's first attempt asked for
	page    int64  // the pager's page size; 0 lists in one request
	retried bool   // the one retry after an expired or too-large RV is spent
}

// streaming is the running watch's data (StateWatching, and
// StateWatchListing for the WatchList stream).
type streaming struct {
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

// watchListing is StateWatchListing's data: the initial events of the
// WatchList stream, collected until the initial-events-end bookmark turns
// them into one Replace.
type watchListing struct {
	items []fifo.Delta   // in arrival order; Type 0 marks a deleted one
	index map[string]int // key → index in items
	holes int            // deleted entries in items
	rv    string         // RV of the last event past the synthetic Added ones
	span  trace.Span     // the sync's list span; nil when not tracing
	wait  bookmarkWait   // the wait for the initial-events-end bookmark
}

// backingOff is StateBackingOff's data.
type backingOff struct {
	next nextStep // what the wait leads to
}

// NewMachine returns a Machine over r's configuration, starting from r's
// last synced resource version, as a restarted actor's does. The actor made
// by Props makes its own; this is for driving the logic without an actor
// system (internal/sim).
func (r *Reflector) NewMachine() *Machine { return newMachine(r) }

func newMachine(r *Reflector) *Machine {
	m := &Machine{
		status:           r.Status(),
		name:             r.name,
		typeDesc:         r.typeDesc,
		expectedType:     r.expectedType,
		expectedGVK:      r.expectedGVK,
		transform:        r.cfg.Transform,
		pageSize:         r.cfg.PageSize,
		useWatchList:     r.Status().UseWatchList,
		minTimeout:       r.minTimeout,
		maxTimeout:       r.maxTimeout,
		maxInternalRetry: r.cfg.MaxInternalErrorRetryDuration,
		clock:            r.clock,
		delay:            r.backoff.DelayWithReset(r.clock, backoffReset),
		rand:             rand.Float64,
		tel:              r.tel,
		log:              r.tel.Logger,
		tracing:          r.tel.Tracing(),
		metered:          r.tel.Metrics.Enabled(),
	}
	// A restarted actor resumes from the last synced RV, as client-go's Run
	// loop does, so a relist never goes back in time.
	m.rv = r.LastSyncResourceVersion()
	return m
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// start begins the first ListAndWatch.
func (m *Machine) start() effects {
	e := m.begin()
	if m.state == StateIdle {
		m.listAndWatch(&e)
	}
	return m.end(e)
}

// stop stops for good; later inputs are ignored.
func (m *Machine) stop() effects {
	e := m.begin()
	if m.state != StateStopped {
		if m.state == StateWatchListing {
			m.awaitInitialEvents(false)
		}
		m.state = StateStopped
		m.gen++
		m.out.Send(backoffTimer, stage.StopTimerMsg)
		m.out.Send(checkTimer, stage.StopTimerMsg)
		m.endWatchListSpan(nil)
		m.wl = watchListing{}
		e.StopWatch = true
	}
	return m.end(e)
}

// onListDone takes the result of the list started by ListRequest gen.
func (m *Machine) onListDone(gen uint64, res ListResult) effects {
	e := m.begin()
	if m.state == StateListing && gen == m.gen {
		m.listDone(&e, res)
	}
	return m.end(e)
}

// onWatchFailed takes the error of the watch call of WatchRequest gen.
func (m *Machine) onWatchFailed(gen uint64, err error) effects {
	e := m.begin()
	if gen != m.gen {
		return m.end(e)
	}
	switch m.state {
	case StateWatching:
		m.countError(err, false)
		m.restartReason = restartReason(err)
		if isWatchErrorRetriable(err) {
			m.log.Debug("Watch failed - backing off", "reflector", m.name, "type", m.typeDesc, "err", err)
			m.waitThen(&e, stepWatch)
			break
		}
		m.endListAndWatch(&e, err)
	case StateWatchListing:
		m.countError(err, false)
		m.restartReason = restartReason(err)
		m.watchListFailed(&e, err)
	}
	return m.end(e)
}

// onWatchOpened takes the news that the watch call of WatchRequest gen
// returned a watch; the shell reports it, before the watch's events, for
// WatchList streams. It starts the wait for the stream's
// initial-events-end bookmark, which asks for WatchListCheck calls.
func (m *Machine) onWatchOpened(gen uint64) effects {
	e := m.begin()
	if gen == m.gen && m.state == StateWatchListing {
		now := m.clock.Now()
		m.wl.wait.open(now)
		e.Check = &waitRequest{Gen: m.gen, Duration: m.wl.wait.nextCheck(now)}
	}
	return m.end(e)
}

// onWatchListCheck takes the end of the wait of effects.Check gen: a
// WatchList stream still without its initial-events-end bookmark is logged,
// or given up (WatchList off, list and watch instead).
func (m *Machine) onWatchListCheck(gen uint64) effects {
	e := m.begin()
	if gen == m.gen && m.state == StateWatchListing {
		m.watchListCheck(&e)
	}
	return m.end(e)
}

// onWatchEvents takes one batch of events of the watch of WatchRequest gen.
// receivedAt is when the batch arrived (zero unless tracing or metrics are
// on). The machine does not keep events.
func (m *Machine) onWatchEvents(gen uint64, events []watch.Event, receivedAt time.Time) effects {
	e := m.begin()
	if gen != m.gen {
		return m.end(e)
	}
	switch m.state {
	case StateWatching:
		m.tel.Metrics.ReflectorReceived(len(events))
		m.stampBatch(receivedAt)
		m.watchEvents(&e, events, receivedAt)
	case StateWatchListing:
		m.tel.Metrics.ReflectorReceived(len(events))
		m.stampBatch(receivedAt)
		m.watchListEvents(&e, events, receivedAt)
	}
	return m.end(e)
}

// onWatchEnded takes the close of the result channel of the watch of
// WatchRequest gen.
func (m *Machine) onWatchEnded(gen uint64) effects {
	e := m.begin()
	if gen != m.gen || (m.state != StateWatching && m.state != StateWatchListing) {
		return m.end(e)
	}
	st := &m.stream
	short := st.events == 0 && m.clock.Since(st.start) < time.Second
	if !short {
		m.restartReason = RestartClosed
		if st.timeout > 0 && m.clock.Since(st.requested) >= st.timeout {
			m.restartReason = RestartTimeout
		}
	}
	switch m.state {
	case StateWatching:
		if short {
			m.watchStreamError(&e, &cache.VeryShortWatchError{Name: m.name})
			break
		}
		m.retry.After(nil)
		m.log.Debug("Watch close", "reflector", m.name, "type", m.typeDesc, "totalItems", st.events)
		m.startWatch(&e)
	case StateWatchListing:
		if short {
			err := &cache.VeryShortWatchError{Name: m.name}
			m.countError(err, false)
			m.watchListFailed(&e, err)
			break
		}
		// Closed before the initial-events-end bookmark: stream again.
		m.startWatchList(&e)
	}
	return m.end(e)
}

// onBackoffElapsed takes the end of the wait of waitRequest gen.
func (m *Machine) onBackoffElapsed(gen uint64) effects {
	e := m.begin()
	if m.state != StateBackingOff || gen != m.gen {
		return m.end(e)
	}
	switch m.backoff.next {
	case stepListAndWatch:
		m.listAndWatch(&e)
	case stepWatch:
		m.startWatch(&e)
	case stepWatchList:
		m.startWatchList(&e)
	}
	return m.end(e)
}

// begin starts an input.
func (m *Machine) begin() effects { return effects{} }

// end finishes an input.
func (m *Machine) end(e effects) effects { return e }

// toQueue queues a message for the queue.
func (m *Machine) toQueue(body any) { m.out.Send(stage.ToQueue, body) }

// listDone is ListDone in StateListing, for the current list.
func (m *Machine) listDone(e *effects, res ListResult) {
	if res.Err == nil && isNil(res.List) {
		res.Err = fmt.Errorf("list returned no object")
	}
	if err := res.Err; err != nil {
		m.countError(err, false)
		if !m.list.retried && (isExpiredError(err) || isTooLargeResourceVersionError(err)) {
			// The RV we listed at is gone or not there yet: list once more,
			// at the latest RV (""), with the same pager, as client-go does.
			m.rvUnavailable = true
			m.list.retried = true
			m.issueList(e, metav1.ListOptions{ResourceVersion: m.relistRV()})
			return
		}
		m.endListAndWatch(e, fmt.Errorf("failed to list %v: %w", m.typeDesc, err))
		return
	}
	if bad, gvk := isUnsupportedTableListObject(res.List); bad {
		m.endListAndWatch(e, fmt.Errorf("failed to list %v: unsupported list gvk: %v", m.typeDesc, gvk))
		return
	}
	// Only a paginated answer to RV "0" says the watch cache is off; a
	// paginated RV "" answer comes from etcd whatever the cache does.
	if m.list.rv == "0" && res.Paginated {
		m.paginatedResult = true
	}
	m.rvUnavailable = false
	listMeta, err := meta.ListAccessor(res.List)
	if err != nil {
		m.endListAndWatch(e, fmt.Errorf("unable to understand list result %T: %v", res.List, err))
		return
	}
	rv := listMeta.GetResourceVersion()
	items, err := meta.ExtractListWithAlloc(res.List)
	if err != nil {
		m.endListAndWatch(e, fmt.Errorf("unable to understand list result %T (%v)", res.List, err))
		return
	}
	m.tel.Metrics.ReflectorReceived(len(items))
	m.stampBatch(res.ReceivedAt)
	// One spare slot: the queue appends the list's bookmark.
	rep := &fifo.Replace{Items: make([]fifo.Delta, 0, len(items)+1), ResourceVersion: rv}
	if res.Span.IsValid() {
		rep.ListTrace = &telemetry.DeltaTrace{Parent: res.Span, Since: res.ReceivedAt}
	}
	for _, item := range items {
		if isNil(item) {
			m.drop(DropNilObject, "LIST", nil)
			continue
		}
		acc, err := meta.Accessor(item)
		if err != nil {
			m.drop(DropNoMeta, "LIST", err)
			continue
		}
		if d, ok := m.delta(fifo.Replaced, item, acc, "LIST", res.ReceivedAt, res.Span); ok {
			rep.Items = append(rep.Items, d)
		}
	}
	m.toQueue(rep)
	m.listTimed()
	m.setRV(rv)
	m.synced(false)
	m.log.Debug("Caches populated", "reflector", m.name, "type", m.typeDesc, "items", len(rep.Items), "resourceVersion", rv)
	m.list = listing{}
	m.startWatch(e)
}

// listAndWatch is one iteration of client-go's ListAndWatch.
func (m *Machine) listAndWatch(e *effects) {
	m.retry = cache.NewRetryWithDeadline(m.maxInternalRetry, time.Minute, apierrors.IsInternalError, m.clock)
	if m.useWatchList {
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

// waitThen backs off, then takes next.
func (m *Machine) waitThen(e *effects, next nextStep) {
	m.gen++
	m.state = StateBackingOff
	m.backoff = backingOff{next: next}
	e.Wait = &waitRequest{Gen: m.gen, Duration: m.delay()}
}

// relistResourceVersion: "0" for the first list (served from the watch
// cache), the last RV after, "" (a quorum read) once that RV was reported
// expired or too large.
func (m *Machine) relistRV() string {
	if m.rvUnavailable {
		return ""
	}
	if m.rv == "" {
		return "0"
	}
	return m.rv
}

func (m *Machine) rewatchRV() string {
	if m.rvUnavailable {
		return ""
	}
	return m.rv
}

func (m *Machine) startList(e *effects) {
	if m.metered {
		m.syncStart = m.clock.Now()
	}
	rv := m.relistRV()
	m.list = listing{rv: rv}
	switch {
	case m.pageSize != 0:
		m.list.page = m.pageSize
	case m.paginatedResult:
		// The first list came back paginated: the watch cache is probably
		// off, keep paginating.
		m.list.page = defaultPageSize
	case rv != "" && rv != "0":
		// Unpaginated, so the watch cache can serve it (it ignores RV !=
		// "0" lists with a limit) rather than etcd.
		m.list.page = 0
	default:
		m.list.page = defaultPageSize
	}
	m.issueList(e, metav1.ListOptions{ResourceVersion: rv})
}

func (m *Machine) issueList(e *effects, opts metav1.ListOptions) {
	m.gen++
	m.state = StateListing
	e.List = &ListRequest{Gen: m.gen, Options: opts, PageSize: m.list.page}
	m.tel.Metrics.Relist()
}

// beginStream starts the stream data of a new watch (or WatchList
// stream) and returns its timeout.
func (m *Machine) beginStream() *int64 {
	m.gen++
	s := int64(m.minTimeout.Seconds() + m.rand()*(m.maxTimeout.Seconds()-m.minTimeout.Seconds()))
	now := m.clock.Now()
	m.stream = streaming{requested: now, start: now, timeout: time.Duration(s) * time.Second}
	reason := m.restartReason
	if reason == "" {
		reason = RestartInitial
	}
	m.restartReason = RestartError // until the watch ends otherwise
	m.tel.Metrics.WatchRestart(reason)
	return &s
}

// stampBatch sets the Received stamp of the deltas made from a batch
// received at at (zero: not stamped).
func (m *Machine) stampBatch(at time.Time) {
	if m.metered && !at.IsZero() {
		m.stamp = telemetry.StampAt(at)
	} else {
		m.stamp = telemetry.Stamp{}
	}
}

// listTimed records the duration of the list or WatchList sync that just
// succeeded: the reflector's first, or a relist.
func (m *Machine) listTimed() {
	if m.metered && !m.syncStart.IsZero() {
		m.tel.Metrics.ListDuration(m.clock.Since(m.syncStart), m.status.Syncs == 0)
		m.syncStart = time.Time{}
	}
}

func (m *Machine) startWatch(e *effects) {
	timeout := m.beginStream()
	m.state = StateWatching
	rv := m.rv
	m.stream.propagateRV = rv != "" && rv != "0"
	e.Watch = &WatchRequest{Gen: m.gen, Options: metav1.ListOptions{
		ResourceVersion:     rv,
		TimeoutSeconds:      timeout,
		AllowWatchBookmarks: true,
	}}
}

func (m *Machine) startWatchList(e *effects) {
	timeout := m.beginStream()
	if m.metered {
		m.syncStart = m.clock.Now()
	}
	m.state = StateWatchListing
	m.endWatchListSpan(nil)
	m.wl = watchListing{index: map[string]int{}}
	m.awaitInitialEvents(true)
	rv := m.rewatchRV()
	if m.tracing {
		_, m.wl.span = m.tel.StartList(context.Background(), rv)
	}
	m.tel.Metrics.Relist()
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
	switch {
	case isWatchErrorRetriable(err):
		m.log.Debug("watch-list failed - backing off", "reflector", m.name, "type", m.typeDesc, "err", err)
		m.endWatchListSpan(err)
		m.wl = watchListing{}
		m.awaitInitialEvents(false)
		m.waitThen(e, stepWatchList)
	case isExpiredError(err) || isTooLargeResourceVersionError(err):
		m.rvUnavailable = true
		m.startWatchList(e)
	default:
		m.log.Debug("Data couldn't be fetched in watchlist mode. Falling back to regular list.",
			"reflector", m.name, "type", m.typeDesc, "err", err)
		m.endWatchListSpan(err)
		m.wl = watchListing{}
		m.awaitInitialEvents(false)
		m.startList(e)
	}
}

func (m *Machine) endWatchListSpan(err error) {
	sp := m.wl.span
	if sp == nil {
		return
	}
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
	m.wl.span = nil
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
	m.restartReason = restartReason(err)
	m.retry.After(err)
	switch {
	case isExpiredError(err):
		m.log.Debug("Watch closed", "reflector", m.name, "type", m.typeDesc, "err", err)
		m.endListAndWatch(e, nil)
	case apierrors.IsTooManyRequests(err):
		m.log.Debug("Watch returned 429 - backing off", "reflector", m.name, "type", m.typeDesc)
		m.waitThen(e, stepWatch)
	case apierrors.IsInternalError(err) && m.retry.ShouldRetry():
		m.log.Debug("Retrying watch after internal error", "reflector", m.name, "type", m.typeDesc, "err", err)
		m.startWatch(e)
	default:
		m.log.Warn("watch ended with error", "reflector", m.name, "type", m.typeDesc, "err", err)
		m.endListAndWatch(e, nil)
	}
}

// accept applies client-go's checks to a watch event's object; it returns
// the object's metadata, or false after logging and counting the drop.
func (m *Machine) accept(ev *watch.Event) (metav1.Object, bool) {
	obj := ev.Object
	if m.expectedType != nil && reflect.TypeOf(obj) != m.expectedType {
		m.dropType(ev, fmt.Errorf("expected type %v, got %T", m.expectedType, obj))
		return nil, false
	}
	if isNil(obj) {
		m.drop(DropNilObject, string(ev.Type), nil)
		return nil, false
	}
	if m.expectedGVK != nil {
		if gvk := objectGVK(obj); gvk != *m.expectedGVK {
			m.dropType(ev, fmt.Errorf("expected gvk %v, got %v", *m.expectedGVK, gvk))
			return nil, false
		}
	}
	if isUnsupportedTableObject(obj) {
		m.dropType(ev, fmt.Errorf("unsupported gvk %v", objectGVK(obj)))
		return nil, false
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		m.drop(DropNoMeta, string(ev.Type), err)
		return nil, false
	}
	return acc, true
}

func (m *Machine) dropType(ev *watch.Event, err error) {
	m.drop(DropWrongType, string(ev.Type), err)
}

func (m *Machine) drop(reason, event string, err error) {
	m.tel.Metrics.Drop(reason)
	m.log.Error("reflector dropped an object", "informer", m.name, "type", m.typeDesc, "reason", reason, "event", event, "err", err)
}

// callTransform runs the user's transform, turning a panic into an error:
// the object is then dropped like one the transform rejects, and the
// stream goes on.
func (m *Machine) callTransform(obj runtime.Object) (o any, err error) {
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, fmt.Errorf("transform panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return m.transform(obj)
}

// delta transforms obj and keys it. acc is obj's metadata, used for the
// root span only.
func (m *Machine) delta(t fifo.DeltaType, obj runtime.Object, acc metav1.Object, event string, at time.Time, link trace.SpanContext) (fifo.Delta, bool) {
	var o any = obj
	if m.transform != nil {
		var err error
		o, err = m.callTransform(obj)
		if err == nil && isNil(o) {
			err = fmt.Errorf("transform returned nil")
		}
		if err != nil {
			m.drop(DropTransform, event, err)
			return fifo.Delta{}, false
		}
	}
	var key string
	if m.transform == nil {
		// Same as cache.DeletionHandlingMetaNamespaceKeyFunc(obj), minus
		// its second metadata lookup: obj is neither a tombstone nor an
		// ExplicitKey (those are not runtime.Objects).
		key = acc.GetName()
		if ns := acc.GetNamespace(); ns != "" {
			key = ns + "/" + key
		}
	} else {
		var err error
		if key, err = cache.DeletionHandlingMetaNamespaceKeyFunc(o); err != nil {
			m.drop(DropNoKey, event, err)
			return fifo.Delta{}, false
		}
	}
	d := fifo.Delta{Type: t, Key: key, Object: o, Received: m.stamp}
	if m.tracing && m.tel.Choose(telemetry.DeltaInfo{Type: t.CacheType(), Key: key, Object: o, ResourceVersion: acc.GetResourceVersion()}) {
		d.Trace = m.tel.StartDelta(t.String(), telemetry.ObjectMeta{
			Namespace:       acc.GetNamespace(),
			Name:            acc.GetName(),
			UID:             string(acc.GetUID()),
			ResourceVersion: acc.GetResourceVersion(),
			Annotations:     acc.GetAnnotations(),
		}, at, link)
	}
	return d, true
}

// watchEvents is client-go's handleWatch over one batch.
func (m *Machine) watchEvents(e *effects, events []watch.Event, at time.Time) {
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
			m.stream.nonAdded = true
			t = fifo.Updated
		case watch.Deleted:
			m.stream.nonAdded = true
			t = fifo.Deleted
		case watch.Bookmark:
			// A bookmark moves the RV on, here and, through the queue in
			// order with the events, in the cache (client-go's
			// store.Bookmark).
			m.stream.nonAdded = true
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
		if m.stream.propagateRV || m.stream.nonAdded {
			lastRV, rvSeen = acc.GetResourceVersion(), true
		}
		m.stream.events++
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

// watchListEvents is client-go's handleListWatch over one batch: objects
// collect in a temporary store until the initial-events-end bookmark.
func (m *Machine) watchListEvents(e *effects, events []watch.Event, at time.Time) {
	var link trace.SpanContext
	if m.wl.span != nil {
		link = m.wl.span.SpanContext()
	}
	for i := range events {
		ev := &events[i]
		if ev.Type == watch.Error {
			err := errorFromEvent(ev.Object)
			e.StopWatch = true
			m.countError(err, true)
			m.restartReason = restartReason(err)
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
			m.wlPut(ev, acc, at, link)
		case watch.Modified:
			m.stream.nonAdded = true
			m.wlPut(ev, acc, at, link)
		case watch.Deleted:
			m.stream.nonAdded = true
			m.wlDelete(ev)
		case watch.Bookmark:
			m.stream.nonAdded = true
			done = acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		default:
			m.drop(DropUnknownType, string(ev.Type), nil)
		}
		if m.stream.nonAdded {
			m.wl.rv = acc.GetResourceVersion()
		}
		m.stream.events++
		if done {
			m.finishWatchList()
			// The same watch goes on as a normal one.
			m.watchEvents(e, events[i+1:], at)
			return
		}
	}
	if !m.wl.wait.opened.IsZero() {
		m.wl.wait.observe(m.clock.Now(), len(events), m.stream.nonAdded)
	}
}

func (m *Machine) wlPut(ev *watch.Event, acc metav1.Object, at time.Time, link trace.SpanContext) {
	d, ok := m.delta(fifo.Replaced, ev.Object, acc, string(ev.Type), at, link)
	if !ok {
		return
	}
	wl := &m.wl
	if i, ok := wl.index[d.Key]; ok {
		wl.items[i] = d
		return
	}
	wl.index[d.Key] = len(wl.items)
	wl.items = append(wl.items, d)
}

func (m *Machine) wlDelete(ev *watch.Event) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(ev.Object)
	if err != nil {
		m.drop(DropNoKey, string(ev.Type), err)
		return
	}
	wl := &m.wl
	if i, ok := wl.index[key]; ok {
		wl.items[i] = fifo.Delta{}
		delete(wl.index, key)
		wl.holes++
	}
}

// finishWatchList emits the one Replace of a WatchList sync and turns the
// stream into a normal watch.
func (m *Machine) finishWatchList() {
	wl := &m.wl
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
		rep.ListTrace = &telemetry.DeltaTrace{Parent: wl.span.SpanContext(), Since: m.clock.Now()}
		m.endWatchListSpan(nil)
	}
	m.toQueue(rep)
	m.listTimed()
	m.wl = watchListing{}
	m.awaitInitialEvents(false)
	m.rvUnavailable = false
	m.setRV(rv)
	m.synced(true)
	m.log.Debug("Caches populated by watch-list", "reflector", m.name, "type", m.typeDesc, "items", len(items), "resourceVersion", rv)

	m.state = StateWatching
	m.stream.propagateRV = true
	m.stream.events = 0
	m.stream.nonAdded = false
	m.stream.start = m.clock.Now()
}

func (m *Machine) setRV(rv string) {
	if rv == m.rv {
		return
	}
	m.rv = rv
	m.status.ResourceVersion = rv
	m.dirty = true
}

// synced counts a sync (a list's or a WatchList stream's Replace) in the
// status.
func (m *Machine) synced(watchList bool) {
	m.status.Syncs++
	m.status.LastSyncUsedWatchList = watchList
	m.dirty = true
}

func (m *Machine) countError(err error, fromEvent bool) {
	m.tel.Metrics.WatchError(errorReason(err, fromEvent))
}
