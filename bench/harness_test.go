package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// drain reads a watch until its channel closes.
func drain(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	var out []watch.Event
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatal("watch channel not closed")
		}
	}
}

func receive(t *testing.T, w watch.Interface, n int) []watch.Event {
	t.Helper()
	out := make([]watch.Event, 0, n)
	timeout := time.After(time.Minute)
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %d events, want %d", len(out), n)
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("got %d events, want %d", len(out), n)
		}
	}
	return out
}

func TestPodsData(t *testing.T) {
	p := NewPods(25)
	l := p.List(25)
	if l.ResourceVersion != "25" || len(l.Items) != 25 {
		t.Fatalf("list rv %q, %d items; want 25, 25", l.ResourceVersion, len(l.Items))
	}
	keys := map[string]bool{}
	for i := range l.Items {
		k, _ := cache.MetaNamespaceKeyFunc(&l.Items[i])
		if k != p.Key(i) || keys[k] {
			t.Fatalf("item %d: key %q (want %q), duplicate %v", i, k, p.Key(i), keys[k])
		}
		keys[k] = true
		if rv := l.Items[i].ResourceVersion; rv != fmt.Sprint(i+1) {
			t.Fatalf("item %d: rv %s, want %d", i, rv, i+1)
		}
	}
	if len(keys) != 25 {
		t.Fatalf("%d keys", len(keys))
	}

	evs := p.Modified(60, 25)
	seen := map[*corev1.Pod]bool{}
	for j, ev := range evs {
		pod := ev.Object.(*corev1.Pod)
		if ev.Type != watch.Modified || seen[pod] {
			t.Fatalf("event %d: type %s, object reused %v", j, ev.Type, seen[pod])
		}
		seen[pod] = true
		if k, _ := cache.MetaNamespaceKeyFunc(pod); k != p.Key(j%25) {
			t.Fatalf("event %d: key %s, want %s", j, k, p.Key(j%25))
		}
		if pod.ResourceVersion != fmt.Sprint(26+j) || pod.Generation != int64(j) {
			t.Fatalf("event %d: rv %s generation %d; want %d, %d", j, pod.ResourceVersion, pod.Generation, 26+j, j)
		}
	}

	if err := apierrors.FromObject(ExpiredEvent().Object); !apierrors.IsResourceExpired(err) {
		t.Fatalf("ExpiredEvent is not an Expired error: %v", err)
	}
}

