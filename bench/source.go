package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Namespaces is how many namespaces the synthetic pods are spread over.
const Namespaces = 10

var _ cache.ListerWatcherWithContext = (*Source)(nil)

// Source is a synthetic ListerWatcher over pre-built objects. Its n-th List
// call returns Lists[n] (the last one for later calls); its n-th Watch call
// streams Watches[n] (nothing for later calls, the watch then stays open and
// silent). Objects are shared, never copied: informers must treat them as
// read-only, as they treat what a real client decodes.
//
// The first watch can be held back by a gate (see Gate) and paced, and it
// can record when each of its events was handed over (see Record), so that
// handlers can compute delivery latencies. Event i of that watch must carry
// i in its object's Generation for that.
//
// Source is safe for concurrent use. Configure it (Gate, Pace, Record)
// before the informer starts.
type Source struct {
	Lists   []*corev1.PodList
	Watches [][]watch.Event
	// ChanSize is the capacity of the watches' result channels. 0, the
	// default, is an unbuffered channel, as client-go's StreamWatcher uses.
	ChanSize int

	gate     chan struct{}
	interval time.Duration
	sent     []int64
	base     time.Time

	feeds    sync.WaitGroup
	mu       sync.Mutex
	listAt   []time.Time
	watchAt  []time.Time
	watchers []*watcher
	released time.Time
}

// IsWatchListSemanticsUnSupported tells both informers that this source
// cannot stream lists (WatchList): they list, then watch.
func (*Source) IsWatchListSemanticsUnSupported() bool { return true }

// Gate holds the events of the first watch back until Release.
func (s *Source) Gate() { s.gate = make(chan struct{}) }

// Release lets the first watch's events flow and returns the time it did.
func (s *Source) Release() time.Time {
	s.mu.Lock()
	s.released = time.Now()
	t := s.released
	s.mu.Unlock()
	close(s.gate)
	return t
}

// Pace spaces the first watch's events: event i is handed over no earlier
// than interval×i after Release (or after the watch opened, ungated). Late
// events go out back to back.
func (s *Source) Pace(interval time.Duration) { s.interval = interval }

// Record makes the first watch store in sent[i], just before it hands event
// i over, the time elapsed since base. len(sent) must be the number of
// events.
func (s *Source) Record(sent []int64, base time.Time) { s.sent, s.base = sent, base }

// ListCalls returns when each List call started.
func (s *Source) ListCalls() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.listAt...)
}

// WatchCalls returns when each Watch call started.
func (s *Source) WatchCalls() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.watchAt...)
}

// Open returns how many watches are still running (not stopped).
func (s *Source) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.watchers {
		select {
		case <-w.done:
		default:
			n++
		}
	}
	return n
}

// Wait waits until every watch opened so far has ended (been stopped, or
// its context done).
func (s *Source) Wait() { s.feeds.Wait() }

// List implements cache.Lister.
func (s *Source) List(opts metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), opts)
}

// Watch implements cache.Watcher.
func (s *Source) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), opts)
}

// ListWithContext returns the next pre-built list, whatever the options
// (both informers list with the same ones).
func (s *Source) ListWithContext(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	now := time.Now()
	s.mu.Lock()
	n := len(s.listAt)
	s.listAt = append(s.listAt, now)
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(s.Lists) == 0 {
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
	}
	return s.Lists[min(n, len(s.Lists)-1)], nil
}

