package sim

// This file is the only one that calls the pipeline's cores. Each stage
// turns one input message into the []stage.Msg its actor shell would send
// because of it, and models what survives a restart of that shell. The rest
// of the simulator speaks only stage.Msg.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/reflector"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// toEnv addresses the environment: the reflector shell's I/O (list and
// watch calls, backoff timers), which the simulator carries out at once,
// as the shell does right after the step.
var toEnv = stage.Addr{Kind: 100}

// Messages into the reflector: the reports its shell's goroutines and timer
// would send. inc is the reflector incarnation that asked (a restarted
// reflector ignores its predecessor's reports, as the shell does).
type (
	listDone struct {
		inc int
		gen uint64
		res reflector.ListResult
	}
	watchEvents struct {
		inc    int
		gen    uint64
		events []watch.Event
	}
	watchEnded struct {
		inc int
		gen uint64
	}
	watchFailed struct {
		inc int
		gen uint64
		err error
	}
	backoffElapsed struct {
		inc int
		gen uint64
	}
)

// Messages to the environment (toEnv), the reflector shell's effects.
type (
	listCall struct {
		inc int
		req reflector.ListRequest
	}
	watchCall struct {
		inc int
		req reflector.WatchRequest
	}
	waitCall struct {
		inc int
		req reflector.WaitRequest
	}
	stopOp      struct{ inc int }
	handleError struct{ err error }
)

// A stage is one core behind its (modelled) shell.
type stageCore interface {
	// deliver feeds one message to the core and returns what the shell
	// sends because of it, in order.
	deliver(m stage.Msg) []stage.Msg
	// restart models a panic-free restart of the actor between two
	// messages (protoactor's Restarting, then Started on a new value from
	// the same producer) and returns what the shells send.
	restart() []stage.Msg
}

// ---- reflector ----

type nopLW struct{}

func (nopLW) List(metav1.ListOptions) (runtime.Object, error) {
	return nil, errors.New("sim: the reflector's I/O is simulated")
}
func (nopLW) Watch(metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("sim: the reflector's I/O is simulated")
}

type reflectorStage struct {
	r   *reflector.Reflector
	m   *reflector.Machine
	inc int
}

func newReflectorStage(clk *simClock, useWatchList bool) *reflectorStage {
	r := reflector.New(reflector.Config{
		ListerWatcher: nopLW{},
		Name:          "sim",
		UseWatchList:  ptr.To(useWatchList),
		// No jitter: backoff durations are a function of the script.
		Backoff: &wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 30 * time.Second},
		Clock:   clk,
	})
	return &reflectorStage{r: r, inc: 1}
}

// start is the first Started.
func (s *reflectorStage) start() []stage.Msg {
	s.m = s.r.NewMachine()
	return s.effects(s.m.Start())
}

func (s *reflectorStage) state() reflector.State { return s.m.State() }

func (s *reflectorStage) deliver(m stage.Msg) []stage.Msg {
	switch b := m.Body.(type) {
	case *listDone:
		if b.inc == s.inc {
			return s.effects(s.m.ListDone(b.gen, b.res))
		}
	case *watchEvents:
		if b.inc == s.inc {
			return s.effects(s.m.WatchEvents(b.gen, b.events, time.Time{}))
		}
	case *watchEnded:
		if b.inc == s.inc {
			return s.effects(s.m.WatchEnded(b.gen))
		}
	case *watchFailed:
		if b.inc == s.inc {
			return s.effects(s.m.WatchFailed(b.gen, b.err))
		}
	case *backoffElapsed:
		if b.inc == s.inc {
			return s.effects(s.m.BackoffElapsed(b.gen))
		}
	default:
		panic(fmt.Sprintf("sim: reflector got %T", m.Body))
	}
	return nil
}

// restart: the shell's Restarting stops the machine, cancels the running
// call and the timer (later reports of the old actor are ignored); the new
// actor makes a new Machine from the same Reflector handle, which keeps the
// last synced resource version, and starts it.
func (s *reflectorStage) restart() []stage.Msg {
	s.m.Stop()
	out := []stage.Msg{{To: toEnv, Body: &stopOp{inc: s.inc}}}
	s.inc++
	return append(out, s.start()...)
}

