package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/internal/donesignal"
	"github.com/actorinformer/actorinformer/reflector"
	"github.com/actorinformer/actorinformer/telemetry"
)

// minimumResyncPeriod is client-go's lower bound for a handler's resync period.
const minimumResyncPeriod = time.Second

var _ cache.SharedIndexInformer = (*SharedIndexInformer)(nil)

// SharedIndexInformer is client-go's cache.SharedIndexInformer built from
// actors: a reflector, a delta queue, an indexer and one listener per handler,
// each with its own mailbox, talking only through typed messages.
//
// All methods may be called by multiple goroutines simultaneously. Reads of
// the cache (GetIndexer, GetStore, listers) never go through a mailbox.
type SharedIndexInformer struct {
	lw            cache.ListerWatcher
	example       runtime.Object
	defaultResync time.Duration
	opts          options
	store         *indexer.Store
	writer        *indexer.Writer // store's write access: the indexer core's
	tel           *telemetry.T
	// objectDescription is the reflector's type description ("": derived
	// from example).
	objectDescription string

	mu                sync.Mutex
	started, stopped  bool
	resyncCheckPeriod time.Duration
	transform         cache.TransformFunc
	watchErrorHandler cache.WatchErrorHandlerWithContext
	regs              map[*registration]struct{}
	nextID            indexer.ListenerID
	sys               *actor.ActorSystem
	sup               *actor.PID

	// halted is set as the informer stops: listeners stop calling handlers.
	halted    atomic.Bool
	queue     atomic.Pointer[fifo.Queue]
	refl      atomic.Pointer[reflector.Reflector]
	stoppedCh chan struct{}
	// signals are the DoneCheckers handed out by HasSyncedChecker, re-checked
	// when the queue syncs and when a listener delivers its initial
	// notifications.
	signals donesignal.Set
}

// NewSharedIndexInformer creates an informer for the objects lw lists and
// watches, of exampleObject's type, with the given default resync period for
// handlers and indexers for its cache. It is the drop-in counterpart of
// client-go's cache.NewSharedIndexInformer; opts add tracing, metrics,
// logging and a shared actor system.
func NewSharedIndexInformer(lw cache.ListerWatcher, exampleObject runtime.Object, defaultEventHandlerResyncPeriod time.Duration, indexers cache.Indexers, opts ...Option) *SharedIndexInformer {
	return NewSharedIndexInformerWithOptions(lw, exampleObject, cache.SharedIndexInformerOptions{
		ResyncPeriod: defaultEventHandlerResyncPeriod,
		Indexers:     indexers,
	}, opts...)
}

// NewSharedIndexInformerWithOptions is the counterpart of client-go's
// cache.NewSharedIndexInformerWithOptions. Of options:
//   - ResyncPeriod and Indexers are NewSharedIndexInformer's;
//   - ObjectDescription describes the objects in the reflector's logs and
//     errors (the *cache.Reflector a watch error handler gets reports it as
//     its TypeDescription);
//   - Identifier's name and resource name the informer in spans, metrics and
//     logs, unless WithName or WithResource say otherwise;
//   - InformerMetricsProvider, when Identifier is reserved (as in
//     client-go), gets the queued-items gauge (set whenever the delta queue
//     changes), the processing-latency histogram (how long the indexer takes
//     to apply a batch and hand it to the listeners) and the store
//     resource-version gauge. Unlike client-go, a nil provider means no such
//     metrics: the provider set with cache.SetInformerMetricsProvider is not
//     readable outside client-go.
func NewSharedIndexInformerWithOptions(lw cache.ListerWatcher, exampleObject runtime.Object, options cache.SharedIndexInformerOptions, opts ...Option) *SharedIndexInformer {
	o := buildOptions(opts)
	id := options.Identifier
	if o.name == "" {
		o.name = id.Name()
	}
	if o.gvr.Empty() {
		o.gvr = id.GroupVersionResource()
	}
	if o.name == "" {
		o.name = typeName(exampleObject)
	}
	tcfg := telemetry.Config{
		TracerProvider: o.tracerProvider,
		MeterProvider:  o.meterProvider,
		Logger:         o.logger,
		Informer: telemetry.InformerInfo{
			Name: o.name, Group: o.gvr.Group, Version: o.gvr.Version, Resource: o.gvr.Resource,
		},
		DeltaSampler:          o.deltaSampler,
		TraceparentAnnotation: o.traceparent(),
		Attributes:            o.attrs,
		SpanAttributes:        o.spanAttrs,
		GaugeAttributes:       o.gaugeAttrs,
	}
	store := indexer.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc, options.Indexers)
	if p := options.InformerMetricsProvider; p != nil && id.Reserved() {
		tcfg.QueuedItems = p.NewQueuedItemMetric(id)
		tcfg.ProcessingLatency = p.NewProcessingLatencyMetric(id)
		store.SetResourceVersionMetric(p.NewStoreResourceVersionMetric(id))
	}
	tel := telemetry.New(tcfg)
	tel.Metrics.ObserveCache(telemetry.CacheSource{Len: store.Len, ResourceVersion: func() (int64, bool) {
		rv, err := indexer.ParseRVForMetrics(store.LastStoreSyncResourceVersion())
		return rv, err == nil
	}})
	return &SharedIndexInformer{
		lw:                lw,
		example:           exampleObject,
		objectDescription: options.ObjectDescription,
		defaultResync:     options.ResyncPeriod,
		resyncCheckPeriod: options.ResyncPeriod,
		opts:              o,
		transform:         o.transform,
		store:             store,
		writer:            store.Writer(),
		tel:               tel,
		regs:              map[*registration]struct{}{},
		stoppedCh:         make(chan struct{}),
	}
}