// WatchWithContext opens the next pre-built watch. The watch ends when it
// is stopped or ctx is done.
func (s *Source) WatchWithContext(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
	now := time.Now()
	s.mu.Lock()
	n := len(s.watchAt)
	s.watchAt = append(s.watchAt, now)
	w := &watcher{
		ch:   make(chan watch.Event, s.ChanSize),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	s.watchers = append(s.watchers, w)
	s.mu.Unlock()
	var events []watch.Event
	if n < len(s.Watches) {
		events = s.Watches[n]
	}
	f := feed{w: w, ctx: ctx, events: events}
	if n == 0 {
		f.gate, f.interval, f.sent, f.base = s.gate, s.interval, s.sent, s.base
	}
	s.feeds.Add(1)
	go func() {
		defer s.feeds.Done()
		f.run()
	}()
	return w, nil
}

// watcher is the watch.Interface a Source returns.
type watcher struct {
	ch   chan watch.Event
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

func (w *watcher) Stop()                          { w.once.Do(func() { close(w.stop) }) }
func (w *watcher) ResultChan() <-chan watch.Event { return w.ch }

// feed is one watch's sending goroutine.
type feed struct {
	w        *watcher
	ctx      context.Context
	events   []watch.Event
	gate     chan struct{}
	interval time.Duration
	sent     []int64
	base     time.Time
}

func (f *feed) run() {
	w := f.w
	defer close(w.done)
	// Closing the result channel when the watch ends is what a real watch
	// does; readers have stopped reading by then.
	defer close(w.ch)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-w.stop:
			return
		case <-f.ctx.Done():
			return
		}
	}
	start := time.Now()
	var timer *time.Timer
	for i := range f.events {
		if f.interval > 0 {
			if d := time.Until(start.Add(time.Duration(i) * f.interval)); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
					defer timer.Stop()
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-w.stop:
					return
				case <-f.ctx.Done():
					return
				}
			}
		}
		if f.sent != nil {
			f.sent[i] = int64(time.Since(f.base))
		}
		select {
		case w.ch <- f.events[i]:
		case <-w.stop:
			return
		case <-f.ctx.Done():
			return
		}
	}
	select {
	case <-w.stop:
	case <-f.ctx.Done():
	}
}

// Pods builds the synthetic objects: pod i of a key space is named
// pod-<i> in namespace ns-<i%Namespaces>, with a UID of its own and one
// shared label set.
type Pods struct {
	names, namespaces, uids []string
	labels                  map[string]string
}

// NewPods prepares the names of keys pods.
func NewPods(keys int) *Pods {
	p := &Pods{
		names:      make([]string, keys),
		namespaces: make([]string, keys),
		uids:       make([]string, keys),
		labels:     map[string]string{"app": "bench", "tier": "synthetic"},
	}
	ns := make([]string, Namespaces)
	for i := range ns {
		ns[i] = "ns-" + strconv.Itoa(i)
	}
	for i := range keys {
		p.names[i] = fmt.Sprintf("pod-%07d", i)
		p.namespaces[i] = ns[i%Namespaces]
		p.uids[i] = fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
	}
	return p
}

// Keys is the number of distinct keys.
func (p *Pods) Keys() int { return len(p.names) }

// Key returns pod i's cache key.
func (p *Pods) Key(i int) string { return p.namespaces[i] + "/" + p.names[i] }

// Set fills *pod as the version rv of pod i, with Generation gen.
func (p *Pods) Set(pod *corev1.Pod, i int, rv uint64, gen int64) {
	*pod = corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       p.namespaces[i],
			Name:            p.names[i],
			UID:             types.UID(p.uids[i]),
			ResourceVersion: strconv.FormatUint(rv, 10),
			Generation:      gen,
			Labels:          p.labels,
		},
		Spec: corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
		},
	}
}

// List returns a list of pods 0..n-1 at resource versions 1..n; the list's
// resource version is n.
func (p *Pods) List(n int) *corev1.PodList {
	l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(n)}, Items: make([]corev1.Pod, n)}
	for i := range l.Items {
		p.Set(&l.Items[i], i, uint64(i+1), 0)
	}
	return l
}

// Modified returns m Modified events cycling over the keys, each with an
// object of its own: event j updates pod j%Keys to resource version
// fromRV+1+j and carries j in Generation.
func (p *Pods) Modified(m int, fromRV uint64) []watch.Event {
	objs := make([]corev1.Pod, m)
	evs := make([]watch.Event, m)
	for j := range evs {
		p.Set(&objs[j], j%p.Keys(), fromRV+1+uint64(j), int64(j))
		evs[j] = watch.Event{Type: watch.Modified, Object: &objs[j]}
	}
	return evs
}

// ExpiredEvent is the watch error that makes both informers relist: the
// resource version they watch from is too old (410 Gone, Expired).
func ExpiredEvent() watch.Event {
	return watch.Event{Type: watch.Error, Object: &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    410,
		Reason:  metav1.StatusReasonExpired,
		Message: "too old resource version",
	}}
}
