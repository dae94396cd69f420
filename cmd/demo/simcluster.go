package main

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"

	"github.com/actorinformer/actorinformer/shard/shardtest"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// historySize is how many past watch events the simulated API server keeps
// for watches that resume from a resource version; older ones get 410 Gone.
const historySize = 10000

// simCluster is a simulated API server for pods: client-go's fake clientset
// stores the objects, and simCluster adds what the fake lacks for an
// informer under load. Every write gets a fresh, increasing resourceVersion
// (the fake's tracker never sets one, and an update with an unchanged one
// looks like a resync to informers); lists report the resourceVersion of the
// last write; and watches are served from an unbounded per-watcher queue
// with a history for resuming, instead of the fake's 100-slot channels,
// which panic when full.
//
// All methods may be called by multiple goroutines simultaneously.
type simCluster struct {
	client *fake.Clientset

	// mu orders writes, lists and watch starts, so that a list's
	// resourceVersion and the events a watch replays agree. Lock order:
	// the fake's own lock (held while reactors run), then mu, then the
	// tracker's lock.
	mu       sync.Mutex
	keep     int // events kept in history: historySize, less in tests
	rv       int64
	history  []simEvent // oldest first; rv increasing
	expired  int64      // rv of the newest event dropped from history
	watchers map[*simWatcher]struct{}
	closed   bool
	// gone makes watches that resume from a resource version fail with
	// 410 Gone until the next list (the "gone" fault, faults.go).
	gone bool
	wg   sync.WaitGroup // watcher pumps
	// objects counts the pods stored.
	objects atomic.Int64
}

type simEvent struct {
	rv int64
	ev watch.Event
}

func newSimCluster() *simCluster {
	// NewSimpleClientset, not NewClientset: the field-managed tracker of the
	// latter builds a REST mapper on every write (9 ms per create+update
	// measured here, against 13 µs).
	c := &simCluster{
		client:   fake.NewSimpleClientset(), //nolint:staticcheck // see above
		keep:     historySize,
		rv:       1, // like the tracker: 1 is an empty cluster
		watchers: map[*simWatcher]struct{}{},
	}
	shardtest.InstallLeases(c.client) // the members' leases, as the API server keeps them
	c.client.PrependReactor("list", "pods", c.list)
	c.client.PrependWatchReactor("pods", c.watch)
	return c
}

// Client is the clientset informers list and watch through.
func (c *simCluster) Client() kubernetes.Interface { return c.client }

// create stores pod with the next resourceVersion and sends Added to the
// watchers. pod must not be modified afterwards: watchers share it.
func (c *simCluster) create(pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	rv := c.rv + 1
	pod.ResourceVersion = strconv.FormatInt(rv, 10)
	if err := c.client.Tracker().Create(podsGVR, pod, pod.Namespace); err != nil {
		return err
	}
	c.objects.Add(1)
	c.publish(rv, watch.Added, pod)
	return nil
}

// update stores pod, a modified copy of a stored pod, with the next
// resourceVersion and sends Modified. pod must not be modified afterwards.
func (c *simCluster) update(pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	rv := c.rv + 1
	pod.ResourceVersion = strconv.FormatInt(rv, 10)
	if err := c.client.Tracker().Update(podsGVR, pod, pod.Namespace); err != nil {
		return err
	}
	c.publish(rv, watch.Modified, pod)
	return nil
}

// delete removes the pod and sends Deleted with its last state stamped with
// the deletion's resourceVersion, as the API server does.
func (c *simCluster) delete(last *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleteLocked(last)
}

// deleteLocked is delete with c.mu held.
func (c *simCluster) deleteLocked(last *corev1.Pod) error {
	if err := c.client.Tracker().Delete(podsGVR, last.Namespace, last.Name); err != nil {
		return err
	}
	c.objects.Add(-1)
	rv := c.rv + 1
	gone := last.DeepCopy()
	gone.ResourceVersion = strconv.FormatInt(rv, 10)
	c.publish(rv, watch.Deleted, gone)
	return nil
}

// publish records an event and queues it for the watchers. c.mu is held.
func (c *simCluster) publish(rv int64, t watch.EventType, pod *corev1.Pod) {
	c.rv = rv
	ev := watch.Event{Type: t, Object: pod}
	c.history = append(c.history, simEvent{rv, ev})
	if len(c.history) >= 2*c.keep {
		drop := len(c.history) - c.keep
		c.expired = c.history[drop-1].rv
		c.history = append(c.history[:0], c.history[drop:]...)
		clear(c.history[c.keep:cap(c.history)])
	}
	for w := range c.watchers {
		if w.stopped() {
			delete(c.watchers, w)
			continue
		}
		if w.ns == "" || w.ns == pod.Namespace {
			w.push(ev)
		}
	}
}

// count is the number of pods stored.
func (c *simCluster) count() int64 { return c.objects.Load() }