func typeName(obj runtime.Object) string {
	if obj == nil {
		return "object"
	}
	if u, ok := obj.(interface{ GetKind() string }); ok && u.GetKind() != "" {
		return strings.ToLower(u.GetKind())
	}
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.ToLower(t.Name())
}

// AddEventHandler adds a handler with the informer's default resync period.
func (s *SharedIndexInformer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(handler, cache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod adds a handler with its own resync period
// (0: no resyncs; at least one second otherwise).
func (s *SharedIndexInformer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resyncPeriod time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(handler, cache.HandlerOptions{ResyncPeriod: &resyncPeriod})
}

// AddEventHandlerWithOptions adds a handler. A handler added to a running
// informer first gets OnAdd(obj, true) for every cached object.
func (s *SharedIndexInformer) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if handler == nil {
		return nil, errors.New("actorinformer: nil event handler")
	}
	name := handlerName(handler)
	handler, coalesce := uncoalesced(handler)
	return s.addHandler(plainHandler{handler}, name, coalesce, options.ResyncPeriod, options.Logger)
}

// AddContextEventHandler adds a handler whose methods receive a context
// carrying the delta's handler span, with the default resync period.
func (s *SharedIndexInformer) AddContextEventHandler(handler ContextEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	if handler == nil {
		return nil, errors.New("actorinformer: nil event handler")
	}
	name := handlerName(handler)
	handler, coalesce := uncoalescedContext(handler)
	return s.addHandler(handler, name, coalesce, nil, nil)
}

// AddContextEventHandlerWithOptions adds a ContextEventHandler with
// options (its resync period and logger), as AddEventHandlerWithOptions
// does for a cache.ResourceEventHandler.
func (s *SharedIndexInformer) AddContextEventHandlerWithOptions(handler ContextEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if handler == nil {
		return nil, errors.New("actorinformer: nil event handler")
	}
	name := handlerName(handler)
	handler, coalesce := uncoalescedContext(handler)
	return s.addHandler(handler, name, coalesce, options.ResyncPeriod, options.Logger)
}

func (s *SharedIndexInformer) addHandler(h ContextEventHandler, name string, coalesce bool, resyncPtr *time.Duration, logger *klog.Logger) (cache.ResourceEventHandlerRegistration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, fmt.Errorf("handler %s was not added to shared informer because it has stopped already", name)
	}
	resync := s.defaultResync
	if resyncPtr != nil {
		resync = *resyncPtr
	}
	// As client-go's AddEventHandlerWithOptions: the requested period is at
	// least minimumResyncPeriod; before Run a smaller one lowers the check
	// period, after Run it is raised to it; and the period in force is
	// determineResyncPeriod's (none when the informer does no checks).
	if resync > 0 {
		if resync < minimumResyncPeriod {
			s.tel.Logger.Warn("resync period is too small; using the minimum", "handler", name, "resyncPeriod", resync, "minimum", minimumResyncPeriod)
			resync = minimumResyncPeriod
		}
		if resync < s.resyncCheckPeriod {
			if s.started {
				s.tel.Logger.Warn("resync period is smaller than the resync check period and the informer has started; using the check period", "handler", name, "resyncPeriod", resync, "resyncCheckPeriod", s.resyncCheckPeriod)
				resync = s.resyncCheckPeriod
			} else {
				s.resyncCheckPeriod = resync
				for reg := range s.regs {
					reg.l.resync = determineResyncPeriod(s.tel.Logger, reg.l.name, reg.l.requestedResync, resync)
				}
			}
		}
	}
	s.nextID++
	l := newListener(s.nextID, h, name, determineResyncPeriod(s.tel.Logger, name, resync, s.resyncCheckPeriod), s.tel, &s.halted)
	l.requestedResync = resync
	l.coalesce = coalesce
	l.histEvery = s.opts.handlerHistogramEvery()
	l.added = time.Now()
	l.synced = s.signals.Poke
	if logger != nil {
		l.logger = *logger
	}
	reg := &registration{l: l, inf: s}
	s.regs[reg] = struct{}{}
	if !s.started {
		l.counters.InitialDone.Store(true)
		return reg, nil
	}
	s.sys.Root.Send(s.sup, &addListener{reg: reg, initial: true})
	return reg, nil
}