func (s *reflectorStage) effects(e reflector.Effects) []stage.Msg {
	// e.Msgs belongs to the Machine: copy it.
	out := append([]stage.Msg(nil), e.Msgs...)
	if e.StopWatch || e.List != nil || e.Watch != nil {
		out = append(out, stage.Msg{To: toEnv, Body: &stopOp{inc: s.inc}})
	}
	if e.HandleError != nil {
		out = append(out, stage.Msg{To: toEnv, Body: &handleError{err: e.HandleError}})
	}
	switch {
	case e.List != nil:
		out = append(out, stage.Msg{To: toEnv, Body: &listCall{inc: s.inc, req: *e.List}})
	case e.Watch != nil:
		out = append(out, stage.Msg{To: toEnv, Body: &watchCall{inc: s.inc, req: *e.Watch}})
	case e.Wait != nil:
		out = append(out, stage.Msg{To: toEnv, Body: &waitCall{inc: s.inc, req: *e.Wait}})
	}
	return out
}

// ---- queue ----

type queueStage struct {
	q *fifo.Queue
	// firstReplace is what the first Replace listed (key → rv) and its
	// resource version: HasSynced must not be true before the cache holds
	// it.
	firstReplace   map[string]string
	firstReplaceRV string
}

func newQueueStage(store *indexer.Store, maxBatch int, clk *simClock, tel *telemetry.T) *queueStage {
	return &queueStage{q: fifo.New(fifo.Config{Known: store, MaxBatch: maxBatch, Clock: clk, Telemetry: tel})}
}

// coreTelemetry is telemetry whose logger hands every warning and error
// to report: the queue and the indexer log none when all is well.
func coreTelemetry(report func(msg string)) *telemetry.T {
	return telemetry.New(telemetry.Config{Logger: slog.New(reportHandler{report})})
}

type reportHandler struct{ report func(string) }

func (h reportHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h reportHandler) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	h.report(msg)
	return nil
}
func (h reportHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h reportHandler) WithGroup(string) slog.Handler      { return h }

func (s *queueStage) hasSynced() bool { return s.q.HasSynced() }

func (s *queueStage) deliver(m stage.Msg) []stage.Msg {
	switch b := m.Body.(type) {
	case *fifo.Deltas:
		return s.q.Deltas(b)
	case *fifo.Replace:
		if s.firstReplace == nil {
			s.firstReplace = map[string]string{}
			for _, d := range b.Items {
				s.firstReplace[d.Key] = rvOf(d.Object)
			}
			s.firstReplaceRV = b.ResourceVersion
		}
		return s.q.Replace(b)
	case *fifo.Resync:
		return s.q.Resync()
	case *fifo.Processed:
		return s.q.Processed(b)
	}
	panic(fmt.Sprintf("sim: queue got %T", m.Body))
}

// restart: the queue's state is outside the actor; the new actor's
// Started hands out what it holds if no batch is in flight.
func (s *queueStage) restart() []stage.Msg { return s.q.Started() }

// ---- indexer ----

type indexerStage struct {
	core  *indexer.Core
	store *indexer.Store
	// fire is the resync check timer callback (runs inside the clock).
	fire func(gen uint64)
	// compacting: listeners the core may keep notifications back for
	// (from a DrainMarker sent to them until one of their Drained answers
	// leads to nothing more); their view plus mailbox may lag the cache.
	compacting map[uint64]bool
	// sawMarker: a DrainMarker was sent (compaction happened).
	sawMarker bool
	// subs are the listeners subscribed.
	subs map[uint64]bool
	// crash makes the core panic while applying a batch (through its
	// mutation detector hook): a bug of ours inside ApplyBatch.
	crash *crashDetector
	// recovering is set while the core recovers from a panic: what it logs
	// then (it must say the batch panicked) goes to recoveryLogs instead of
	// being a violation.
	recovering   bool
	recoveryLogs []string
	// panics counts the panics of the core the shell recovered from.
	panics int
}

// crashDetector panics on the after+1-th object written to the cache once
// armed (after >= 0).
type crashDetector struct{ after int }

func (d *crashDetector) AddObject(any) {
	switch {
	case d.after == 0:
		d.after = -1
		panic("sim: injected panic in the indexer")
	case d.after > 0:
		d.after--
	}
}

func (d *crashDetector) Run(<-chan struct{}) {}

func newIndexerStage(clk *simClock, resyncCheck time.Duration, fire func(gen uint64), tel *telemetry.T) *indexerStage {
	store := indexer.NewStore(nil, cache.Indexers{})
	crash := &crashDetector{after: -1}
	core := indexer.NewCore(store.Writer(), indexer.Config{
		Telemetry:         tel,
		Clock:             clk,
		ResyncCheckPeriod: resyncCheck,
		MutationDetector:  crash,
	})
	return &indexerStage{core: core, store: store, fire: fire, compacting: map[uint64]bool{}, crash: crash, subs: map[uint64]bool{}}
}

