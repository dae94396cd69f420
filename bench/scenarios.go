package bench

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// Sizes are the scenarios' sizes.
type Sizes struct {
	SyncObjects    int // InitialSync: pods listed
	WatchKeys      int // Watch: pods listed before the watch phase
	WatchEvents    int // Watch: Modified events over them
	SlowKeys       int // SlowHandler: pods listed
	SlowEvents     int // SlowHandler: Modified events, paced
	SlowRate       int // SlowHandler: events per second
	RelistObjects  int // Relist: pods listed, then relisted
	CoalesceKeys   int // Coalesce: pods listed
	CoalesceEvents int // Coalesce: Modified events over them, unpaced
}

// Small are the default sizes: every scenario runs in well under a second
// per run (the relist waits for the informers' ~1 s relist backoff), so the
// CI smoke run stays short.
var Small = Sizes{
	SyncObjects:    2_000,
	WatchKeys:      1_000,
	WatchEvents:    20_000,
	SlowKeys:       1_000,
	SlowEvents:     1_000,
	SlowRate:       10_000,
	RelistObjects:  2_000,
	CoalesceKeys:   1_000,
	CoalesceEvents: 20_000,
}

// Full are the sizes of issue 5. The watch scenario pre-builds 1M pods
// (about 1.3 GB).
var Full = Sizes{
	SyncObjects:    100_000,
	WatchKeys:      10_000,
	WatchEvents:    1_000_000,
	SlowKeys:       10_000,
	SlowEvents:     20_000,
	SlowRate:       10_000,
	RelistObjects:  100_000,
	CoalesceKeys:   10_000,
	CoalesceEvents: 1_000_000,
}

// Handlers is the number of counting handlers, as in the figures.
const Handlers = 4

// SlowDelay is the slow handler's time per event.
const SlowDelay = time.Millisecond

// settledStats collects garbage and returns the memory statistics: the
// baseline of a measured phase. It collects twice: objects referenced only
// from a sync.Pool survive the first collection (which moves the pools to
// their victim caches) and go with the second. A stopped informer of either
// kind can stay reachable that way, through a pooled value, until then.
func settledStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	return memStats()
}

// allocMetrics returns allocated bytes and allocations per unit between m0
// and m1.
func allocMetrics(m0, m1 *runtime.MemStats, n int, unit string) []Metric {
	return []Metric{
		{Name: "allocated", Unit: "B/" + unit, Value: float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)},
		{Name: "allocations", Unit: "allocs/" + unit, Value: float64(m1.Mallocs-m0.Mallocs) / float64(n)},
	}
}

// ---- 1. initial sync ----

// InitialSync lists Objects pods into a new informer with Handlers counting
// handlers, timed from Run until every handler has had every add.
type InitialSync struct {
	Objects, Handlers int

	prep once
	list *corev1.PodList
}

func (s *InitialSync) Name() string {
	return fmt.Sprintf("initial sync: %d pods, %d handlers", s.Objects, s.Handlers)
}

func (s *InitialSync) Prepare() {
	s.prep.Do(func() { s.list = NewPods(s.Objects).List(s.Objects) })
}

func (s *InitialSync) Run(impl Impl) ([]Metric, error) {
	s.Prepare()
	src := &Source{Lists: []*corev1.PodList{s.list}}
	inf := NewInformer(impl, src)
	cs, err := addCounters(inf, s.Handlers)
	if err != nil {
		return nil, err
	}
	done := expectAll(cs, Counts{Adds: int64(s.Objects)})

	m0 := settledStats()
	hs := startHeapSampler()
	c0 := cpuTime()
	t0 := time.Now()
	r := start(inf, src)
	err = waitAll(guard(s.Objects), done...)
	elapsed := time.Since(t0)
	cpu := cpuTime() - c0
	m1 := memStats()
	peak := hs.Stop()
	if err != nil {
		r.Stop()
		return nil, fmt.Errorf("%s: %w", impl, err)
	}
	retained := settledStats()
	r.Stop()
	n := float64(s.Objects)
	out := []Metric{
		{Name: "sync time", Unit: "ms", Value: ms(elapsed)},
		{Name: "CPU time", Unit: "ms", Value: ms(cpu)},
		{Name: "peak heap", Unit: "MB", Value: mb(uint64(max(0, diff(peak, m0.HeapAlloc))))},
		{Name: "heap after sync", Unit: "B/object", Value: diff(retained.HeapAlloc, m0.HeapAlloc) / n},
	}
	return append(out, allocMetrics(&m0, &m1, s.Objects, "object")...), nil
}

