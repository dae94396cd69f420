package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// clientGoSide is --compare: client-go's SharedIndexInformer on pods, over
// the same client (for the simulated cluster: a watch of its own, which
// gets every event the demo's informer gets), with the equivalents of the
// demo's handlers under the same names, and its own controller on a plain
// client-go workqueue when the demo has one. It measures what client-go
// does not expose:
//
//   - received: the objects client-go's informer took from the watch and
//     from lists, counted by a transform (SetTransform), which client-go
//     calls once for every object it queues, as it queues it;
//   - per handler, calls, panics, and its backlog: objects received and not
//     yet handed to the handler (the delta queue and the listener's buffer,
//     where the demo's backlog counts the listener's mailbox only);
//   - per handler, the handler's duration (every call) and the event's age
//     at the call: the time since the transform saw the object, measured
//     for the objects whose resourceVersion ends in 0 (a tenth of them),
//     so that client-go pays a map look-up on a tenth of the calls only.
//
// A handler that panics is recovered inside its wrapper and counted:
// client-go's listener would re-panic and end the process
// (utilruntime.ReallyCrash).
type clientGoSide struct {
	inf      cache.SharedIndexInformer
	handlers []*cgHandler
	received atomic.Int64
	stamps   *stampMap

	// The controller, if the demo has one.
	queue      workqueue.TypedRateLimitingInterface[string]
	workers    int
	reconciles atomic.Int64

	stopCh  chan struct{}
	runDone chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup // the controller's workers

	mu           sync.Mutex
	base, latest cgSample // Snapshot's window
	prevLine     cgSample // at the summary's previous line
}

// cgHandler wraps one handler registered with client-go's informer.
type cgHandler struct {
	name    string
	side    *clientGoSide
	inner   cache.ResourceEventHandler
	calls   atomic.Int64 // every call
	watched atomic.Int64 // calls with an object the transform saw: no tombstones, no resyncs
	panics  atomic.Int64
	age     latencyHist
	dur     latencyHist
	// innerCalls is the inner handler's own counter (the panicking one
	// counts its calls to know when to panic).
	innerCalls atomic.Int64
}

// newClientGoSide builds client-go's informer with the equivalents of the
// demo's handlers hs (by label: controller, trace, slow, panic, counters).
// Call start, then stop.
func newClientGoSide(client kubernetes.Interface, cfg config, hs []*demoHandler) (*clientGoSide, error) {
	ns := cfg.namespace
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}, client)
	s := &clientGoSide{
		inf:     cache.NewSharedIndexInformer(lw, &corev1.Pod{}, cfg.resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		stopCh:  make(chan struct{}),
		runDone: make(chan struct{}),
		stamps:  newStampMap(),
	}
	for _, dh := range hs {
		h := &cgHandler{name: dh.label, side: s}
		switch dh.label {
		case "controller":
			if s.queue == nil {
				s.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
				s.workers = max(cfg.workers, 1)
			}
			h.inner = &cgEnqueuer{calls: &h.innerCalls, queue: s.queue}
		case "trace":
			h.inner = &keyCounter{calls: &h.innerCalls}
		case "slow":
			h.inner = &sleeper{calls: &h.innerCalls, d: cfg.slowHandler}
		case "panic":
			h.inner = &panicker{calls: &h.innerCalls, every: int64(max(cfg.panicEvery, 1))}
		default:
			h.inner = &counter{calls: &h.innerCalls}
		}
		s.handlers = append(s.handlers, h)
	}
	if err := s.inf.SetTransform(s.transform); err != nil {
		return nil, err
	}
	for _, h := range s.handlers {
		if _, err := s.inf.AddEventHandler(h); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// start runs the informer and the controller's workers.
func (s *clientGoSide) start(now time.Time) {
	s.mu.Lock()
	s.base = s.sample(now)
	s.latest, s.prevLine = s.base, s.base
	s.mu.Unlock()
	go func() {
		defer close(s.runDone)
		s.inf.Run(s.stopCh)
	}()
	for range s.workers {
		s.wg.Go(s.work)
	}
}

// waitForSync waits until the informer has handed its first list to the
// handlers, or ctx is done.
func (s *clientGoSide) waitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.inf.HasSynced)
}

// stop stops the informer, then the controller (which first finishes the
// keys queued), and waits for them. It may be called more than once.
func (s *clientGoSide) stop() {
	if s == nil {
		return
	}
	s.stopped.Do(func() {
		close(s.stopCh)
		// Run returns once the handlers have stopped: no key is added to
		// the queue any more, and the workers finish the ones queued.
		<-s.runDone
		if s.queue != nil {
			s.queue.ShutDown()
		}
		s.wg.Wait()
	})
}

