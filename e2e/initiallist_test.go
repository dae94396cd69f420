//go:build !race

package e2e

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

const initialObjects = 10000

// TestInitialList10k creates 10,000 ConfigMaps, then starts our informer
// and client-go's one at a time (ours, ours on an existing actor system,
// client-go, then again), with a plain list and with a WatchList stream,
// and logs the time to HasSynced and to the handler having every object,
// and the heap the running informer holds (HeapAlloc after GC, minus
// before). A standalone informer of ours creates its own actor system,
// whose process registry is a fixed ~4.5MB; an informer on a shared system
// (a Factory's, or WithActorSystem) does not pay it. Each measurement
// starts once the goroutines of the previous informer are gone and the heap
// is back where it was (a heap that never comes back fails the test: an
// informer leaked). The figures go into docs/performance.md; nothing here
// asserts on time.
func TestInitialList10k(t *testing.T) {
	type mode struct {
		name      string
		watchList bool
	}
	for _, cl := range []struct {
		name       string
		watchCache bool
		modes      []mode
	}{
		// The default server setup; it serves the reflectors' first list
		// (resourceVersion "0") from the watch cache in one piece, limit
		// or not.
		{"watchcache", true, []mode{{"list", false}, {"watchlist", true}}},
		// Without the watch cache, lists come from etcd, which honours the
		// limit: the paginated path.
		{"etcd", false, []mode{{"list", false}}},
	} {
		t.Run(cl.name, func(t *testing.T) {
			c := startCluster(t, testcluster.Options{WatchCache: cl.watchCache})
			cs := clientFor(t, c.Config())
			const ns = "bulk"
			createNamespaces(t, cs, ns)
			start := time.Now()
			createConfigMaps(t, cs, ns, "cm", initialObjects, 32)
			t.Logf("created %d ConfigMaps in %v (race detector: %v, GOMAXPROCS %d)", initialObjects, time.Since(start).Round(time.Millisecond), raceEnabled, runtime.GOMAXPROCS(0))

			for _, mode := range cl.modes {
				t.Run(mode.name, func(t *testing.T) {
					label := cl.name + "/" + mode.name
					var results [numContenders][]syncResult
					base := heapAfterGC()
					prev := "nothing"
					for run := 1; run <= 2; run++ {
						for who := range numContenders {
							settleHeap(t, base, prev)
							prev = who.String()
							r := measureInitialSync(t, cs, ns, who, mode.watchList)
							r.leftover = heapAfterGC() - r.before
							results[who] = append(results[who], r)
							t.Logf("initial-list-10k %s run %d %s: %v", label, run, who, r)
						}
					}
					for who, rs := range results {
						for _, r := range rs {
							if r.usedWatchList != mode.watchList {
								t.Errorf("%s: streamed=%v, want %v (%v)", contender(who), r.usedWatchList, mode.watchList, r)
							}
						}
					}
					for _, r := range append(results[ours], results[oursShared]...) {
						if mode.watchList {
							continue
						}
						// Ours always asks for pages of 500 ...
						if r.lists == 0 || r.limited != r.lists {
							t.Errorf("ours: %d of %d list calls had a limit, want all", r.limited, r.lists)
						}
						// ... and etcd answers in pages.
						if !cl.watchCache && r.pages != (initialObjects+499)/500 {
							t.Errorf("ours: %d pages from etcd, want %d", r.pages, (initialObjects+499)/500)
						}
					}
					t.Logf("initial-list-10k %s ours: sync=%s heap=%s; ours (shared actor system): sync=%s heap=%s; client-go: sync=%s heap=%s",
						label, msList(results[ours]), mbList(results[ours]), msList(results[oursShared]), mbList(results[oursShared]),
						msList(results[clientGo]), mbList(results[clientGo]))
				})
			}
		})
	}
}

type syncResult struct {
	sync, delivered time.Duration
	heap            int64
	before          int64
	// leftover is the heap after the stopped informer's goroutines ended,
	// minus before: about 0 (minus the actor system, for oursShared).
	leftover       int64
	lists, limited int // list calls, those with a limit
	pages          int // list calls answered with a continue token, +1
	usedWatchList  bool
}

func (r syncResult) String() string {
	how := "watchlist"
	if !r.usedWatchList {
		how = fmt.Sprintf("list (%d calls, %d with limit, %d pages)", r.lists, r.limited, r.pages)
	}
	return fmt.Sprintf("sync=%dms delivered=%dms heap=%.1fMB (%.1fMB once stopped) via %s",
		r.sync.Milliseconds(), r.delivered.Milliseconds(), float64(r.heap)/(1<<20), float64(r.leftover)/(1<<20), how)
}