// ---- 2. watch throughput ----

// Watch lists Keys pods, then, once every handler has them, streams Events
// Modified events over them as fast as the informer takes them; timed from
// the release of the first event until every handler has had every update.
type Watch struct {
	Keys, Events, Handlers int
	// CPUProfile, when set, is a directory where each run writes the CPU
	// profile of its measured phase (watch-<handlers>h-<impl>-*.pprof).
	CPUProfile string
	updates
}

// updates is the input of the watch scenarios, built once: Keys pods listed,
// then Events Modified events over them.
type updates struct {
	prep   once
	list   *corev1.PodList
	events []watch.Event
}

func (u *updates) prepare(keys, events int) {
	u.prep.Do(func() {
		p := NewPods(keys)
		u.list = p.List(keys)
		u.events = p.Modified(events, uint64(keys))
	})
}

// source is a fresh Source over the prepared list and events.
func (u *updates) source() *Source {
	return &Source{Lists: []*corev1.PodList{u.list}, Watches: [][]watch.Event{u.events}}
}

func (s *Watch) Name() string {
	return fmt.Sprintf("watch: %d updates over %d keys, %d handler(s)", s.Events, s.Keys, s.Handlers)
}

func (s *Watch) Prepare() { s.prepare(s.Keys, s.Events) }

func (s *Watch) Run(impl Impl) ([]Metric, error) {
	s.Prepare()
	src := s.source()
	src.Gate()
	inf := NewInformer(impl, src)
	cs, err := addCounters(inf, s.Handlers)
	if err != nil {
		return nil, err
	}
	r := start(inf, src)
	defer r.Stop()
	if err := waitInitialAdds(impl, cs, s.Keys); err != nil {
		return nil, err
	}
	done := expectAll(cs, Counts{Adds: int64(s.Keys), Updates: int64(s.Events)})

	m0 := settledStats()
	stopProfile, err := startPhaseProfile(s.CPUProfile, fmt.Sprintf("watch-%dh-%s", s.Handlers, impl))
	if err != nil {
		return nil, err
	}
	c0 := cpuTime()
	t0 := src.Release()
	err = waitAll(guard(s.Events), done...)
	elapsed := time.Since(t0)
	cpu := cpuTime() - c0
	stopProfile()
	m1 := memStats()
	if err != nil {
		return nil, fmt.Errorf("%s: watch: %w", impl, err)
	}
	out := []Metric{
		{Name: "throughput", Unit: "events/s", Value: float64(s.Events) / elapsed.Seconds(), Better: Higher},
		{Name: "CPU time", Unit: "ns/event", Value: float64(cpu) / float64(s.Events)},
	}
	return append(out, allocMetrics(&m0, &m1, s.Events, "event")...), nil
}

// ---- 3. one slow handler ----

// SlowHandler lists Keys pods, then streams Events Modified events at Rate
// per second to Handlers handlers, one of which sleeps Delay per event (none
// when Delay is 0: the control run). It measures the other handlers'
// delivery latency (source hand-over to handler call) and, once they have
// everything, how much the heap grew with the slow handler's backlog.
type SlowHandler struct {
	Keys, Events, Rate, Handlers int
	Delay                        time.Duration
	updates
}

func (s *SlowHandler) Name() string {
	slow := fmt.Sprintf("1 of them sleeping %v per event", s.Delay)
	if s.Delay == 0 {
		slow = "all fast (control)"
	}
	return fmt.Sprintf("slow handler: %d updates over %d keys at %d/s, %d handlers, %s", s.Events, s.Keys, s.Rate, s.Handlers, slow)
}

