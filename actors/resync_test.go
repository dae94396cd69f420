package actors_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
)

// resyncCounter counts a handler's resync calls: OnUpdate with the very same
// object as old and new (a resync hands the cached object twice), and its
// other same-resourceVersion updates (a relist's unchanged objects).
type resyncCounter struct {
	resyncs, sameRV atomic.Int64
}

func (c *resyncCounter) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
		switch {
		case old == cur:
			c.resyncs.Add(1)
		case informertest.RV(old) == informertest.RV(cur):
			c.sameRV.Add(1)
		}
	}}
}

// useDefault as a handler's period adds it with AddEventHandler (the
// informer's default resync period).
const useDefault = -1

// resyncScenario runs on client-go's informer and ours side by side.
// Real time: client-go's informer takes no clock. (Ours alone, on the fake
// clock: internal/sim/testdata/resync_*.txt.) The times are real: checks come every second or more, and each window ends
// at least half a second away from any resync client-go makes, so
// scheduling noise cannot move a resync across it while any of the bugs
// below changes a count.
type resyncScenario struct {
	name          string
	defaultResync time.Duration
	periods       []time.Duration // one handler per entry
	before        time.Duration   // between adding the handlers and Run
	window        time.Duration   // from the informer's sync to counting
	// want is client-go's count of resync rounds (each a call per pod) per
	// handler at the end of window.
	want []int64
}

const resyncPods = 2

func TestResyncScheduleMatchesClientGo(t *testing.T) {
	for _, sc := range []resyncScenario{{
		// The checks run at the informer's check period (1 s), not at the
		// smallest handler period: by 3.5 s the 2 s and the 3 s handlers have
		// each resynced once (checks every 2 s would resync the 3 s one at 4 s).
		name: "check period below the handler periods", defaultResync: time.Second,
		periods: []time.Duration{0, 2 * time.Second, 3 * time.Second},
		window:  3500 * time.Millisecond, want: []int64{0, 1, 1},
	}, {
		// The check timer is re-armed after each check: a handler whose
		// period is the check period resyncs at every check (2, 4, 6, 8 s),
		// never skipping one it was found just short of.
		name: "handler period equal to the check period", defaultResync: 2 * time.Second,
		periods: []time.Duration{useDefault},
		window:  9 * time.Second, want: []int64{4},
	}, {
		// An informer with no default resync does no resyncs, even for a
		// handler that asks for them (determineResyncPeriod).
		name: "no default resync", defaultResync: 0,
		periods: []time.Duration{time.Second, 0},
		window:  3500 * time.Millisecond, want: []int64{0, 0},
	}, {
		// A handler's first period counts from when it was added, not from
		// Run: added 2 s before Run, the 3 s handler resyncs at the first
		// check (1 s) and at 4 s.
		name: "handler added before Run", defaultResync: time.Second,
		periods: []time.Duration{3 * time.Second},
		before:  2 * time.Second, window: 5 * time.Second, want: []int64{2},
	}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runResyncScenario(t, sc)
		})
	}
}

