package e2e

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

func isWatchList(o metav1.ListOptions) bool {
	return o.SendInitialEvents != nil && *o.SendInitialEvents && o.ResourceVersionMatch == metav1.ResourceVersionMatchNotOlderThan
}

// TestWatchList syncs from the apiserver's streaming list (kube-apiserver
// 1.36 has the WatchList feature on by default; the test turns it on
// explicitly anyway) and checks, from the reflector's own report and from
// the requests it made, that the initial sync was streamed, and that the
// cache equals a plain list. An informer with WatchList off is the control.
func TestWatchList(t *testing.T) {
	c := startCluster(t, testcluster.Options{WatchCache: true, FeatureGates: "WatchList=true"})
	cs := clientFor(t, c.Config())
	const ns = "watchlist"
	createNamespaces(t, cs, ns)
	createConfigMaps(t, cs, ns, "cm", 300, 16)

	unstarted := actors.NewSharedIndexInformer(listWatch(cs.CoreV1().ConfigMaps(ns)), &corev1.ConfigMap{}, 0, nil)
	if unstarted.LastSyncUsedWatchList() {
		t.Fatal("LastSyncUsedWatchList is true before Run")
	}

	ours, ref := startPair(t, pairConfig{
		example: &corev1.ConfigMap{},
		newLW:   func() cache.ListerWatcherWithContext { return listWatch(cs.CoreV1().ConfigMaps(ns)) },
		ourOpts: []actors.Option{actors.WithWatchList(true)},
	})
	control := &side{name: "ours-list", lw: &recordingLW{inner: listWatch(cs.CoreV1().ConfigMaps(ns))}, views: map[string]*informertest.View{}}
	control.ours = actors.NewSharedIndexInformer(control.lw, &corev1.ConfigMap{}, 0, nil, actors.WithWatchList(false))
	control.inf = control.ours
	control.addView(t, "early")
	runInformers(t, control.inf)

	start := time.Now()
	waitSynced(t, 60*time.Second, ours.inf.HasSynced, ref.inf.HasSynced, control.inf.HasSynced)
	t.Logf("three informers synced %d objects in %v", len(ours.inf.GetStore().ListKeys()), time.Since(start).Round(time.Millisecond))

	if !ours.ours.LastSyncUsedWatchList() {
		t.Errorf("ours: LastSyncUsedWatchList = false after a WatchList sync")
	}
	if control.ours.LastSyncUsedWatchList() {
		t.Errorf("control: LastSyncUsedWatchList = true with WatchList off")
	}
	for _, s := range []*side{ours, ref, control} {
		lists, watches := s.lw.listCalls(), s.lw.watchCalls()
		streamed := slices.ContainsFunc(watches, isWatchList)
		t.Logf("%s: %d lists, %d watches, streamed initial list: %v", s.name, len(lists), len(watches), streamed)
		wantStream := s != control
		if streamed != wantStream || (len(lists) == 0) != wantStream {
			t.Errorf("%s: streamed=%v with %d lists; want streamed=%v", s.name, streamed, len(lists), wantStream)
		}
	}

	// The streamed caches equal a plain list; then the same watch carries
	// on with new writes.
	sources := sidesSources(configMapListerSnapshot, ours, ref, control)
	waitConverged(t, 30*time.Second, "synced caches equal a list", configMapServer(cs, ns), sources)
	stats, wait := startChurn(t.Context(), churnSpec{
		ops: configMapOps(cs), namespaces: []string{ns}, prefix: "churn", names: 100, total: 500, workers: churnWorkers, seed: 5,
	})
	wait()
	took, n := waitConverged(t, 30*time.Second, "converged after churn", configMapServer(cs, ns), sources)
	t.Logf("churn %v; %d objects, converged %v after the last write", stats, n, took.Round(time.Millisecond))
	checkHandlerErrors(t, ours, ref, control)
}
