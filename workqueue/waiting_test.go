package workqueue

import (
	"context"
	"strconv"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

func wantOldest[T comparable](t *testing.T, w *Waiting[T], age time.Duration, n int) {
	t.Helper()
	if gotAge, gotN := w.Oldest(); gotAge != age || gotN != n {
		t.Errorf("Oldest() = %v, %d; want %v, %d", gotAge, gotN, age, n)
	}
}

// The age follows client-go's queue, on a fake clock: an item waits from
// the queue's push (its add, or the Done of the processing during which
// it was added again) to a worker's Get, and an add of a waiting item does
// not restart its wait. Over client-go's FIFO made by NewWaiting, and
// given to it (then it does not rely on the order).
func TestWaitingOldest(t *testing.T) {
	t.Run("own-fifo", func(t *testing.T) { testWaitingOldest(t, nil) })
	t.Run("given-store", func(t *testing.T) { testWaitingOldest(t, workqueue.DefaultQueue[string]()) })
}

func testWaitingOldest(t *testing.T, store workqueue.Queue[string]) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w := NewWaiting(store, clk)
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Clock: clk, Queue: w})
	defer q.ShutDown()
	get := func(want string) {
		t.Helper()
		if item, _ := q.Get(); item != want {
			t.Fatalf("Get() = %q, want %q", item, want)
		}
	}

	wantOldest(t, w, 0, 0)
	q.Add("a")
	clk.Step(time.Second)
	q.Add("b")
	clk.Step(2 * time.Second)
	wantOldest(t, w, 3*time.Second, 2)
	q.Add("a") // waiting already: its wait goes on
	clk.Step(time.Second)
	wantOldest(t, w, 4*time.Second, 2)

	get("a")
	wantOldest(t, w, 3*time.Second, 1) // b's
	q.Add("a")                         // while a worker has it: not waiting for a worker yet
	wantOldest(t, w, 3*time.Second, 1)
	clk.Step(5 * time.Second)
	q.Done("a") // a waits from now on
	wantOldest(t, w, 8*time.Second, 2)

	get("b")
	wantOldest(t, w, 0, 1) // a's, pushed at Done
	clk.Step(2 * time.Second)
	wantOldest(t, w, 2*time.Second, 1)
	q.Done("b")
	get("a")
	wantOldest(t, w, 0, 0)
	q.Done("a")
	if len(w.pushed) != 0 || len(w.live) != 0 {
		t.Errorf("empty store keeps %d entries, %d live", len(w.pushed), len(w.live))
	}
}

// lifo is a store that is not a FIFO: the last item pushed comes out first.
type lifo []string

func (s *lifo) Touch(string)     {}
func (s *lifo) Push(item string) { *s = append(*s, item) }
func (s *lifo) Len() int         { return len(*s) }
func (s *lifo) Pop() string {
	item := (*s)[len(*s)-1]
	*s = (*s)[:len(*s)-1]
	return item
}

// Over a store that hands items out in another order, the oldest is still
// the earliest pushed of those left, and the entries of the items popped
// past it do not pile up.
func TestWaitingOutOfOrder(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	w := NewWaiting[string](new(lifo), clk)
	w.Push("a")
	clk.Step(time.Second)
	w.Push("b")
	clk.Step(time.Second)
	w.Push("c")
	clk.Step(time.Second)
	if w.Pop() != "c" {
		t.Fatal("the store is not a LIFO")
	}
	wantOldest(t, w, 3*time.Second, 2)
	for i := range 10000 { // a stays at the bottom
		w.Push("x" + strconv.Itoa(i%7))
		w.Pop()
	}
	wantOldest(t, w, 3*time.Second, 2)
	if n := len(w.pushed) - w.head; n > 2*len(w.live)+16 {
		t.Errorf("%d entries kept for %d items waiting", n, len(w.live))
	}
	if w.Pop() != "b" {
		t.Fatal("want b")
	}
	wantOldest(t, w, 3*time.Second, 1)
	if w.Pop() != "a" {
		t.Fatal("want a")
	}
	wantOldest(t, w, 0, 0)
	if w.Len() != 0 {
		t.Errorf("Len() = %d", w.Len())
	}
}