func TestSourceListsAndWatches(t *testing.T) {
	p := NewPods(3)
	first, second := p.List(3), p.List(2)
	evs := p.Modified(5, 3)
	src := &Source{Lists: []*corev1.PodList{first, second}, Watches: [][]watch.Event{evs}}
	src.Gate()
	src.Pace(time.Millisecond)
	base := time.Now()
	sent := make([]int64, len(evs))
	src.Record(sent, base)

	for i, want := range []*corev1.PodList{first, second, second} {
		got, err := src.List(metav1.ListOptions{})
		if err != nil || got != want {
			t.Fatalf("list %d: %p, %v; want %p", i, got, err, want)
		}
	}
	if n := len(src.ListCalls()); n != 3 {
		t.Fatalf("%d list calls recorded, want 3", n)
	}

	w, err := src.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	released := src.Release()
	got := receive(t, w, len(evs))
	for i := range evs {
		if got[i].Object != evs[i].Object {
			t.Fatalf("event %d out of order", i)
		}
		// Paced: never before its time (a lower bound, so noise cannot
		// break it).
		if min := int64(released.Sub(base)) + int64(i)*int64(time.Millisecond); sent[i] < min {
			t.Fatalf("event %d handed over at %v, before %v", i, time.Duration(sent[i]), time.Duration(min))
		}
	}
	if src.Open() != 1 {
		t.Fatalf("open watches: %d, want 1 (a drained watch stays open)", src.Open())
	}
	w.Stop()
	w.Stop() // twice is fine
	if rest := drain(t, w); len(rest) != 0 {
		t.Fatalf("%d events after the last one", len(rest))
	}

	// Later watches are silent until stopped, or until their context ends.
	w2, _ := src.Watch(metav1.ListOptions{})
	w2.Stop()
	if rest := drain(t, w2); len(rest) != 0 {
		t.Fatalf("second watch sent %d events", len(rest))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w3, _ := src.WatchWithContext(ctx, metav1.ListOptions{})
	cancel()
	drain(t, w3)
	w3.Stop()
	src.Wait()
	if src.Open() != 0 {
		t.Fatalf("%d watches still open", src.Open())
	}
	if n := len(src.WatchCalls()); n != 3 {
		t.Fatalf("%d watch calls recorded, want 3", n)
	}
}

func TestSourceGateHoldsEventsBack(t *testing.T) {
	evs := NewPods(1).Modified(1, 1)
	src := &Source{Watches: [][]watch.Event{evs}}
	src.Gate()
	w, _ := src.Watch(metav1.ListOptions{})
	defer w.Stop()
	// Stopping a watch still waiting at the gate closes it without events.
	w.Stop()
	if got := drain(t, w); len(got) != 0 {
		t.Fatalf("gated watch sent %d events before Release", len(got))
	}
	// An empty source lists nothing.
	l, err := src.List(metav1.ListOptions{})
	if err != nil || len(l.(*corev1.PodList).Items) != 0 {
		t.Fatalf("empty source listed %v, %v", l, err)
	}
}

func TestCounterPhases(t *testing.T) {
	c := &Counter{}
	done := c.Expect(Counts{Adds: 2, Updates: 1, Deletes: 1})
	pod := &corev1.Pod{}
	c.OnAdd(pod, true)
	c.OnAdd(pod, false)
	c.OnUpdate(pod, pod)
	select {
	case <-done:
		t.Fatal("phase done before its deletes")
	default:
	}
	c.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: pod})
	<-done // closed by the call that reached the counts
	c.OnDelete(pod)
	want := Counts{Adds: 2, InitialAdds: 1, Updates: 1, Deletes: 2, Tombstones: 1}
	if got := c.Counts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	// A phase already reached is done at once.
	<-c.Expect(Counts{Adds: 1})

	// Latency: the event with Generation i is timed against sent[i].
	base := time.Now().Add(-time.Second)
	sent := []int64{0, int64(500 * time.Millisecond)}
	lat := make([]int64, 2)
	c.Latency(lat, sent, base)
	c.OnUpdate(pod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 1}})
	if lat[0] != 0 || lat[1] < int64(500*time.Millisecond) {
		t.Fatalf("latencies %v: want [0, ≥500ms]", lat)
	}
	// Out-of-range generations are ignored.
	c.OnUpdate(pod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 7}})

	// Hurry cancels the delay (an hour here: the test would hang).
	c.SetDelay(time.Hour)
	c.Hurry()
	c.OnAdd(pod, false)
}

// TestInformersGetTheSameStream runs the watch flow of the Watch scenario
// by hand with both informers and checks every handler saw exactly the
// stream, and that both caches end with the last version of every pod.
func TestInformersGetTheSameStream(t *testing.T) {
	const keys, events, handlers = 50, 400, 2
	p := NewPods(keys)
	list := p.List(keys)
	evs := p.Modified(events, keys)
	for _, impl := range append(slices.Clone(Impls), Floor) {
		t.Run(string(impl), func(t *testing.T) {
			src := &Source{Lists: []*corev1.PodList{list}, Watches: [][]watch.Event{evs}}
			src.Gate()
			inf := NewInformer(impl, src)
			cs, err := addCounters(inf, handlers)
			if err != nil {
				t.Fatal(err)
			}
			r := start(inf, src)
			defer r.Stop()
			if err := waitAll(time.Minute, expectAll(cs, Counts{Adds: keys})...); err != nil {
				t.Fatal(err)
			}
			if !inf.HasSynced() {
				// Handlers have every add once the informer has synced;
				// the reverse is not promised, so wait for it.
				if !cache.WaitForCacheSync(timeoutCh(t, time.Minute), inf.HasSynced) {
					t.Fatal("not synced")
				}
			}
			done := expectAll(cs, Counts{Adds: keys, Updates: events})
			src.Release()
			if err := waitAll(time.Minute, done...); err != nil {
				t.Fatal(err)
			}
			for i, c := range cs {
				want := Counts{Adds: keys, InitialAdds: keys, Updates: events}
				if got := c.Counts(); got != want {
					t.Errorf("handler %d: %+v, want %+v", i, got, want)
				}
			}
			store := inf.GetStore()
			if n := len(store.ListKeys()); n != keys {
				t.Fatalf("cache holds %d keys, want %d", n, keys)
			}
			for i := range keys {
				obj, ok, _ := store.GetByKey(p.Key(i))
				last := evs[events-keys+i].Object
				if !ok || obj != last {
					t.Fatalf("%s: cached %v, want the last event's object", p.Key(i), obj)
				}
			}
		})
	}
}