// determineResyncPeriod is client-go's: the resync period a handler that
// asked for desired gets from an informer whose check period is check.
func determineResyncPeriod(log *slog.Logger, handler string, desired, check time.Duration) time.Duration {
	if desired == 0 {
		return 0
	}
	if check == 0 {
		log.Warn("the resync period is ignored: this informer does no resyncs (its default resync period is 0)", "handler", handler, "resyncPeriod", desired)
		return 0
	}
	if desired < check {
		log.Warn("the resync period is raised to the informer's resync check period", "handler", handler, "resyncPeriod", desired, "resyncCheckPeriod", check)
		return check
	}
	return desired
}

// RemoveEventHandler stops the handler's listener. Once it returns the
// handler is not called again (a call already running finishes: the
// registration's ShutdownChan, which cache.ShutDownEventHandler waits on,
// closes once it has); removing twice, or removing another informer's
// registration, does nothing and is not an error, as in client-go.
func (s *SharedIndexInformer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	reg, ok := handle.(*registration)
	if !ok {
		return fmt.Errorf("actorinformer: registration %T does not belong to this informer", handle)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.regs[reg]; !ok {
		return nil
	}
	delete(s.regs, reg)
	reg.l.removed.Store(true)
	if s.started && !s.stopped {
		s.sys.Root.Send(s.sup, &removeListener{id: reg.l.id})
	} else {
		s.tel.Metrics.DropBacklog(reg.l.backlog)
		if !s.started {
			// Never spawned: nothing runs or will run.
			reg.l.exit()
		}
	}
	return nil
}

// GetStore returns the cache as a cache.Store.
func (s *SharedIndexInformer) GetStore() cache.Store { return s.store }

// GetIndexer returns the cache: a concurrent read handle that generated
// listers accept. Writes through it are accepted only before Run (to seed a
// cache in tests); afterwards only the indexer actor writes.
func (s *SharedIndexInformer) GetIndexer() cache.Indexer { return s.store }

// AddIndexers adds indexers; on a running informer the indexer actor indexes
// the objects it already holds.
func (s *SharedIndexInformer) AddIndexers(indexers cache.Indexers) error {
	return s.store.AddIndexers(indexers)
}

// GetController returns a cache.Controller view of the informer; client-go
// deprecates it. Its Run methods do nothing: Run the informer instead.
func (s *SharedIndexInformer) GetController() cache.Controller { return controllerView{s} }

// HasSynced reports whether the first list, tombstones included, has been
// applied to the cache and handed to the listeners.
func (s *SharedIndexInformer) HasSynced() bool {
	q := s.queue.Load()
	return q != nil && q.HasSynced()
}

// HasSyncedChecker returns a DoneChecker for HasSynced.
func (s *SharedIndexInformer) HasSyncedChecker() cache.DoneChecker {
	return s.signals.Add("informer "+s.opts.name, s.HasSynced)
}

// LastSyncResourceVersion is the resource version of the last list or watch
// event the reflector saw.
func (s *SharedIndexInformer) LastSyncResourceVersion() string {
	if r := s.refl.Load(); r != nil {
		return r.LastSyncResourceVersion()
	}
	return ""
}

// LastSyncUsedWatchList reports whether the last initial sync or relist came
// from a WatchList stream rather than a list; false before Run.
func (s *SharedIndexInformer) LastSyncUsedWatchList() bool {
	if r := s.refl.Load(); r != nil {
		return r.LastSyncUsedWatchList()
	}
	return false
}

// SetWatchErrorHandler sets the handler called on every list or watch error.
func (s *SharedIndexInformer) SetWatchErrorHandler(handler cache.WatchErrorHandler) error {
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) {
		handler(r, err)
	})
}

