package sim

// This file is the only one that calls the pipeline's cores, through their
// Step, and the only one that models their shells (package shell): what a
// shell does around a Step (the actor's lifecycle, a panic, a restart),
// and the effects it performs. The rest of the simulator speaks only
// stage.Msg.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
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

// ---- reflector ----

type nopLW struct{}

func (nopLW) List(metav1.ListOptions) (runtime.Object, error) {
	return nil, errors.New("sim: the reflector's I/O is simulated")
}
func (nopLW) Watch(metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("sim: the reflector's I/O is simulated")
}

// newMachine is the reflector's core, over a handle whose I/O the
// simulator performs (its shell's effects: see Sim.perform).
func newMachine(clk *simClock, useWatchList bool, tel *telemetry.T) *reflector.Machine {
	r := reflector.New(reflector.Config{
		ListerWatcher: nopLW{},
		Name:          "sim",
		UseWatchList:  ptr.To(useWatchList),
		// No jitter: backoff durations are a function of the script.
		Backoff:   &wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 30 * time.Second},
		Clock:     clk,
		Telemetry: tel,
	})
	return r.NewMachine()
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
// to report: the cores log none when all is well.
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

// note records the first Replace.
func (s *queueStage) note(body any) {
	if b, ok := body.(*fifo.Replace); ok && s.firstReplace == nil {
		s.firstReplace = map[string]string{}
		for _, d := range b.Items {
			s.firstReplace[d.Key] = rvOf(d.Object)
		}
		s.firstReplaceRV = b.ResourceVersion
	}
}

// ---- indexer ----