func runResyncScenario(t *testing.T, sc resyncScenario) {
	src, lw := newSource(t)
	for i := range resyncPods {
		src.Add(pod("ns", fmt.Sprint("p", i), 1))
	}
	infs := map[string]cache.SharedIndexInformer{
		"client-go": cache.NewSharedIndexInformer(lw, &corev1.Pod{}, sc.defaultResync, cache.Indexers{}),
		"ours":      actors.NewSharedIndexInformer(lw, &corev1.Pod{}, sc.defaultResync, nil, actors.WithWatchList(false)),
	}
	counters := map[string][]*resyncCounter{}
	for name, inf := range infs {
		for _, p := range sc.periods {
			c := &resyncCounter{}
			var err error
			if p == useDefault {
				_, err = inf.AddEventHandler(c.handler())
			} else {
				_, err = inf.AddEventHandlerWithResyncPeriod(c.handler(), p)
			}
			if err != nil {
				t.Fatal(err)
			}
			counters[name] = append(counters[name], c)
		}
	}
	time.Sleep(sc.before)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, inf := range infs {
		wg.Go(func() { inf.Run(stop) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// Each informer's window starts when it has synced: its checks start
	// when its list is done, however long the start took.
	var mu sync.Mutex
	got := map[string][]int64{}
	var counting sync.WaitGroup
	for name, inf := range infs {
		counting.Go(func() {
			deadline := time.Now().Add(30 * time.Second)
			for !inf.HasSynced() {
				if time.Now().After(deadline) {
					t.Errorf("%s: caches did not sync", name)
					return
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(sc.window)
			var n []int64
			for _, c := range counters[name] {
				n = append(n, c.resyncs.Load())
			}
			mu.Lock()
			got[name] = n
			mu.Unlock()
		})
	}
	counting.Wait()
	if t.Failed() {
		return
	}

	want := make([]int64, len(sc.want))
	for i, rounds := range sc.want {
		want[i] = rounds * resyncPods
	}
	t.Logf("resync calls per handler after %v: client-go %v, ours %v", sc.window, got["client-go"], got["ours"])
	if fmt.Sprint(got["client-go"]) != fmt.Sprint(want) {
		t.Errorf("client-go's resync calls per handler = %v, want %v: the scenario does not test what it says (or the machine is too slow for its margins)", got["client-go"], want)
	}
	if fmt.Sprint(got["ours"]) != fmt.Sprint(got["client-go"]) {
		t.Errorf("our resync calls per handler = %v, client-go's = %v", got["ours"], got["client-go"])
	}
}

// TestRelistAfterResyncCheckMatchesClientGo (real time: client-go's
// informer, side by side, takes no clock): with a default resync period
// but no handler asking for resyncs, the resync checks still run and take
// every handler out of the syncing set, so a relist's unchanged objects
// reach no handler, in client-go and ours.
func TestRelistAfterResyncCheckMatchesClientGo(t *testing.T) {
	src, lw := newSource(t)
	for i := range resyncPods {
		src.Add(pod("ns", fmt.Sprint("p", i), 1))
	}
	marker := pod("ns", "marker", 1)
	lists := map[string]*atomic.Int64{"client-go": {}, "ours": {}}
	infs := map[string]cache.SharedIndexInformer{
		"client-go": cache.NewSharedIndexInformer(countLists(lw, lists["client-go"]), &corev1.Pod{}, time.Second, cache.Indexers{}),
		"ours":      actors.NewSharedIndexInformer(countLists(lw, lists["ours"]), &corev1.Pod{}, time.Second, nil, actors.WithWatchList(false)),
	}
	counters := map[string]*resyncCounter{}
	sawMarker := map[string]*atomic.Bool{}
	for name, inf := range infs {
		c := &resyncCounter{}
		counters[name] = c
		if _, err := inf.AddEventHandlerWithResyncPeriod(c.handler(), 0); err != nil {
			t.Fatal(err)
		}
		seen := &atomic.Bool{}
		sawMarker[name] = seen
		if _, err := inf.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			if informertest.Key(obj) == "ns/marker" {
				seen.Store(true)
			}
		}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, inf := range infs {
		wg.Go(func() { inf.Run(stop) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for _, inf := range infs {
		waitSynced(t, context.Background(), inf.HasSynced)
	}
	// Past the first checks (every second from the list).
	time.Sleep(2500 * time.Millisecond)
	// A change no watcher sees, then the watches closed and the change
	// history dropped: the re-watch gets 410 and both relist.
	src.AddDropWatch(pod("ns", "unseen", 1))
	src.ResetWatch()
	// A change made once both have relisted comes after the relist's
	// updates: once a handler has it, it has had them.
	eventually(t, 30*time.Second, "relist", func() string {
		for name, n := range lists {
			if n.Load() < 2 {
				return name + " has not relisted"
			}
		}
		return ""
	})
	src.Add(marker)
	eventually(t, 30*time.Second, "marker", func() string {
		for name, seen := range sawMarker {
			if !seen.Load() {
				return name + " has not seen the marker"
			}
		}
		return ""
	})
	for name, c := range counters {
		if n := c.sameRV.Load(); n != 0 {
			t.Errorf("%s: a handler without resyncs got %d unchanged objects of a relist as updates", name, n)
		}
		if n := c.resyncs.Load(); n != 0 {
			t.Errorf("%s: a handler without resyncs got %d resyncs", name, n)
		}
	}
}

// countingLW counts the lists that returned.
type countingLW struct {
	cache.ListerWatcher
	n *atomic.Int64
}

func countLists(lw cache.ListerWatcher, n *atomic.Int64) cache.ListerWatcher {
	return countingLW{lw, n}
}

func (c countingLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := c.ListerWatcher.List(opts)
	if err == nil {
		c.n.Add(1)
	}
	return obj, err
}

// IsWatchListSemanticsUnSupported: the source cannot stream lists.
func (countingLW) IsWatchListSemanticsUnSupported() bool { return true }
