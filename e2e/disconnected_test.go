package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// TestDisconnected runs on an apiserver without watch cache, so every list
// and watch reaches etcd and an etcd compaction makes an old
// resourceVersion fail with 410 Expired. The informers reach the apiserver
// through a proxy that the test blocks while it writes, compacts and
// restarts the apiserver behind their back.
func TestDisconnected(t *testing.T) {
	c := startCluster(t, testcluster.Options{WatchCache: false})
	cs := clientFor(t, c.Config())

	// 410 on purpose: with the informers cut off, objects change and etcd
	// compacts past the informers' resourceVersion; when they come back
	// their resourceVersion is gone, the list at it answers 410 and they
	// relist at resourceVersion "".
	for _, mode := range []struct {
		name      string
		watchList bool
		objects   int
	}{
		// Over 500 objects, so the first list is paginated (the watch
		// cache is off) and the reflectors keep paginating their relists;
		// a paginated list at a compacted resourceVersion is 410.
		{"List", false, 600},
		// A WatchList at a compacted resourceVersion is served from a
		// fresh read (NotOlderThan semantics): no 410 here, but the
		// informers still have to turn what they missed into events.
		{"WatchList", true, 100},
	} {
		t.Run("Compacted/"+mode.name, func(t *testing.T) {
			ns := "compacted-" + strings.ToLower(mode.name)
			createNamespaces(t, cs, ns)
			createConfigMaps(t, cs, ns, "cm", mode.objects, 16)

			p := c.NewProxy(t)
			pcs := clientFor(t, c.ProxyConfig(p))
			ours, ref := startPair(t, pairConfig{
				example:     &corev1.ConfigMap{},
				newLW:       func() cache.ListerWatcherWithContext { return listWatch(pcs.CoreV1().ConfigMaps(ns)) },
				noWatchList: !mode.watchList,
				ourOpts:     []actors.Option{actors.WithWatchList(mode.watchList)},
			})
			waitSynced(t, 60*time.Second, ours.inf.HasSynced, ref.inf.HasSynced)
			if got := ours.ours.LastSyncUsedWatchList(); got != mode.watchList {
				t.Fatalf("initial sync used WatchList = %v, want %v", got, mode.watchList)
			}
			oldRV := ours.inf.LastSyncResourceVersion()
			relists := ours.relists()
			lists := map[*side]int{ours: len(ours.lw.listCalls()), ref: len(ref.lw.listCalls())}
			watches := map[*side]int{ours: len(ours.lw.watchCalls()), ref: len(ref.lw.watchCalls())}

			p.SetBlocked(true)
			ctx := t.Context()
			for i := 0; i < 30; i++ {
				name := fmt.Sprintf("cm-%05d", i)
				var err error
				switch {
				case i < 10:
					err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
				case i < 20:
					_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"index":"changed"}}`), metav1.PatchOptions{})
				default:
					err = configMapOps(cs).create(ctx, ns, fmt.Sprintf("new-%d", i), i)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			rev := c.Compact(t)
			t.Logf("informers at rv %s; etcd compacted at revision %d", oldRV, rev)
			p.SetBlocked(false)

			took, n := waitConverged(t, 120*time.Second, "converged after compaction", configMapServer(cs, ns), sidesSources(configMapListerSnapshot, ours, ref))
			t.Logf("%d objects; converged %v after unblocking", n, took.Round(time.Millisecond))
			checkHandlerErrors(t, ours, ref)
			if got := ours.relists(); got <= relists {
				t.Errorf("our reflector did not relist: relists %d -> %d", relists, got)
			}
			for _, s := range []*side{ours, ref} {
				newLists := s.lw.listCalls()[lists[s]:]
				newWatches := s.lw.watchCalls()[watches[s]:]
				expired := slices.ContainsFunc(newLists, func(l listCall) bool { return isExpired(l.err) })
				fromScratchList := slices.ContainsFunc(newLists, func(l listCall) bool { return l.opts.ResourceVersion == "" && l.err == nil })
				fromScratchWatchList := slices.ContainsFunc(newWatches, func(o metav1.ListOptions) bool {
					return o.ResourceVersion == "" && o.SendInitialEvents != nil && *o.SendInitialEvents
				})
				t.Logf("%s: after unblocking %d lists (410 seen: %v, successful list at rv \"\": %v), %d watches (WatchList at rv \"\": %v); early handler %s; watch-error-handler calls %d",
					s.name, len(newLists), expired, fromScratchList, len(newWatches), fromScratchWatchList, s.views["early"].Counts(), len(s.errs()))
				for _, o := range newWatches {
					t.Logf("  %s watch rv=%q sendInitialEvents=%v", s.name, o.ResourceVersion, o.SendInitialEvents != nil && *o.SendInitialEvents)
				}
				for _, l := range newLists {
					t.Logf("  %s list rv=%q limit=%d continue=%v items=%d err=%v", s.name, l.opts.ResourceVersion, l.opts.Limit, l.cont != "", l.items, l.err)
				}
				// client-go hands a relist's unchanged objects to handlers
				// without a resync period as updates with the same
				// resourceVersion; so must we.
				if unchanged := mode.objects - 20; s.views["early"].Counts().SameRV < unchanged {
					t.Errorf("%s: %d same-resourceVersion updates after the relist, want at least %d (the unchanged objects)",
						s.name, s.views["early"].Counts().SameRV, unchanged)
				}
				if !mode.watchList && s == ours {
					// Deterministic: the first list that gets through is
					// paginated at the compacted resourceVersion.
					if !expired || !fromScratchList {
						t.Errorf("ours: want a 410 list then a successful relist at rv \"\"; got 410=%v, rv \"\" list=%v", expired, fromScratchList)
					}
				}
			}
			t.Logf("ours: relists %d -> %d, last sync used WatchList: %v", relists, ours.relists(), ours.ours.LastSyncUsedWatchList())
		})
	}

	// Last: it restarts the apiserver.
	t.Run("RestartMidChurn", func(t *testing.T) {
		ns := []string{"restart-0", "restart-1", "restart-2"}
		createNamespaces(t, cs, ns...)
		// Objects the churn never touches, deleted while the informers are
		// cut off.
		const doomedNS, doomedN = "restart-0", 50
		createConfigMaps(t, cs, doomedNS, "doomed", doomedN, 8)
		var doomed []string
		for i := 0; i < doomedN; i++ {
			doomed = append(doomed, fmt.Sprintf("%s/doomed-%05d", doomedNS, i))
		}

		p := c.NewProxy(t)
		pcs := clientFor(t, c.ProxyConfig(p))
		ours, ref := startPair(t, pairConfig{
			example: &corev1.ConfigMap{},
			newLW:   func() cache.ListerWatcherWithContext { return listWatch(pcs.CoreV1().ConfigMaps("")) },
		})
		waitSynced(t, 60*time.Second, ours.inf.HasSynced, ref.inf.HasSynced)
		for _, s := range []*side{ours, ref} {
			for _, k := range doomed {
				if _, ok, _ := s.inf.GetStore().GetByKey(k); !ok {
					t.Fatalf("%s: %s not in the cache after sync", s.name, k)
				}
			}
		}
		relists := ours.relists()

		stop := make(chan struct{})
		stats, wait := startChurn(t.Context(), churnSpec{
			ops: configMapOps(cs), namespaces: ns, prefix: "cm", names: 80, workers: churnWorkers, seed: 3, stop: stop,
		})
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wait()
		}()
		waitOps(t, stats, 0, 500)

		p.SetBlocked(true)
		blockedAt := stats.done()
		for _, k := range doomed {
			name := k[len(doomedNS)+1:]
			if err := cs.CoreV1().ConfigMaps(doomedNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitOps(t, stats, blockedAt, 300)
		rev := c.Compact(t)
		beforeRestart := stats.done()
		c.RestartAPIServer(t)
		p.SetBlocked(false)
		t.Logf("blocked after %d writes, compacted at revision %d after %d, restarted after %d", blockedAt, rev, beforeRestart, stats.done())
		waitOps(t, stats, stats.done(), 500)
		close(stop)
		wait()
		t.Logf("churn: %v", stats)

		took, n := waitConverged(t, 120*time.Second, "converged after restart", configMapServer(cs, ""), sidesSources(configMapListerSnapshot, ours, ref))
		t.Logf("%d objects; converged %v after the last write", n, took.Round(time.Millisecond))
		checkHandlerErrors(t, ours, ref)
		for _, s := range []*side{ours, ref} {
			v := s.views["early"]
			var missing []string
			for _, k := range doomed {
				if !v.SawDelete(k) {
					missing = append(missing, k)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%s: handler got no delete for %d of the %d objects deleted while it was cut off, e.g. %v", s.name, len(missing), doomedN, missing[:min(3, len(missing))])
			}
			t.Logf("%s: early handler %s; lists %d, watches %d, watch-error-handler calls %d",
				s.name, v.Counts(), len(s.lw.listCalls()), len(s.lw.watchCalls()), len(s.errs()))
		}
		if got := ours.relists(); got <= relists {
			t.Errorf("our reflector did not relist: relists %d -> %d", relists, got)
		}
		t.Logf("ours: relists %d -> %d", relists, ours.relists())
	})
}