func (s *SlowHandler) Prepare() { s.prepare(s.Keys, s.Events) }

func (s *SlowHandler) Run(impl Impl) ([]Metric, error) {
	s.Prepare()
	src := s.source()
	src.Gate()
	src.Pace(time.Second / time.Duration(s.Rate))
	base := time.Now()
	sent := make([]int64, s.Events)
	src.Record(sent, base)
	inf := NewInformer(impl, src)
	cs, err := addCounters(inf, s.Handlers)
	if err != nil {
		return nil, err
	}
	fast := cs
	var slow *Counter
	if s.Delay > 0 {
		slow, fast = cs[0], cs[1:]
	}
	lats := make([][]int64, len(fast))
	for i, c := range fast {
		lats[i] = make([]int64, s.Events)
		c.Latency(lats[i], sent, base)
	}
	r := start(inf, src)
	defer r.Stop()
	if err := waitInitialAdds(impl, cs, s.Keys); err != nil {
		return nil, err
	}
	want := Counts{Adds: int64(s.Keys), Updates: int64(s.Events)}
	done := expectAll(fast, want)
	var slowDone <-chan struct{}
	if slow != nil {
		slowDone = slow.Expect(want)
		slow.SetDelay(s.Delay)
	}

	m0 := settledStats()
	hs := startHeapSampler()
	src.Release()
	err = waitAll(guard(s.Events)+time.Duration(s.Events)*time.Second/time.Duration(s.Rate), done...)
	peak := hs.Stop()
	var backlog int64
	if slow != nil {
		backlog = int64(s.Events) - slow.Counts().Updates
	}
	m1 := settledStats()
	m2 := m1
	if slow != nil {
		slow.Hurry()
		if err == nil {
			err = waitAll(guard(s.Events), slowDone)
		}
		m2 = settledStats()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", impl, err)
	}
	var all []int64
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	out := []Metric{
		{Name: "fast handlers' latency p50", Unit: "µs", Value: us(percentile(all, 50))},
		{Name: "fast handlers' latency p99", Unit: "µs", Value: us(percentile(all, 99))},
		{Name: "fast handlers' latency max", Unit: "µs", Value: us(all[len(all)-1])},
		{Name: "peak heap growth", Unit: "MB", Value: mb(uint64(max(0, diff(peak, m0.HeapAlloc))))},
	}
	if slow != nil {
		// What the backlog holds: the live heap with it, less the live heap
		// once the slow handler has caught up (same pipeline state
		// otherwise).
		held := diff(m1.HeapAlloc, m2.HeapAlloc)
		perEvent := 0.0
		if backlog > 0 {
			perEvent = held / float64(backlog)
		}
		out = append(out,
			Metric{Name: "slow handler's backlog", Unit: "events", Value: float64(backlog), Better: Neither},
			Metric{Name: "heap held by that backlog", Unit: "MB", Value: held / (1 << 20)},
			Metric{Name: "heap held per backlogged event", Unit: "B", Value: perEvent},
			// The whole process's live heap with the backlog and once the
			// slow handler has caught up: the same prepared input is live
			// in both informers' runs, so the difference is the informers'.
			// The rows above count a buffer that stays grown once the
			// backlog is gone as if the backlog did not hold it; these do.
			Metric{Name: "live heap with the backlog (whole process)", Unit: "MB", Value: float64(m1.HeapAlloc) / (1 << 20)},
			Metric{Name: "live heap after catching up (whole process)", Unit: "MB", Value: float64(m2.HeapAlloc) / (1 << 20)},
		)
	}
	return out, nil
}

// percentile returns the p-th percentile of sorted (nearest rank).
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ---- 3b. one slow handler, coalesced ----

// Coalesce lists Keys pods, then streams Events Modified events over them,
// unpaced, to one handler sleeping Delay per event. At the end of the stream
// (the cache holds the last event) it reports the notifications pending for
// the handler and the live heap; then the delay is lifted and the informer
// stopped (a coalesced handler never sees every update, so the run does not
// wait for it). Run with the ActorsCoalesced implementation the handler is
// wrapped in actors.Coalesced.
type Coalesce struct {
	Keys, Events int
	Delay        time.Duration
	updates
}