// SetWatchErrorHandlerWithContext sets the handler called on every list or
// watch error. It fails once the informer has started.
func (s *SharedIndexInformer) SetWatchErrorHandlerWithContext(handler cache.WatchErrorHandlerWithContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("informer has already started")
	}
	s.watchErrorHandler = handler
	return nil
}

// SetTransform sets the function applied to every object before it is
// queued. It fails once the informer has started.
func (s *SharedIndexInformer) SetTransform(handler cache.TransformFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("informer has already started")
	}
	s.transform = handler
	return nil
}

// IsStopped reports whether the informer has stopped.
func (s *SharedIndexInformer) IsStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// Run runs the informer until stopCh is closed.
func (s *SharedIndexInformer) Run(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.RunWithContext(ctx)
}

// RunWithContext runs the informer until ctx is cancelled, then stops every
// actor and goroutine it started before returning. It runs once; later calls
// return at once.
func (s *SharedIndexInformer) RunWithContext(ctx context.Context) {
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		s.tel.Logger.Warn("the informer has already run; Run more than once is not allowed", "informer", s.opts.name)
		return
	}
	s.started = true
	sys, ownSystem := systemFor(s.opts, s.tel.Logger)
	s.sys = sys
	q := fifo.New(fifo.Config{Known: s.store, MaxBatch: s.opts.maxBatch, Telemetry: s.tel})
	s.queue.Store(q)
	watchErr := s.watchErrorHandler
	r := reflector.New(reflector.Config{
		ListerWatcher:     s.lw,
		Context:           ctx,
		ExpectedType:      s.example,
		Name:              s.opts.name,
		TypeDescription:   s.objectDescription,
		Transform:         s.transform,
		WatchErrorHandler: watchErr,
		PageSize:          s.opts.pageSize,
		UseWatchList:      s.opts.useWatchList,
		Telemetry:         s.tel,
	})
	s.refl.Store(r)
	sup := &supervisor{inf: s, ctx: ctx, queue: q, refl: r, resyncCheck: s.resyncCheckPeriod, listeners: map[indexer.ListenerID]*actor.PID{}}
	for reg := range s.regs {
		sup.initial = append(sup.initial, reg)
	}
	s.sup = sys.Root.Spawn(supervisorProps(sup))
	s.mu.Unlock()

	<-ctx.Done()

	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.halted.Store(true)
	_ = sys.Root.PoisonFuture(s.sup).Wait()
	if ownSystem {
		sys.Shutdown()
	}
	s.tel.Metrics.Close()
	close(s.stoppedCh)
}

func newActorSystem(l *slog.Logger) *actor.ActorSystem {
	return NewActorSystem(SystemLogger(l))
}

// NewActorSystem is protoactor's actor.NewActorSystem with a process
// registry sized for informers: registryBuckets buckets instead of 1,024,
// which saves about 3 MB that a system holds for its whole life, and with
// its logs (and its remote's and cluster's) sent to klog, where the
// informers' go, at the levels SystemLogger says: protoactor's own logger
// writes coloured lines with minute timestamps to stderr, its whole life
// at Info. SystemLogger(l) sends them to another logger, a
// actor.WithLoggerFactory of yours wherever you like. It is the system
// the informers create for themselves; use it for a system you give them
// (WithActorSystem) or build a shard member's cluster on. A system that
// will host very many actors at once (a grain per object, say) is better
// served by protoactor's own constructor.
//
// Its dead letters are each logged as they happen (at klog -v=2), not
// throttled: protoactor's throttle logs the count of those past the
// first three a second later, from a goroutine of its own, so the dead
// letters of an informer's stop were logged after Stop had returned, to
// a logger its user may have replaced or closed since (klog.SetLogger in
// client-go's own tests, which internal/fidelity runs, raced with it).
// actor.WithDeadLetterThrottleCount among opts sets a throttle again.
func NewActorSystem(opts ...actor.ConfigOption) *actor.ActorSystem {
	sys := actor.NewActorSystem(append([]actor.ConfigOption{klogSystemLogger(), actor.WithDeadLetterThrottleCount(math.MaxInt32)}, opts...)...)
	shrinkRegistry(sys)
	return sys
}