// get returns the stored pod ns/name, or false.
func (c *simCluster) get(ns, name string) (*corev1.Pod, bool) {
	obj, err := c.client.Tracker().Get(podsGVR, ns, name)
	if err != nil {
		return nil, false
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

// backlog is the largest number of events a watcher has not yet taken.
func (c *simCluster) backlog() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var most int64
	for w := range c.watchers {
		most = max(most, w.pending.Load())
	}
	return most
}

// list serves pod lists from the tracker, with the current resourceVersion.
// Limit and continue are ignored: everything comes in one page.
func (c *simCluster) list(action ktesting.Action) (bool, runtime.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, err := c.client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), action.GetNamespace())
	if err != nil {
		return true, nil, err
	}
	list := obj.(*corev1.PodList)
	c.gone = false
	list.ResourceVersion = strconv.FormatInt(c.rv, 10)
	return true, list, nil
}

// watch starts a watch. resourceVersion "" or "0", or sendInitialEvents,
// start with the current pods as Added events (the latter ending with the
// initial-events-end bookmark); resourceVersion N replays the events after N
// from the history, or fails with 410 Gone if they are no longer there.
// Label and field selectors are ignored.
func (c *simCluster) watch(action ktesting.Action) (bool, watch.Interface, error) {
	var opts metav1.ListOptions
	if wa, ok := action.(ktesting.WatchActionImpl); ok {
		opts = wa.ListOptions
	}
	ns := action.GetNamespace()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return true, nil, errors.New("simulated cluster is shut down")
	}
	var initial []watch.Event
	watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	switch rv := opts.ResourceVersion; {
	case watchList || rv == "" || rv == "0":
		c.gone = false
		obj, err := c.client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), ns)
		if err != nil {
			return true, nil, err
		}
		items := obj.(*corev1.PodList).Items
		initial = make([]watch.Event, 0, len(items)+1)
		for i := range items {
			initial = append(initial, watch.Event{Type: watch.Added, Object: &items[i]})
		}
		if watchList {
			initial = append(initial, watch.Event{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				ResourceVersion: strconv.FormatInt(c.rv, 10),
				Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
			}}})
		}
	default:
		from, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", rv))
		}
		if c.gone {
			return true, nil, goneError(rv)
		}
		if from < c.expired {
			return true, nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, c.expired+1))
		}
		i := sort.Search(len(c.history), func(i int) bool { return c.history[i].rv > from })
		for _, e := range c.history[i:] {
			if ns == "" || ns == e.ev.Object.(*corev1.Pod).Namespace {
				initial = append(initial, e.ev)
			}
		}
	}
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	w := newSimWatcher(ns, timeout)
	w.push(initial...)
	c.watchers[w] = struct{}{}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		w.pump()
	}()
	return true, w, nil
}

// Close stops every watch and waits for their goroutines; later watches
// fail.
func (c *simCluster) Close() {
	c.mu.Lock()
	c.closed = true
	for w := range c.watchers {
		w.Stop()
	}
	clear(c.watchers)
	c.mu.Unlock()
	c.wg.Wait()
}

// simWatcher is one watch: the cluster pushes events into an unbounded
// queue without ever blocking, and a goroutine (pump) hands them to the
// consumer. Like the API server's, it ends after its timeout, if any. Stop
// may be called any number of times, from any goroutine.
type simWatcher struct {
	ns      string
	timeout time.Duration
	result  chan watch.Event
	done    chan struct{}
	wake    chan struct{}
	stop    sync.Once
	pending atomic.Int64 // events pushed and not yet taken

	mu    sync.Mutex
	queue []watch.Event
}

func newSimWatcher(ns string, timeout time.Duration) *simWatcher {
	return &simWatcher{
		ns:      ns,
		timeout: timeout,
		result:  make(chan watch.Event, 64),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
}

func (w *simWatcher) Stop() { w.stop.Do(func() { close(w.done) }) }

func (w *simWatcher) ResultChan() <-chan watch.Event { return w.result }

func (w *simWatcher) stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

func (w *simWatcher) push(evs ...watch.Event) {
	if len(evs) == 0 {
		return
	}
	w.mu.Lock()
	w.queue = append(w.queue, evs...)
	w.mu.Unlock()
	w.pending.Add(int64(len(evs)))
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pump moves queued events to the result channel until Stop or the
// timeout, then closes it, as watch.Interface requires.
func (w *simWatcher) pump() {
	defer close(w.result)
	defer w.Stop()
	var expired <-chan time.Time
	if w.timeout > 0 {
		t := time.NewTimer(w.timeout)
		defer t.Stop()
		expired = t.C
	}
	var batch []watch.Event
	for {
		w.mu.Lock()
		batch, w.queue = w.queue, batch[:0]
		w.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-w.wake:
				continue
			case <-w.done:
				return
			case <-expired:
				return
			}
		}
		for i := range batch {
			select {
			case w.result <- batch[i]:
				w.pending.Add(-1)
				batch[i] = watch.Event{}
			case <-w.done:
				return
			case <-expired:
				return
			}
		}
	}
}

var _ watch.Interface = (*simWatcher)(nil)