// started is the first Started of the shell.
func (s *indexerStage) started() []stage.Msg { return s.core.Started(s.fire) }

// subscribed reports whether the core has processed listener id's
// Subscribe and not its Unsubscribe.
func (s *indexerStage) subscribed(id uint64) bool { return s.subs[id] }

func (s *indexerStage) cache() map[string]string {
	out := map[string]string{}
	for _, k := range s.store.ListKeys() {
		o, _, _ := s.store.GetByKey(k)
		out[k] = rvOf(o)
	}
	return out
}

func (s *indexerStage) rv() string { return s.store.LastStoreSyncResourceVersion() }

func (s *indexerStage) deliver(m stage.Msg) []stage.Msg {
	var out []stage.Msg
	switch b := m.Body.(type) {
	case *fifo.Batch:
		var ok bool
		if out, ok = s.guard(func() []stage.Msg { return s.core.ApplyBatch(b) }); !ok {
			return s.recover()
		}
	case *indexer.Subscribe:
		s.subs[uint64(b.ID)] = true
		out = s.core.Subscribe(b)
	case *indexer.Unsubscribe:
		delete(s.subs, uint64(b.ID))
		out = s.core.Unsubscribe(b.ID)
	case *indexer.Drained:
		out = s.core.Drained(b.ID)
		if len(out) == 0 {
			delete(s.compacting, uint64(b.ID))
		}
	case *fifo.Listed:
		out = s.core.Listed()
	case *indexer.ResyncTick:
		out = s.core.ResyncTick(b)
	default:
		panic(fmt.Sprintf("sim: indexer got %T", m.Body))
	}
	s.noteMarkers(out)
	return append([]stage.Msg(nil), out...) // out belongs to the core
}

// noteMarkers notes the listeners out sends a DrainMarker to.
func (s *indexerStage) noteMarkers(out []stage.Msg) {
	for _, o := range out {
		if _, ok := o.Body.(*indexer.DrainMarker); ok {
			s.compacting[o.To.ID] = true
			s.sawMarker = true
		}
	}
}

// guard runs an input of the core; false if the core panicked.
func (s *indexerStage) guard(input func() []stage.Msg) (out []stage.Msg, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			out, ok = nil, false
		}
	}()
	return input(), true
}

// recover is the restart after a panic: the shell's Restarting has the
// core send the notifications of the part of the batch applied, then the
// new actor's Started applies the rest and acknowledges the batch (which
// may panic again: then again).
func (s *indexerStage) recover() []stage.Msg {
	var out []stage.Msg
	for {
		s.panics++
		s.recovering = true
		out = append(out, s.core.Recover()...)
		s.recovering = false
		s.core.Stopped()
		started, ok := s.guard(s.started)
		out = append(out, started...)
		if ok {
			s.noteMarkers(out)
			return out
		}
	}
}

// restart: core and store survive; the shell's Restarting stops the
// resync check timer, the new shell's Started re-arms it.
func (s *indexerStage) restart() []stage.Msg {
	s.core.Stopped()
	return append([]stage.Msg(nil), s.started()...)
}

// ---- listener ----

// toRunner addresses a Coalesced handler's runner: the listener's child
// actor that makes the calls of one pending key at a time (the shell
// resolves the core's stage.ToListener(own id) to it).
func toRunner(id uint64) stage.Addr { return stage.Addr{Kind: runnerKind, ID: id} }

const runnerKind stage.Kind = 101

// listenerStage is a listener: the real listener.Core behind a modelled
// shell, which is also the core's listener.Path: it calls the handler
// (recovering a panic, as the shell's call path does) and keeps the
// backlog and initial-list counters.
type listenerStage struct {
	id          uint64
	core        listener.Core
	h           handler
	removed     bool
	pending     atomic.Int64
	backlog     atomic.Int64
	initialDone bool
}

// handler is what a listener calls.
type handler interface {
	OnAdd(ctx context.Context, obj any, initial bool)
	OnUpdate(ctx context.Context, old, obj any)
	OnDelete(ctx context.Context, obj any)
}

func newListenerStage(id uint64, h handler, coalesced bool) *listenerStage {
	l := &listenerStage{id: id, core: listener.Core{ID: indexer.ListenerID(id)}, h: h}
	if coalesced {
		// As actors.Coalesced: the informer's key function.
		l.core.Pending = listener.NewCoalescer(cache.DeletionHandlingMetaNamespaceKeyFunc)
	}
	return l
}

// eachHeld calls f for each pending key a Coalesced handler's listener
// holds outside its mailbox: the one given to its runner and not yet run,
// then those its core merges.
func (l *listenerStage) eachHeld(f func(e *listener.PendingKey)) {
	if l.coalesced() {
		l.core.Held(f)
	}
}

