package bench

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// Impl names an informer implementation.
type Impl string

// The two implementations compared.
const (
	Actors   Impl = "actors"
	ClientGo Impl = "client-go"
	// ActorsCoalesced is ours with the handlers wrapped in
	// actors.Coalesced, where a scenario does so (Coalesce).
	ActorsCoalesced Impl = "actors+coalesced"
)

// Impls is the order runs alternate in.
var Impls = []Impl{Actors, ClientGo}

// ParseImpl returns the implementation named s.
func ParseImpl(s string) (Impl, error) {
	switch Impl(s) {
	case Actors, ClientGo, ActorsCoalesced, Floor:
		return Impl(s), nil
	}
	return "", fmt.Errorf("bench: unknown implementation %q (want %q, %q, %q or %q)", s, Actors, ClientGo, ActorsCoalesced, Floor)
}

// NewInformer returns impl's shared informer for pods from lw, with no
// resync and the namespace index, as a generated pod informer has.
func NewInformer(impl Impl, lw cache.ListerWatcher) cache.SharedIndexInformer {
	idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	switch impl {
	case Actors, ActorsCoalesced:
		return actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, idx)
	case Floor:
		return newFloor(lw, idx)
	}
	return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, idx)
}

// errTimeout is returned when a run does not reach its expected counts in
// time: a bug of the harness or of an informer, never a slow machine
// (timeouts are minutes).
var errTimeout = errors.New("bench: timed out waiting for the handlers")

// running is a started informer.
type running struct {
	inf  cache.SharedIndexInformer
	src  *Source
	stop chan struct{}
	done chan struct{}
}

// start runs inf, which reads src, in a goroutine.
func start(inf cache.SharedIndexInformer, src *Source) *running {
	r := &running{inf: inf, src: src, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		inf.Run(r.stop)
	}()
	return r
}

// Stop stops the informer and waits for Run to return and for the
// source's watches to end (an informer stops its watch as it stops; the
// wait is bounded so that one that does not cannot hang a benchmark).
func (r *running) Stop() {
	close(r.stop)
	<-r.done
	ended := make(chan struct{})
	go func() {
		r.src.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(time.Minute):
	}
}

// addCounters registers n counters on inf.
func addCounters(inf cache.SharedIndexInformer, n int) ([]*Counter, error) {
	cs := make([]*Counter, n)
	for i := range cs {
		cs[i] = &Counter{}
		if _, err := inf.AddEventHandler(cs[i]); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

// waitAll waits for every channel, or the timeout.
func waitAll(timeout time.Duration, chs ...<-chan struct{}) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-t.C:
			return errTimeout
		}
	}
	return nil
}

// expectAll starts the same phase on every counter.
func expectAll(cs []*Counter, want Counts) []<-chan struct{} {
	chs := make([]<-chan struct{}, len(cs))
	for i, c := range cs {
		chs[i] = c.Expect(want)
	}
	return chs
}

// memStats is a forced-GC-free snapshot of the allocation counters.
func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// heapSampler records the largest heap (live objects and not yet collected
// garbage, runtime/metrics' heap objects class: MemStats.HeapAlloc) seen at
// a coarse interval, without stopping the world.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak uint64
}

const heapMetric = "/memory/classes/heap/objects:bytes"

// sampleEvery is coarse so that the sampler takes no noticeable CPU from
// the informers on a 2-core machine.
const sampleEvery = 5 * time.Millisecond

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s := []metrics.Sample{{Name: heapMetric}}
	read := func() {
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			h.peak = max(h.peak, s[0].Value.Uint64())
		}
	}
	read()
	go func() {
		defer close(h.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				read()
			case <-h.stop:
				read()
				return
			}
		}
	}()
	return h
}

// Stop ends sampling and returns the peak.
func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak
}

// Metric is one measured quantity of one run.
type Metric struct {
	Name   string
	Unit   string
	Value  float64
	Better Better
}

// Better says which way a metric is better.
type Better uint8

const (
	Lower   Better = iota // times, bytes, allocations
	Higher                // throughput
	Neither               // counts that must match, or context
)

// Scenario is one measurement. Prepare builds its pre-built objects (once);
// Run runs one implementation through it and returns its metrics, always in
// the same order.
type Scenario interface {
	Name() string
	Prepare()
	Run(impl Impl) ([]Metric, error)
}

// guard is the timeout of one phase of a run.
func guard(events int) time.Duration {
	return time.Minute + time.Duration(events)*20*time.Microsecond
}

// once makes Prepare idempotent.
type once struct{ sync.Once }

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func diff(a, b uint64) float64 {
	if a < b {
		return -float64(b - a)
	}
	return float64(a - b)
}