// registryBuckets is the number of buckets of the process registry of an
// actor system the informer or factory creates. protoactor makes 1,024,
// each a map of 32 shards: about 2.8 MB that a system holds for its whole
// life, sized for systems of very many actors. An informer has four actors
// plus one per handler; 16 buckets (512 shards) are plenty for that.
const registryBuckets = 16

// shrinkRegistry replaces the process registry's buckets of a new actor
// system with registryBuckets ones, moving what is registered already (the
// event stream). It must run before the system is used: nothing else may
// touch the registry meanwhile.
func shrinkRegistry(sys *actor.ActorSystem) {
	old := sys.ProcessRegistry.LocalPIDs
	small := &actor.SliceMap{LocalPIDs: make([]cmap.ConcurrentMap, registryBuckets)}
	for i := range small.LocalPIDs {
		small.LocalPIDs[i] = cmap.New()
	}
	for _, bucket := range old.LocalPIDs {
		// IterCb, not Items: Items starts goroutines per shard.
		bucket.IterCb(func(id string, p any) { small.GetBucket(id).Set(id, p) })
	}
	sys.ProcessRegistry.LocalPIDs = small
}

// Stats is a snapshot of the pipeline's counters.
type Stats struct {
	ReflectorEvents int64
	QueueIn         int64
	QueueOut        int64
	QueueMerged     int64
	QueueBacklog    int64
	IndexerEvents   int64
	Relists         int64
	WatchRestarts   int64
	WatchErrors     int64
	Dropped         int64
	CacheSize       int
	// Reflector is the reflector's sync state (zero before Run), e.g.
	// whether a WatchList stream is waiting for its initial-events-end
	// bookmark.
	Reflector reflector.Status
	// Handlers lists the registered handlers in the order they were added.
	Handlers []HandlerStats
}

// AddCounters adds o's counters to s: every field but the gauges
// (QueueBacklog, CacheSize), Reflector and Handlers. It sums the stats of
// several informers, such as a sharded informer's ranges.
func (s *Stats) AddCounters(o Stats) {
	s.ReflectorEvents += o.ReflectorEvents
	s.QueueIn += o.QueueIn
	s.QueueOut += o.QueueOut
	s.QueueMerged += o.QueueMerged
	s.IndexerEvents += o.IndexerEvents
	s.Relists += o.Relists
	s.WatchRestarts += o.WatchRestarts
	s.WatchErrors += o.WatchErrors
	s.Dropped += o.Dropped
}

// HandlerStats describes one handler's listener.
type HandlerStats struct {
	Name      string
	Delivered int64
	Backlog   int64
	Panics    int64
}

// Stats returns the pipeline's counters. Always on, whatever the providers.
func (s *SharedIndexInformer) Stats() Stats {
	c := &s.tel.Metrics.Counters
	st := Stats{
		ReflectorEvents: c.ReflectorEvents.Load(),
		QueueIn:         c.QueueIn.Load(),
		QueueOut:        c.QueueOut.Load(),
		QueueMerged:     c.QueueMerged.Load(),
		QueueBacklog:    c.QueueBacklog.Load(),
		IndexerEvents:   c.IndexerEvents.Load(),
		Relists:         c.Relists.Load(),
		WatchRestarts:   c.WatchRestarts.Load(),
		WatchErrors:     c.WatchErrors.Load(),
		Dropped:         c.Dropped.Load(),
		CacheSize:       len(s.store.ListKeys()),
	}
	if r := s.refl.Load(); r != nil {
		st.Reflector = r.Status()
	}
	s.mu.Lock()
	regs := make([]*registration, 0, len(s.regs))
	for reg := range s.regs {
		regs = append(regs, reg)
	}
	s.mu.Unlock()
	slices.SortFunc(regs, func(a, b *registration) int { return cmp.Compare(a.l.id, b.l.id) })
	for _, reg := range regs {
		st.Handlers = append(st.Handlers, reg.stats())
	}
	return st
}

// Name is the informer's name in spans, metrics and logs.
func (s *SharedIndexInformer) Name() string { return s.opts.name }

// controllerView is what GetController returns.
type controllerView struct{ s *SharedIndexInformer }

func (c controllerView) RunWithContext(context.Context)      {}
func (c controllerView) Run(<-chan struct{})                 {}
func (c controllerView) HasSynced() bool                     { return c.s.HasSynced() }
func (c controllerView) HasSyncedChecker() cache.DoneChecker { return c.s.HasSyncedChecker() }
func (c controllerView) LastSyncResourceVersion() string     { return c.s.LastSyncResourceVersion() }