// transform counts and stamps every object client-go queues; it returns the
// object unchanged (the simulated cluster's watchers share it).
func (s *clientGoSide) transform(obj any) (any, error) {
	s.received.Add(1)
	return stampTransform(s.stamps, len(s.handlers))(obj)
}

// sampledRV returns obj's resourceVersion if its event age is measured.
func sampledRV(obj any) (string, bool) {
	m, ok := obj.(interface{ GetResourceVersion() string })
	if !ok {
		return "", false
	}
	rv := m.GetResourceVersion()
	return rv, rv != "" && rv[len(rv)-1] == '0'
}

func (h *cgHandler) OnAdd(obj any, initial bool) {
	start := h.begin(obj, true)
	defer h.end(start)
	h.inner.OnAdd(obj, initial)
}

func (h *cgHandler) OnUpdate(oldObj, newObj any) {
	// A resync hands the cached object as both: it did not come through the
	// transform.
	start := h.begin(newObj, oldObj != newObj)
	defer h.end(start)
	h.inner.OnUpdate(oldObj, newObj)
}

func (h *cgHandler) OnDelete(obj any) {
	_, tombstone := obj.(cache.DeletedFinalStateUnknown)
	start := h.begin(obj, !tombstone)
	defer h.end(start)
	h.inner.OnDelete(obj)
}

// begin counts a call and measures the event's age; watched says the
// object came through the transform.
func (h *cgHandler) begin(obj any, watched bool) time.Time {
	now := time.Now()
	h.calls.Add(1)
	if watched {
		h.watched.Add(1)
		if rv, ok := sampledRV(obj); ok {
			if at, ok := h.side.stamps.take(rv); ok {
				h.age.observe(now.Sub(at))
			}
		}
	}
	return now
}

// end records the call's duration and recovers a panic, which client-go
// would re-panic (crashing the demo): the demo counts it and goes on.
func (h *cgHandler) end(start time.Time) {
	h.dur.observe(time.Since(start))
	if r := recover(); r != nil {
		h.panics.Add(1)
	}
}

// stamp is when the transform saw an object, and how many handlers have
// still to take it.
type stamp struct {
	at   time.Time
	left int
}

// maxStamps bounds a stampMap: a stamp whose handlers never all take it
// (a delta merged in the queue, a handler removed) would otherwise stay
// forever. When the current generation holds maxStamps, the previous one
// is forgotten.
const maxStamps = 1 << 16

// stampMap holds the stamps by resourceVersion, in two generations. While
// it is off (pause), put and take do nothing but read an atomic.
type stampMap struct {
	off      atomic.Bool
	mu       sync.Mutex
	m, older map[string]stamp
}

func newStampMap() *stampMap { return &stampMap{m: map[string]stamp{}} }

// pause turns the map off (true), forgetting its stamps, or on again.
func (m *stampMap) pause(off bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off && !m.off.Load() {
		m.m, m.older = map[string]stamp{}, nil
	}
	m.off.Store(off)
}

func (m *stampMap) put(rv string, at time.Time, handlers int) {
	if m.off.Load() {
		return
	}
	m.mu.Lock()
	if st, ok := m.m[rv]; ok {
		// Listed again (a relist) before every handler had it: keep the
		// first time, wait for every handler again.
		st.left += handlers
		m.m[rv] = st
	} else {
		if len(m.m) >= maxStamps {
			m.older, m.m = m.m, make(map[string]stamp, len(m.m))
		}
		m.m[rv] = stamp{at: at, left: handlers}
	}
	m.mu.Unlock()
}

