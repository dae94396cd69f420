package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// tracingStreamSize is the synthetic stream of the tracing cost benchmark:
// keys pods listed first, then updates Modified events round-robin over them.
type tracingStreamSize struct{ keys, updates int }

// tracingSize is small by default so that the benchmark smoke run
// (-benchtime 1x) stays quick; ACTORINFORMER_BENCH_FULL=1 selects the size
// the cost table is measured at.
func tracingSize() tracingStreamSize {
	if os.Getenv("ACTORINFORMER_BENCH_FULL") != "" {
		return tracingStreamSize{keys: 10_000, updates: 200_000}
	}
	return tracingStreamSize{keys: 1_000, updates: 20_000}
}

// tracingStream is the prebuilt list and watch events, shared read-only by
// every run: the informer never modifies the objects it is given.
type tracingStream struct {
	list   *corev1.PodList
	events []watch.Event
}

var (
	tracingStreamsMu sync.Mutex
	tracingStreams   = map[tracingStreamSize]*tracingStream{}
)

func tracingStreamFor(sz tracingStreamSize) *tracingStream {
	tracingStreamsMu.Lock()
	defer tracingStreamsMu.Unlock()
	if s, ok := tracingStreams[sz]; ok {
		return s
	}
	s := &tracingStream{list: &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}}
	s.list.Items = make([]corev1.Pod, sz.keys)
	for i := range s.list.Items {
		s.list.Items[i] = tracingPod(i, 1)
	}
	s.events = make([]watch.Event, sz.updates)
	for i := range s.events {
		p := tracingPod(i%sz.keys, 2+i)
		s.events[i] = watch.Event{Type: watch.Modified, Object: &p}
	}
	tracingStreams[sz] = s
	return s
}

func tracingPod(i, rv int) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace:       fmt.Sprintf("ns-%d", i%10),
		Name:            fmt.Sprintf("pod-%d", i),
		UID:             types.UID(fmt.Sprintf("uid-%d", i)),
		ResourceVersion: strconv.Itoa(rv),
		Labels:          map[string]string{"app": "bench"},
	}}
}

// tracingLW is a cache.ListerWatcher over a tracingStream: List returns the
// pods, the first Watch emits the events once release is closed, as fast as
// the reflector reads them, then stays open. Later watches stay silent.
type tracingLW struct {
	s       *tracingStream
	release chan struct{}
	mu      sync.Mutex
	watched bool
}

func newTracingLW(s *tracingStream) *tracingLW {
	return &tracingLW{s: s, release: make(chan struct{})}
}

// IsWatchListSemanticsUnSupported: the source can only list.
func (*tracingLW) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *tracingLW) List(metav1.ListOptions) (runtime.Object, error) { return lw.s.list, nil }

func (lw *tracingLW) Watch(metav1.ListOptions) (watch.Interface, error) {
	lw.mu.Lock()
	first := !lw.watched
	lw.watched = true
	lw.mu.Unlock()
	w := &tracingWatch{ch: make(chan watch.Event, 1024), done: make(chan struct{})}
	if first {
		go w.feed(lw.release, lw.s.events)
	}
	return w, nil
}

type tracingWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *tracingWatch) feed(release <-chan struct{}, events []watch.Event) {
	select {
	case <-release:
	case <-w.done:
		return
	}
	for _, ev := range events {
		select {
		case w.ch <- ev:
		case <-w.done:
			return
		}
	}
}

func (w *tracingWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }
func (w *tracingWatch) ResultChan() <-chan watch.Event { return w.ch }

var _ context.Context // keep imports stable when editing