func (l *listenerStage) coalesced() bool { return l.core.Pending != nil }

func (l *listenerStage) deliver(m stage.Msg) []stage.Msg {
	var out []stage.Msg
	switch b := m.Body.(type) {
	case *indexer.Notifications:
		if b.Initial && l.coalesced() {
			// The synthetic initial batch (this listener's alone) comes
			// in the cache's map order; a coalesced handler's calls
			// depend on it (the order of its pending keys), so that a
			// script would not replay. Any order is one the indexer may
			// send: take the keys'.
			slices.SortFunc(b.Items, func(x, y indexer.Notification) int {
				return strings.Compare(x.Key(), y.Key())
			})
		}
		out = l.core.Notifications(b, l)
	case *indexer.DrainMarker:
		out = l.core.DrainMarker()
	case *listener.CallsDone:
		out = l.core.CallsDone(l)
	default:
		panic(fmt.Sprintf("sim: listener got %T", m.Body))
	}
	out = append([]stage.Msg(nil), out...) // out belongs to the core
	for i := range out {
		if out[i].To == stage.ToListener(l.id) {
			out[i].To = toRunner(l.id)
		}
	}
	return out
}

// Active, Call, Progress and InitialBatchDone make l the core's
// listener.Path.
func (l *listenerStage) Active() bool { return !l.removed }

func (l *listenerStage) Call(it *indexer.Notification) {
	defer func() { _ = recover() }()
	switch it.Type {
	case indexer.NotifyAdd:
		l.h.OnAdd(context.Background(), it.New, it.InitialList)
	case indexer.NotifyUpdate:
		l.h.OnUpdate(context.Background(), it.Old, it.New)
	case indexer.NotifyDelete:
		l.h.OnDelete(context.Background(), it.New)
	}
}

func (l *listenerStage) Progress(done, initial int64) {
	l.backlog.Add(-done)
	l.pending.Add(-initial)
}

func (l *listenerStage) InitialBatchDone() { l.initialDone = true }

// restart: the listener's state lives outside the actor, which handles
// neither Restarting nor Started, except that a Coalesced handler's
// listener spawns a new runner (its child, stopped with the old actor:
// protoactor stops children before restarting, and a stopped actor's
// queued messages are dropped) and tells its core (RunnerStarted).
func (l *listenerStage) restart() []stage.Msg {
	if !l.coalesced() {
		return nil
	}
	return l.runnerStarted()
}

func (l *listenerStage) runnerStarted() []stage.Msg {
	out := append([]stage.Msg(nil), l.core.RunnerStarted()...)
	for i := range out {
		out[i].To = toRunner(l.id)
	}
	return out
}

// runnerStage is a Coalesced handler's runner: it makes the calls of the
// pending key it is given and answers its listener.
type runnerStage struct{ l *listenerStage }

func (r runnerStage) deliver(m stage.Msg) []stage.Msg {
	b, ok := m.Body.(*listener.RunCalls)
	if !ok {
		panic(fmt.Sprintf("sim: runner got %T", m.Body))
	}
	b.Key.Run(r.l)
	return []stage.Msg{{To: stage.ToListener(r.l.id), Body: listener.CallsDoneMsg}}
}

// restart: a runner is restarted only with its listener.
func (r runnerStage) restart() []stage.Msg { return nil }

// subscribe is the message the informer's supervisor sends the indexer
// for this listener.
func (l *listenerStage) subscribe(ix *indexerStage, resync time.Duration, added time.Time, initial bool) stage.Msg {
	return stage.Msg{To: stage.ToIndexer, Body: &indexer.Subscribe{
		ID:           indexer.ListenerID(l.id),
		ResyncPeriod: resync,
		Added:        added,
		Initial:      initial,
		Pending:      &l.pending,
		Backlog:      &l.backlog,
	}}
}

// regSynced is the handler registration's HasSynced.
func (l *listenerStage) regSynced(informerSynced bool) bool {
	return informerSynced && l.initialDone && l.pending.Load() == 0
}

// mailboxItems calls f for each notification in msgs that this listener
// will hand to its handler.
func (l *listenerStage) mailboxItems(msgs []stage.Msg, f func(it *indexer.Notification)) {
	for _, m := range msgs {
		b, ok := m.Body.(*indexer.Notifications)
		if !ok {
			continue
		}
		for i := range b.Items {
			if it := &b.Items[i]; !it.Sync || b.SyncsTo(indexer.ListenerID(l.id)) {
				f(it)
			}
		}
	}
}