// CoalesceImpls are the implementations the Coalesce scenario compares.
var CoalesceImpls = []Impl{ClientGo, Actors, ActorsCoalesced}

func (s *Coalesce) Name() string {
	return fmt.Sprintf("coalesce: %d updates over %d keys, unpaced, 1 handler sleeping %v per event", s.Events, s.Keys, s.Delay)
}

func (s *Coalesce) Prepare() { s.prepare(s.Keys, s.Events) }

func (s *Coalesce) Run(impl Impl) ([]Metric, error) {
	s.Prepare()
	src := s.source()
	src.Gate()
	inf := NewInformer(impl, src)
	c := &Counter{}
	var h cache.ResourceEventHandler = c
	if impl == ActorsCoalesced {
		h = actors.Coalesced(c)
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return nil, err
	}
	r := start(inf, src)
	defer r.Stop()
	if err := waitInitialAdds(impl, []*Counter{c}, s.Keys); err != nil {
		return nil, err
	}
	last := s.events[len(s.events)-1].Object.(*corev1.Pod)
	key, _ := cache.MetaNamespaceKeyFunc(last)
	m0 := settledStats()
	c.SetDelay(s.Delay)
	t0 := src.Release()
	deadline := t0.Add(guard(s.Events))
	for {
		if obj, ok, _ := inf.GetStore().GetByKey(key); ok && obj.(*corev1.Pod).ResourceVersion == last.ResourceVersion {
			break
		}
		if time.Now().After(deadline) {
			c.Hurry()
			return nil, fmt.Errorf("%s: %w", impl, errTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(t0)
	if a, ok := inf.(*actors.SharedIndexInformer); ok && impl == Actors {
		// The indexer raises the listener's backlog once it has applied
		// the whole batch, just after the store shows its last event: wait
		// for that bookkeeping (microseconds), so that the backlog read
		// below counts every event not yet delivered.
		for a.Stats().Handlers[0].Backlog+c.Counts().Updates < int64(s.Events) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	pending := int64(-1)
	if a, ok := inf.(*actors.SharedIndexInformer); ok {
		// Ours counts what its listener holds: for a coalesced handler,
		// the merged notifications, not the updates it will not see.
		pending = a.Stats().Handlers[0].Backlog
	}
	calls := c.Counts().Updates
	if pending < 0 {
		pending = int64(s.Events) - calls
	}
	m1 := settledStats()
	// The same a moment later (after two collections): what ours held at
	// the end of the stream includes notifications on their way to the
	// listener, not merged yet.
	settled := int64(s.Events) - c.Counts().Updates
	if a, ok := inf.(*actors.SharedIndexInformer); ok {
		settled = a.Stats().Handlers[0].Backlog
	}
	c.Hurry()
	return []Metric{
		{Name: "stream time", Unit: "ms", Value: ms(elapsed)},
		{Name: "handler calls during the stream", Unit: "calls", Value: float64(calls), Better: Neither},
		{Name: "pending notifications at the end of the stream", Unit: "notifications", Value: float64(pending)},
		{Name: "pending notifications after two collections", Unit: "notifications", Value: float64(settled)},
		{Name: "live heap growth at the end of the stream", Unit: "MB", Value: diff(m1.HeapAlloc, m0.HeapAlloc) / (1 << 20)},
		{Name: "live heap at the end of the stream (whole process)", Unit: "MB", Value: float64(m1.HeapAlloc) / (1 << 20)},
	}, nil
}

// ---- 4. relist ----

// Relist lists Objects pods; once every handler has them, the watch fails
// with 410 Expired and both informers relist (after their backoff, ~1 s,
// not timed). The relist returns the pods minus 10 % (deleted: tombstones)
// with 10 % of them changed. Timed from the second List call until every
// handler has had a tombstone for every deleted pod and an update for every
// other one (unchanged pods come as resync updates, see Run).
type Relist struct {
	Objects, Handlers int

	prep             once
	first, second    *corev1.PodList
	deleted, changed int
}

func (s *Relist) Name() string {
	return fmt.Sprintf("relist: %d pods, 10%% deleted, 10%% changed, %d handlers", s.Objects, s.Handlers)
}

func (s *Relist) Prepare() {
	s.prep.Do(func() {
		p := NewPods(s.Objects)
		s.first = p.List(s.Objects)
		s.second = &corev1.PodList{Items: make([]corev1.Pod, 0, s.Objects)}
		rv := uint64(s.Objects)
		for i := range s.Objects {
			switch i % 10 {
			case 0:
				s.deleted++
			case 5:
				s.changed++
				rv++
				s.second.Items = append(s.second.Items, corev1.Pod{})
				p.Set(&s.second.Items[len(s.second.Items)-1], i, rv, 1)
			default:
				s.second.Items = append(s.second.Items, s.first.Items[i])
			}
		}
		s.second.ResourceVersion = fmt.Sprint(rv)
	})
}

func (s *Relist) Run(impl Impl) ([]Metric, error) {
	s.Prepare()
	src := &Source{Lists: []*corev1.PodList{s.first, s.second}, Watches: [][]watch.Event{{ExpiredEvent()}}}
	src.Gate()
	inf := NewInformer(impl, src)
	cs, err := addCounters(inf, s.Handlers)
	if err != nil {
		return nil, err
	}
	r := start(inf, src)
	defer r.Stop()
	if err := waitInitialAdds(impl, cs, s.Objects); err != nil {
		return nil, err
	}
	// Every listed object that is still cached reaches handlers as an
	// update: changed ones as real updates, unchanged ones as resyncs,
	// which both informers give to handlers still in their syncing set (all
	// of them here: without a resync period no resync check ever takes
	// them out, as in client-go's sharedProcessor).
	done := expectAll(cs, Counts{Adds: int64(s.Objects), Updates: int64(len(s.second.Items)), Deletes: int64(s.deleted)})

	m0 := settledStats()
	hs := startHeapSampler()
	c0, f0 := cpuTime(), minorFaults()
	released := src.Release()
	err = waitAll(guard(s.Objects)+time.Minute, done...)
	end := time.Now()
	cpu, faults := cpuTime()-c0, minorFaults()-f0
	m1 := memStats()
	peak := hs.Stop()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", impl, err)
	}
	lists := src.ListCalls()
	if len(lists) < 2 {
		return nil, fmt.Errorf("%s: %d list calls, want 2", impl, len(lists))
	}
	// The smallest count over the handlers: every handler must have them.
	tombs, updates := int64(-1), int64(-1)
	for _, c := range cs {
		n := c.Counts()
		if tombs < 0 || n.Tombstones < tombs {
			tombs = n.Tombstones
		}
		if updates < 0 || n.Updates < updates {
			updates = n.Updates
		}
	}
	out := []Metric{
		{Name: "relist time", Unit: "ms", Value: ms(end.Sub(lists[1]))},
		// The backoff before the relist is idle: the CPU time is the relist's.
		{Name: "CPU time", Unit: "ms", Value: ms(cpu)},
		{Name: "minor page faults", Unit: "faults", Value: float64(faults), Better: Neither},
		{Name: "tombstones per handler", Unit: "deletes", Value: float64(tombs), Better: Neither},
		{Name: "updates per handler", Unit: "updates", Value: float64(updates), Better: Neither},
		{Name: "backoff before the relist (not timed)", Unit: "ms", Value: ms(lists[1].Sub(released)), Better: Neither},
		{Name: "peak heap growth", Unit: "MB", Value: mb(uint64(max(0, diff(peak, m0.HeapAlloc))))},
	}
	return append(out, allocMetrics(&m0, &m1, s.Objects, "listed object")...), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(ns int64) float64        { return float64(ns) / float64(time.Microsecond) }

// waitInitialAdds waits until every counter has had the n adds of the
// initial list.
func waitInitialAdds(impl Impl, cs []*Counter, n int) error {
	if err := waitAll(guard(n), expectAll(cs, Counts{Adds: int64(n)})...); err != nil {
		return fmt.Errorf("%s: sync: %w", impl, err)
	}
	return nil
}