func timeoutCh(t *testing.T, d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	tm := time.AfterFunc(d, func() { close(ch) })
	t.Cleanup(func() { tm.Stop() })
	return ch
}

// TestScenarios runs every scenario once per implementation at tiny sizes
// and checks what the metrics must say whatever the machine's speed.
func TestScenarios(t *testing.T) {
	relist := &Relist{Objects: 200, Handlers: 2}
	scenarios := []Scenario{
		&InitialSync{Objects: 300, Handlers: 2},
		&Watch{Keys: 50, Events: 500, Handlers: 2},
		&SlowHandler{Keys: 20, Events: 40, Rate: 20_000, Handlers: 3, Delay: 100 * time.Microsecond},
		&SlowHandler{Keys: 20, Events: 40, Rate: 20_000, Handlers: 2},
		relist,
	}
	for _, sc := range scenarios {
		t.Run(strings.Fields(sc.Name())[0], func(t *testing.T) {
			tb, err := Compare(sc, 1, Impls, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tb.Rows {
				for _, impl := range Impls {
					if len(r.Stats[impl].Values) != 1 {
						t.Fatalf("%s: %s has %d values, want 1", r.Name, impl, len(r.Stats[impl].Values))
					}
				}
			}
			val := func(name string, impl Impl) float64 {
				r := tb.Row(name)
				if r == nil {
					t.Fatalf("no metric %q", name)
				}
				return r.Stats[impl].Median
			}
			for _, impl := range Impls {
				switch sc := sc.(type) {
				case *InitialSync:
					if val("sync time", impl) <= 0 || val("allocated", impl) <= 0 {
						t.Errorf("%s: sync time or allocation not measured", impl)
					}
				case *Watch:
					if val("throughput", impl) <= 0 {
						t.Errorf("%s: no throughput", impl)
					}
				case *SlowHandler:
					p50, p99, pmax := val("fast handlers' latency p50", impl), val("fast handlers' latency p99", impl), val("fast handlers' latency max", impl)
					if p50 <= 0 || p50 > p99 || p99 > pmax {
						t.Errorf("%s: latencies p50 %v, p99 %v, max %v", impl, p50, p99, pmax)
					}
					if sc.Delay > 0 {
						if b := val("slow handler's backlog", impl); b < 0 || b > float64(sc.Events) {
							t.Errorf("%s: backlog %v", impl, b)
						}
					} else if tb.Row("slow handler's backlog") != nil {
						t.Error("control run reports a backlog")
					}
				case *Relist:
					if got := val("tombstones per handler", impl); got != float64(sc.deleted) {
						t.Errorf("%s: %v tombstones per handler, want %d", impl, got, sc.deleted)
					}
					if got := val("updates per handler", impl); got != float64(len(sc.second.Items)) {
						t.Errorf("%s: %v updates per handler, want %d", impl, got, len(sc.second.Items))
					}
				}
			}
		})
	}
	if relist.deleted != 20 || relist.changed != 20 {
		t.Fatalf("relist data: %d deleted, %d changed; want 20, 20", relist.deleted, relist.changed)
	}
}

// fakeScenario returns metrics from a script, recording the run order.
type fakeScenario struct {
	order []Impl
	vals  map[Impl][]float64
}

func (f *fakeScenario) Name() string { return "fake" }
func (f *fakeScenario) Prepare()     {}
func (f *fakeScenario) Run(impl Impl) ([]Metric, error) {
	f.order = append(f.order, impl)
	n := 0
	for _, i := range f.order {
		if i == impl {
			n++
		}
	}
	v := f.vals[impl][n-1]
	return []Metric{
		{Name: "time", Unit: "ms", Value: v},
		{Name: "rate", Unit: "1/s", Value: 1000 / v, Better: Higher},
		{Name: "count", Unit: "n", Value: 7, Better: Neither},
	}, nil
}

func TestCompare(t *testing.T) {
	f := &fakeScenario{vals: map[Impl][]float64{
		Actors:   {10, 30, 20, 40},
		ClientGo: {50, 40, 60, 80},
	}}
	tb, err := Compare(f, 4, Impls, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Each implementation starts every other run.
	wantOrder := []Impl{Actors, ClientGo, ClientGo, Actors, Actors, ClientGo, ClientGo, Actors}
	if !slices.Equal(f.order, wantOrder) {
		t.Fatalf("run order %v, want alternation %v", f.order, wantOrder)
	}
	r := tb.Row("time")
	a, c := r.Stats[Actors], r.Stats[ClientGo]
	if a.Median != 25 || a.Min != 10 || a.Max != 40 || c.Median != 55 {
		t.Fatalf("stats: actors %+v, client-go %+v", a, c)
	}
	if ratio, ok := r.Ratio(); !ok || ratio != 25.0/55 {
		t.Fatalf("ratio %v %v", ratio, ok)
	}
	md := tb.Markdown()
	for _, want := range []string{
		"**fake** — medians of 4 alternated runs each",
		"| time (ms) | 25.0 [10.0–40.0] | 55.0 [40.0–80.0] | 0.45× | lower |",
		"| higher |",
		"| count (n) | 7.00 [7.00–7.00] | 7.00 [7.00–7.00] | — | — |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	// One implementation alone: no ratio column.
	f = &fakeScenario{vals: map[Impl][]float64{ClientGo: {3}}}
	tb, err = Compare(f, 1, []Impl{ClientGo}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Rows[0].Ratio(); ok || strings.Contains(tb.Markdown(), "ours ÷ client-go") {
		t.Fatal("a single implementation has no ratio")
	}
	// Beside the floor: both ratios.
	f = &fakeScenario{vals: map[Impl][]float64{Actors: {20}, ClientGo: {40}, Floor: {16}}}
	tb, err = Compare(f, 1, []Impl{Actors, ClientGo, Floor}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if md := tb.Markdown(); !strings.Contains(md, "| ours ÷ client-go | ours ÷ floor | better |") || !strings.Contains(md, "| 0.50× | 1.25× | lower |") {
		t.Fatalf("markdown beside the floor:\n%s", md)
	}
	if _, err := ParseImpl("informer"); err == nil {
		t.Fatal("ParseImpl accepted an unknown name")
	}
}

// TestCoalesceScenario runs the coalesce scenario once per implementation
// it compares at a tiny size and checks what must hold whatever the
// machine's speed (how much a coalesced listener holds at the end of the
// stream depends on timing; actors.TestCoalescedHeldHandler checks the
// bound).
func TestCoalesceScenario(t *testing.T) {
	sc := &Coalesce{Keys: 20, Events: 500, Delay: 100 * time.Microsecond}
	tb, err := Compare(sc, 1, CoalesceImpls, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, impl := range CoalesceImpls {
		for _, r := range tb.Rows {
			if len(r.Stats[impl].Values) != 1 {
				t.Fatalf("%s: %s has %d values, want 1", r.Name, impl, len(r.Stats[impl].Values))
			}
		}
		calls := tb.Row("handler calls during the stream").Stats[impl].Median
		pending := tb.Row("pending notifications at the end of the stream").Stats[impl].Median
		if calls < 0 || calls > float64(sc.Events) || pending < 0 || pending > float64(sc.Events) {
			t.Errorf("%s: %v calls, %v pending for %d events", impl, calls, pending, sc.Events)
		}
		// Ours' backlog, read before the calls, counts every notification
		// not yet delivered (the one in a call included).
		if impl == Actors && calls+pending < float64(sc.Events) {
			t.Errorf("%s: %v calls + %v pending < the %d events", impl, calls, pending, sc.Events)
		}
		if tb.Row("stream time").Stats[impl].Median <= 0 || tb.Row("live heap at the end of the stream (whole process)").Stats[impl].Median <= 0 {
			t.Errorf("%s: stream time or heap not measured", impl)
		}
	}
}