func (m *stampMap) take(rv string) (time.Time, bool) {
	if m.off.Load() {
		return time.Time{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	gen := m.m
	st, ok := gen[rv]
	if !ok {
		if gen = m.older; gen == nil {
			return time.Time{}, false
		}
		if st, ok = gen[rv]; !ok {
			return time.Time{}, false
		}
	}
	if st.left--; st.left <= 0 {
		delete(gen, rv)
	} else {
		gen[rv] = st
	}
	return st.at, true
}

// stampTransform is an informer transform that stamps the objects whose
// event age is measured (sampledRV) for handlers handlers, and returns
// every object unchanged.
func stampTransform(m *stampMap, handlers int) func(any) (any, error) {
	return func(obj any) (any, error) {
		if m.off.Load() {
			return obj, nil
		}
		if rv, ok := sampledRV(obj); ok {
			m.put(rv, time.Now(), handlers)
		}
		return obj, nil
	}
}

// cgEnqueuer is the client-go controller's handler: it adds the object's
// key to the workqueue.
type cgEnqueuer struct {
	calls *atomic.Int64
	queue workqueue.TypedRateLimitingInterface[string]
}

func (h *cgEnqueuer) OnAdd(obj any, _ bool) { h.enqueue(obj) }
func (h *cgEnqueuer) OnUpdate(_, obj any)   { h.enqueue(obj) }
func (h *cgEnqueuer) OnDelete(obj any)      { h.enqueue(obj) }
func (h *cgEnqueuer) enqueue(obj any) {
	h.calls.Add(1)
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		h.queue.Add(key)
	}
}

// keyCounter stands for the demo's tracing handler, which client-go cannot
// give a delta's context: it computes the object's key and counts.
type keyCounter struct{ calls *atomic.Int64 }

func (h *keyCounter) OnAdd(obj any, _ bool) { h.handle(obj) }
func (h *keyCounter) OnUpdate(_, obj any)   { h.handle(obj) }
func (h *keyCounter) OnDelete(obj any)      { h.handle(obj) }
func (h *keyCounter) handle(obj any) {
	h.calls.Add(1)
	_, _ = cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
}

// work is a client-go controller worker: it reads each key's object from
// client-go's cache, as the demo's controller does from ours.
func (s *clientGoSide) work() {
	for {
		key, shutdown := s.queue.Get()
		if shutdown {
			return
		}
		_, _, _ = s.inf.GetIndexer().GetByKey(key)
		s.reconciles.Add(1)
		s.queue.Forget(key)
		s.queue.Done(key)
	}
}

// cgSample is the side's cumulative counters at one time.
type cgSample struct {
	at         time.Time
	received   int64
	reconciles int64
	handlers   []cgHandlerSample
}

type cgHandlerSample struct {
	calls, watched, panics int64
	age, dur               []int64
}

func (s *clientGoSide) sample(now time.Time) cgSample {
	smp := cgSample{at: now, reconciles: s.reconciles.Load(), handlers: make([]cgHandlerSample, len(s.handlers))}
	for i, h := range s.handlers {
		smp.handlers[i] = cgHandlerSample{
			calls: h.calls.Load(), watched: h.watched.Load(), panics: h.panics.Load(),
			age: h.age.counts(), dur: h.dur.counts(),
		}
	}
	// After the handlers' counters: an object is counted here before any
	// handler sees it, so no backlog comes out negative.
	smp.received = s.received.Load()
	return smp
}

// compareSnapshot is what --compare adds to the page's data: client-go's
// side, in a JSON object of its own.
type compareSnapshot struct {
	ClientGo clientGoSnapshot `json:"clientgo"`
}

// clientGoSnapshot describes client-go's informer over the window that
// ends at the snapshot (the last one to two seconds).
type clientGoSnapshot struct {
	// Rate is the objects received per second (watch events and listed
	// objects).
	Rate      float64 `json:"rate"`
	Received  int64   `json:"received"` // since the start
	Synced    bool    `json:"synced"`
	CacheSize int     `json:"cache_size"`
	WindowS   float64 `json:"window_s"` // the window's length, seconds
	// Reconciles is the client-go controller's (none: 0).
	ReconcileRate  float64             `json:"reconcile_rate"`
	WorkqueueDepth int                 `json:"workqueue_depth"`
	Handlers       []clientGoHandlerSt `json:"handlers"`
}

// clientGoHandlerSt is one handler, in the page's handler row (api.go):
// Delivered and Panics count since the start (panics recovered by the
// demo); Fault stays "" (faults apply to our side's handlers only).
type clientGoHandlerSt = handlerSnapshot

// Snapshot returns client-go's side over the last one to two seconds (since
// the first sample at least a second old). It may be called by multiple
// goroutines simultaneously.
func (s *clientGoSide) Snapshot() compareSnapshot { return s.snapshotAt(time.Now()) }

func (s *clientGoSide) snapshotAt(now time.Time) compareSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.sample(now)
	if now.Sub(s.latest.at) >= time.Second {
		s.base, s.latest = s.latest, cur
	}
	return compareSnapshot{ClientGo: s.describe(s.base, cur)}
}