// contender is an informer whose initial sync is measured.
type contender int

const (
	ours       contender = iota // a standalone informer, with its own actor system
	oursShared                  // ours on an actor system that exists already
	clientGo
	numContenders
)

func (c contender) String() string {
	return [...]string{"ours", "ours (shared actor system)", "client-go"}[c]
}

func msList(rs []syncResult) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "/"
		}
		s += fmt.Sprint(r.sync.Milliseconds())
	}
	return s + "ms"
}

func mbList(rs []syncResult) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "/"
		}
		s += fmt.Sprintf("%.1f", float64(r.heap)/(1<<20))
	}
	return s + "MB"
}

func heapAfterGC() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// measureInitialSync runs one informer over ns until its handler has every
// object, measures, and stops it.
func measureInitialSync(t *testing.T, cs kubernetes.Interface, ns string, who contender, watchList bool) syncResult {
	t.Helper()
	lw := &recordingLW{inner: listWatch(cs.CoreV1().ConfigMaps(ns)), noWatchList: !watchList}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	var inf cache.SharedIndexInformer
	var ourInf *actors.SharedIndexInformer
	switch who {
	case ours:
		ourInf = actors.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, indexers, actors.WithWatchList(watchList))
	case oursShared:
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
		defer sys.Shutdown()
		ourInf = actors.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, indexers, actors.WithWatchList(watchList), actors.WithActorSystem(sys))
	default:
		inf = cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, indexers)
	}
	if ourInf != nil {
		inf = ourInf
	}
	var added atomic.Int64
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { added.Add(1) }}); err != nil {
		t.Fatal(err)
	}

	before := heapAfterGC()
	start := time.Now()
	stop := runUntilStopped(inf)
	defer stop()
	var r syncResult
	deadline := start.Add(120 * time.Second)
	for !inf.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not sync within 120s", who)
		}
		time.Sleep(time.Millisecond)
	}
	r.sync = time.Since(start)
	for added.Load() < initialObjects {
		if time.Now().After(deadline) {
			t.Fatalf("%s: handler got %d adds within 120s", who, added.Load())
		}
		time.Sleep(time.Millisecond)
	}
	r.delivered = time.Since(start)
	r.heap = heapAfterGC() - before

	if n := len(inf.GetStore().ListKeys()); n != initialObjects {
		t.Fatalf("%s: %d objects cached, want %d", who, n, initialObjects)
	}
	calls := lw.listCalls()
	r.lists = len(calls)
	for _, c := range calls {
		if c.opts.Limit > 0 {
			r.limited++
		}
		if c.cont != "" {
			r.pages++
		}
	}
	if r.lists > 0 {
		r.pages++
	}
	if ourInf != nil {
		r.usedWatchList = ourInf.LastSyncUsedWatchList()
	} else {
		r.usedWatchList = r.lists == 0
	}
	stop()
	// Let the informer's last goroutines end (a protoactor mailbox
	// goroutine may still be unwinding when RunWithContext returns), so
	// that the next measurement starts from a heap without this informer.
	informertest.Eventually(t, 30*time.Second, 10*time.Millisecond, "informer goroutines gone", func() string {
		if g := informerGoroutine(); g != "" {
			return "still running:\n" + g
		}
		return ""
	})
	r.before = before
	return r
}

// informerGoroutine returns the stack of a goroutine that runs informer
// code (ours, protoactor's or client-go's tools/cache), or "".
func informerGoroutine() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, marker := range []string{
			"github.com/asynkron/protoactor-go/",
			"k8s.io/client-go/tools/cache.",
			"github.com/actorinformer/actorinformer/actors.",
			"github.com/actorinformer/actorinformer/reflector.",
			"github.com/actorinformer/actorinformer/fifo.",
			"github.com/actorinformer/actorinformer/indexer.",
		} {
			if strings.Contains(g, marker) {
				return g
			}
		}
	}
	return ""
}

// settleHeap waits until the heap after GC is back near base, so that a
// measurement does not count what an earlier informer still held.
func settleHeap(t *testing.T, base int64, prev string) {
	t.Helper()
	const slack = 5 << 20 // an informer of 10k objects holds 15-20MB
	start := time.Now()
	var h int64
	for h = heapAfterGC(); h > base+slack; h = heapAfterGC() {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("heap still %.1fMB above where it was before the first informer, 30s after %s stopped", float64(h-base)/(1<<20), prev)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Logf("heap took %v after %s stopped to come back to %.1fMB above its start", d.Round(time.Millisecond), prev, float64(h-base)/(1<<20))
	}
}