// A long FIFO run reuses its slice: the entries kept are those waiting.
func TestWaitingFIFOCompacts(t *testing.T) {
	w := NewWaiting[int](nil, clocktesting.NewFakeClock(time.Unix(0, 0)))
	for i := range 100 {
		w.Push(i)
	}
	for i := range 100000 {
		if got := w.Pop(); got != i {
			t.Fatalf("Pop() = %d, want %d", got, i)
		}
		w.Push(i + 100)
	}
	if len(w.pushed) > 2*100+16 {
		t.Errorf("%d entries kept for %d items waiting", len(w.pushed), len(w.live))
	}
}

// oldestPoints returns the oldest age's data points by queue name.
func oldestPoints(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != MetricOldestAge {
				continue
			}
			if m.Unit != "s" {
				t.Errorf("%s in %q, want s", m.Name, m.Unit)
			}
			g, ok := m.Data.(metricdata.Gauge[float64])
			if !ok {
				t.Fatalf("%s is a %T, want a float64 gauge", m.Name, m.Data)
			}
			for _, p := range g.DataPoints {
				name, _ := p.Attributes.Value(AttrQueueName)
				out[name.AsString()] = p.Value
			}
		}
	}
	return out
}

// NewRateLimitingQueue exports the oldest waiting item's age, in seconds,
// with the queue's name, beside client-go's depth, and stops at ShutDown.
func TestOldestAgeMetric(t *testing.T) {
	skipWithoutTracing(t) // OpenTelemetry metrics are compiled out too
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q := newRateLimitingQueue("ctl", workqueue.DefaultTypedControllerRateLimiter[string](), nil, mp, clk)
	other := newRateLimitingQueue("other", workqueue.DefaultTypedControllerRateLimiter[string](), nil, mp, clk)
	defer other.ShutDown()

	if got := oldestPoints(t, r); got["ctl"] != 0 || len(got) != 2 {
		t.Errorf("empty queues: %v, want ctl and other at 0", got)
	}
	q.Add("a")
	clk.Step(1500 * time.Millisecond)
	q.Add("b")
	clk.Step(time.Second)
	got := oldestPoints(t, r)
	if got["ctl"] != 2.5 || got["other"] != 0 {
		t.Errorf("oldest ages %v, want ctl 2.5 s, other 0", got)
	}
	if d := collect(t, r, "ctl")[MetricDepth]; d != 2 {
		t.Errorf("depth %v, want 2", d)
	}
	item, _ := q.Get()
	if got := oldestPoints(t, r); item != "a" || got["ctl"] != 1 {
		t.Errorf("after Get of %q: %v, want ctl 1 s (b's)", item, got)
	}
	q.Done(item)
	q.ShutDown()
	if got := oldestPoints(t, r); len(got) != 1 {
		t.Errorf("after ShutDown: %v, want other only", got)
	}
}

// Without a meter provider the queue is client-go's own, with no store of
// ours and nothing observed.
func TestOldestAgeWithoutMeterProvider(t *testing.T) {
	q := NewRateLimitingQueue("ctl", workqueue.DefaultTypedControllerRateLimiter[string](), nil, nil)
	defer q.ShutDown()
	if q.stopMetrics != nil {
		t.Error("an age is observed without a meter provider")
	}
	q.Add("a")
	if item, _ := q.Get(); item != "a" {
		t.Errorf("Get() = %q", item)
	}
	q.Done("a")
}

// Oldest may be read while workers use the queue (for the race detector).
func TestWaitingOldestConcurrent(t *testing.T) {
	w := NewWaiting[int](nil, nil)
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[int]{Queue: w})
	defer q.ShutDown()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			q.Add(i % 10)
			item, _ := q.Get()
			q.Done(item)
		}
	}()
	for range 2000 {
		if age, n := w.Oldest(); age < 0 || n < 0 || n > 10 {
			t.Fatalf("Oldest() = %v, %d", age, n)
		}
	}
	<-done
	if age, n := w.Oldest(); age != 0 || n != 0 {
		t.Errorf("drained: Oldest() = %v, %d", age, n)
	}
}