// describe reports cur against prev.
func (s *clientGoSide) describe(prev, cur cgSample) clientGoSnapshot {
	dt := cur.at.Sub(prev.at).Seconds()
	rate := func(c, p int64) float64 {
		if dt <= 0 {
			return 0
		}
		return float64(c-p) / dt
	}
	ms := func(c, p []int64, q float64) float64 {
		d, _ := latencyQuantile(c, p, q)
		return float64(d) / float64(time.Millisecond)
	}
	out := clientGoSnapshot{
		Rate:      rate(cur.received, prev.received),
		Received:  cur.received,
		Synced:    s.inf.HasSynced(),
		CacheSize: len(s.inf.GetStore().ListKeys()),
		WindowS:   dt,
		Handlers:  make([]clientGoHandlerSt, len(s.handlers)),
	}
	if s.queue != nil {
		out.WorkqueueDepth = s.queue.Len()
		out.ReconcileRate = rate(cur.reconciles, prev.reconciles)
	}
	for i, h := range s.handlers {
		c, p := cur.handlers[i], prev.handlers[i]
		out.Handlers[i] = clientGoHandlerSt{
			Name:          h.name,
			Rate:          rate(c.calls, p.calls),
			Backlog:       max(cur.received-c.watched, 0),
			P50ms:         ms(c.age, p.age, 0.5),
			P99ms:         ms(c.age, p.age, 0.99),
			DurationP50ms: ms(c.dur, p.dur, 0.5),
			DurationP99ms: ms(c.dur, p.dur, 0.99),
			Delivered:     c.calls,
			Panics:        c.panics,
		}
	}
	return out
}

// writeLine prints client-go's side of a summary line: rates since the
// previous line, backlogs, panics, and the event age at the handler call
// (p50/p99), e.g.
//
//	client-go   201/s | cache    993 | controller   201/s (age 0.03/0.2 ms) | slow   150/s (backlog 312, age 810/1600 ms) | workqueue depth 0, reconciles   198/s
func (s *clientGoSide) writeLine(w io.Writer, now time.Time) {
	s.mu.Lock()
	cur := s.sample(now)
	prev := s.prevLine
	s.prevLine = cur
	s.mu.Unlock()
	d := s.describe(prev, cur)
	var b strings.Builder
	fmt.Fprintf(&b, "%10s client-go %5.0f/s | cache %6d", "", d.Rate, d.CacheSize)
	for _, h := range d.Handlers {
		fmt.Fprintf(&b, " | %s %5.0f/s", h.Name, h.Rate)
		var notes []string
		if h.Backlog > 0 {
			notes = append(notes, fmt.Sprintf("backlog %d", h.Backlog))
		}
		if h.Panics > 0 {
			notes = append(notes, fmt.Sprintf("%d panics", h.Panics))
		}
		if h.P99ms > 0 {
			notes = append(notes, fmt.Sprintf("age %s/%s ms", fmtMs(h.P50ms), fmtMs(h.P99ms)))
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
	}
	if s.queue != nil {
		fmt.Fprintf(&b, " | workqueue depth %d, reconciles %5.0f/s", d.WorkqueueDepth, d.ReconcileRate)
	}
	fmt.Fprintln(w, b.String())
}

// fmtMs prints milliseconds with two significant digits or so.
func fmtMs(ms float64) string {
	switch {
	case ms >= 10:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2g", ms)
	}
}

// writeTotals prints client-go's totals at the end of the run.
func (s *clientGoSide) writeTotals(w io.Writer) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "client-go: received %d, cache %d objects", s.received.Load(), len(s.inf.GetStore().ListKeys()))
	if s.queue != nil {
		fmt.Fprintf(w, ", %d reconciles by %d worker(s)", s.reconciles.Load(), s.workers)
	}
	fmt.Fprintln(w)
	for _, h := range s.handlers {
		fmt.Fprintf(w, "  client-go %s: %d delivered, %d panics (recovered by the demo)\n", h.name, h.calls.Load(), h.panics.Load())
	}
}

// startClientGoSide builds and starts client-go's side if cfg.compare; nil
// otherwise. The methods of a nil *clientGoSide do nothing.
func startClientGoSide(client kubernetes.Interface, cfg config, hs []*demoHandler) (*clientGoSide, error) {
	if !cfg.compare {
		return nil, nil
	}
	s, err := newClientGoSide(client, cfg, hs)
	if err != nil {
		return nil, fmt.Errorf("--compare: %w", err)
	}
	s.start(time.Now())
	return s, nil
}

// waitForSyncAndSay waits for client-go's first list to reach its handlers
// and says so.
func (s *clientGoSide) waitForSyncAndSay(ctx context.Context, out io.Writer, start time.Time) {
	if s == nil {
		return
	}
	if !s.waitForSync(ctx) {
		fmt.Fprintln(out, "stopped before client-go's informer synced")
		return
	}
	fmt.Fprintf(out, "client-go's informer (--compare) synced %d pods in %s\n", len(s.inf.GetStore().ListKeys()), fmtDuration(time.Since(start)))
}