type indexerStage struct {
	core  *indexer.Core
	store *indexer.Store
	// compacting: listeners the core may keep notifications back for
	// (from a DrainMarker sent to them until one of their Drained answers
	// leads to nothing more); their view plus mailbox may lag the cache.
	compacting map[uint64]bool
	// sawMarker: a DrainMarker was sent (compaction happened).
	sawMarker bool
	// subs are the listeners subscribed.
	subs map[uint64]bool
	// crash makes the core panic while applying a batch (through its
	// mutation detector hook): a bug of ours inside the batch's Step.
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
// armed (after >= 0). It hands the objects written to the cache mutation
// detector, when there is one.
type crashDetector struct {
	after int
	mut   *indexer.MutationDetector
}

func (d *crashDetector) AddObject(obj any) {
	switch {
	case d.after == 0:
		d.after = -1
		panic("sim: injected panic in the indexer")
	case d.after > 0:
		d.after--
	}
	if d.mut != nil {
		d.mut.AddObject(obj)
	}
}

func (d *crashDetector) Run(<-chan struct{}) {}

func newIndexerStage(clk *simClock, resyncCheck time.Duration, tel *telemetry.T) *indexerStage {
	store := indexer.NewStore(nil, cache.Indexers{})
	crash := &crashDetector{after: -1}
	core := indexer.NewCore(store.Writer(), indexer.Config{
		Telemetry:         tel,
		Clock:             clk,
		ResyncCheckPeriod: resyncCheck,
		MutationDetector:  crash,
	})
	return &indexerStage{core: core, store: store, compacting: map[uint64]bool{}, crash: crash, subs: map[uint64]bool{}}
}

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

// note tracks the subscriptions an input makes, before the core takes it.
func (s *indexerStage) note(in indexer.Input) {
	switch b := in.(type) {
	case *indexer.Subscribe:
		s.subs[uint64(b.ID)] = true
	case *indexer.Unsubscribe:
		delete(s.subs, uint64(b.ID))
	}
}

// noted tracks the compaction the core's messages show, after it took
// in.
func (s *indexerStage) noted(in indexer.Input, out []stage.Msg) {
	if b, ok := in.(*indexer.Drained); ok && len(out) == 0 {
		delete(s.compacting, uint64(b.ID))
	}
	for _, o := range out {
		if _, ok := o.Body.(*indexer.DrainMarker); ok {
			s.compacting[o.To.ID] = true
			s.sawMarker = true
		}
	}
}

// ---- the cache mutation detector ----

// startDetector is the informer's cache mutation detector (WithCacheMutationDetector
// or KUBE_CACHE_MUTATION_DETECTOR): the indexer's core hands it every object
// it writes, and the goroutine the supervisor starts with the stages checks
// at once, then every indexer.MutationCheckPeriod (see checkDetector).
func (s *Sim) startDetector() {
	s.det = indexer.NewMutationDetector("*v1.Pod", s.clk)
	s.ix.crash.mut = s.det
	s.nextCheck = s.clk.Now()
	s.checkDetector()
}

// checkDetector runs the detector's checks due by now. A change found is
// a violation: the real detector panics, and the process dies.
func (s *Sim) checkDetector() {
	for s.det != nil && !s.nextCheck.After(s.clk.Now()) {
		s.nextCheck = s.nextCheck.Add(indexer.MutationCheckPeriod)
		if err := s.det.Check(); err != nil {
			s.failf("the cache mutation detector panics at %v: %v", s.clk.Since(epoch), err)
		}
	}
}

// advance moves time by d, through each check of the detector on the way.
func (s *Sim) advance(d time.Duration) {
	end := s.clk.Now().Add(d)
	for s.det != nil && !s.nextCheck.After(end) {
		s.clk.SetTime(s.nextCheck)
		s.checkDetector()
	}
	s.clk.SetTime(end)
}

// ---- listener ----

// listenerStage is a listener: the real listener.Core, and its handler
// side, the real call path (listener.Handler: calls the handler,
// recovering a panic, and keeps the counters).
type listenerStage struct {
	id       uint64
	core     *listener.Core
	path     *listener.Handler
	removed  atomic.Bool
	sent     indexer.Sent
	counters listener.Counters
}

func newListenerStage(id uint64, h listener.EventHandler, coalesced bool) *listenerStage {
	l := &listenerStage{id: id}
	l.counters.Sent = &l.sent
	l.core = listener.NewCore(listener.Config{ID: indexer.ListenerID(id), Coalesce: coalesced, Counters: &l.counters})
	quiet := logr.Discard() // the handlers' panics are the scripts'
	l.path = listener.NewHandler(listener.HandlerConfig{Handler: h, Counters: &l.counters, Removed: &l.removed, Logger: &quiet})
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

func (l *listenerStage) coalesced() bool { return l.core.Coalesced() }

// note sorts a Coalesced listener's synthetic initial batch, before the
// core takes it. The batch (this listener's alone) comes in the cache's map
// order; a coalesced handler's calls depend on it (the order of its
// pending keys), so that a script would not replay. Any order is one the
// indexer may send: take the keys'.
func (l *listenerStage) note(in listener.Input) {
	if b, ok := in.(*indexer.Notifications); ok && b.Initial && l.coalesced() {
		slices.SortFunc(b.Items, func(x, y indexer.Notification) int {
			return strings.Compare(x.Key(), y.Key())
		})
	}
}

// perform makes the calls c asks for, as the listener's shell does.
func (l *listenerStage) perform(c *listener.Calls) { l.path.Call(c) }

// subscribe is the message the informer's supervisor sends the indexer
// for this listener.
func (l *listenerStage) subscribe(resync time.Duration, added time.Time, initial bool) stage.Msg {
	return stage.Msg{To: stage.ToIndexer, Body: &indexer.Subscribe{
		ID:           indexer.ListenerID(l.id),
		ResyncPeriod: resync,
		Added:        added,
		Initial:      initial,
		Sent:         &l.sent,
		Delivered:    &l.counters.Delivered,
	}}
}

// regSynced is the handler registration's HasSynced.
func (l *listenerStage) regSynced(informerSynced bool) bool {
	return informerSynced && l.counters.InitialDone.Load() && l.counters.Pending() == 0
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

// ---- the shells ----

// input is the shell's one type assertion (see package shell): body as
// the input In of the core it is for. A body that is not one, which the
// shell would drop as unexpected, is a violation.
func input[In any](s *Sim, a stage.Addr, body any) (In, bool) {
	in, ok := body.(In)
	if !ok {
		s.failf("%s was sent a %T, which is not one of its inputs", s.stageName(a), body)
	}
	return in, ok
}

// life is the shell at a telling its core of an event of its actor's
// life, as the core's own input (its Config.Lifecycle).
func (s *Sim) life(a stage.Addr, l stage.Lifecycle) []stage.Msg {
	var body any
	switch a.Kind {
	case stage.Reflector:
		body = reflector.Lifecycle(l)
	case stage.Queue:
		body = fifo.Lifecycle(l)
	case stage.Indexer:
		body = indexer.Lifecycle(l)
	case stage.Listener:
		body = listener.Lifecycle(l)
	default:
		panic("sim: no stage at " + a.Kind.String())
	}
	return s.step(a, body)
}

// step is a stage's shell taking body: the one type assertion, its core's
// Step, and what the shell does around it. It returns what the shell sends
// (the core's messages belong to it: they are copied).
func (s *Sim) step(a stage.Addr, body any) []stage.Msg {
	var out []stage.Msg
	switch a.Kind {
	case stage.Reflector:
		if in, ok := input[reflector.Input](s, a, body); ok {
			out = s.refl.Step(in)
		}
	case stage.Queue:
		s.q.note(body)
		if in, ok := input[fifo.Input](s, a, body); ok {
			out = s.q.q.Step(in)
		}
	case stage.Indexer:
		in, ok := input[indexer.Input](s, a, body)
		if !ok {
			return nil
		}
		s.ix.note(in)
		sent, ok := s.guard(func() []stage.Msg { return s.ix.core.Step(in) })
		if !ok {
			return s.recoverIndexer()
		}
		s.ix.noted(in, sent)
		return sent
	case stage.Listener:
		l := s.ls[a.ID-1].st
		if in, ok := input[listener.Input](s, a, body); ok {
			l.note(in)
			out = l.core.Step(in)
		}
	case stage.Handler:
		// A Coalesced handler's runner: the calls of one key, then its
		// answer.
		l := s.ls[a.ID-1].st
		c := body.(*listener.Calls)
		c.Take()
		l.perform(c)
		return []stage.Msg{{To: stage.ToListener(l.id), Body: listener.CallsDoneMsg}}
	default:
		panic("sim: no stage at " + a.Kind.String())
	}
	return slices.Clone(out)
}

// guard runs a Step of the indexer's core; false if it panicked.
func (s *Sim) guard(input func() []stage.Msg) (out []stage.Msg, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			out, ok = nil, false
		}
	}()
	return slices.Clone(input()), true
}

// recoverIndexer is the indexer shell's restart after a panic: Restarting
// has the core send the notifications of the part of the batch applied,
// the shell stops its timers, and the new actor's Started has it apply the
// rest and acknowledge the batch (which may panic again: then again).
func (s *Sim) recoverIndexer() []stage.Msg {
	var out []stage.Msg
	for {
		s.ix.panics++
		s.ix.recovering = true
		restarting, _ := s.guard(func() []stage.Msg { return s.ix.core.Step(indexer.Lifecycle(stage.Restarting)) })
		s.ix.recovering = false
		out = append(out, restarting...)
		s.stopTimers(stage.Indexer)
		started, ok := s.guard(func() []stage.Msg { return s.ix.core.Step(indexer.Lifecycle(stage.Started)) })
		out = append(out, started...)
		if ok {
			s.ix.noted(nil, out)
			return out
		}
	}
}

// restart models a panic-free restart of the actor at a between two
// messages: protoactor's Restarting to the old actor, which stops its
// children (a Coalesced handler's runner, dropping what its mailbox
// holds); the shell stops its timers and its I/O (the reflector's calls:
// they report nothing more); then Started to the new actor, over the same
// core.
func (s *Sim) restart(a stage.Addr) {
	if a.Kind == stage.Handler {
		return // a runner restarts only with its listener; alone, it keeps its mailbox
	}
	s.pushAll(s.life(a, stage.Restarting))
	if a.Kind == stage.Listener {
		if l := s.ls[a.ID-1]; l.st.coalesced() {
			s.boxes[stage.ToHandler(a.ID)] = nil
		}
	}
	s.stopTimers(a.Kind)
	if a.Kind == stage.Reflector {
		s.srv.call, s.srv.stream = nil, nil
	}
	s.pushAll(s.life(a, stage.Started))
}

// stopTimers stops the timers of stage k (its shell's, as it stops).
func (s *Sim) stopTimers(k stage.Kind) {
	for a, t := range s.timers {
		if a.Owner() == k {
			t.Stop()
			delete(s.timers, a)
		}
	}
}

// perform carries out an effect a shell performs at once.
func (s *Sim) perform(m stage.Msg) {
	switch m.To.Kind {
	case stage.Timer:
		if t := s.timers[m.To]; t != nil {
			t.Stop()
			delete(s.timers, m.To)
		}
		if b, ok := m.Body.(*stage.SetTimer); ok {
			fire := stage.Msg{To: stage.Addr{Kind: m.To.Owner()}, Body: b.Fire}
			s.timers[m.To] = s.clk.AfterFunc(b.After, func() { s.push(fire) })
		}
	case stage.Source:
		switch b := m.Body.(type) {
		case *reflector.StopWatch:
			// A cancelled call reports nothing; a cancelled watch's
			// reader stops without reporting its end.
			s.srv.call, s.srv.stream = nil, nil
		case *reflector.ListRequest, *reflector.WatchRequest:
			s.srv.call = b
		}
	case stage.Informer:
		switch b := m.Body.(type) {
		case *reflector.WatchError:
			s.HandleErrors++
			s.lastWatchErr = b.Err
		case *reflector.Status:
			s.reflStatus = *b
		}
	case stage.Handler:
		l := s.ls[m.To.ID-1].st
		if l.coalesced() {
			s.boxes[m.To] = append(s.boxes[m.To], m) // the runner's mailbox
			return
		}
		l.perform(m.Body.(*listener.Calls))
	}
}
