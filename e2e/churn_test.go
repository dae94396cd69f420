package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

const (
	churnConfigMapOps = 3000
	churnPodOps       = 300
	churnWorkers      = 8
)

// TestChurn writes thousands of ConfigMap and Pod creates, updates and
// deletes while our informer and client-go's watch them, first directly and
// then through a proxy that cuts every connection at random moments. At the
// end both caches, a lister read and every handler's view equal the
// server's list.
func TestChurn(t *testing.T) {
	c := startCluster(t, testcluster.Options{WatchCache: true})
	cs := clientFor(t, c.Config())

	t.Run("Direct", func(t *testing.T) {
		runChurn(t, cs, cs, "direct", nil)
	})

	t.Run("ConnectionCuts", func(t *testing.T) {
		p := c.NewProxy(t)
		pcs := clientFor(t, c.ProxyConfig(p))
		runChurn(t, cs, pcs, "cuts", p)
		t.Logf("proxy: %d connections accepted, %d cut", p.Accepted(), p.Cuts())
		if p.Cuts() == 0 {
			t.Fatal("the proxy cut no connection")
		}
	})
}

// runChurn churns ConfigMaps and Pods with writer while informers watch
// them through watcher; with a proxy, chaos cuts its connections during the
// churn.
func runChurn(t *testing.T, writer, watcher kubernetes.Interface, prefix string, p *testcluster.Proxy) {
	cmNS := []string{prefix + "-0", prefix + "-1", prefix + "-2", prefix + "-3"}
	podNS := []string{prefix + "-pods-0", prefix + "-pods-1"}
	createNamespaces(t, writer, append(cmNS, podNS...)...)

	cmOurs, cmRef := startPair(t, pairConfig{
		example: &corev1.ConfigMap{},
		newLW:   func() cache.ListerWatcherWithContext { return listWatch(watcher.CoreV1().ConfigMaps("")) },
	})
	podOurs, podRef := startPair(t, pairConfig{
		example: &corev1.Pod{},
		newLW:   func() cache.ListerWatcherWithContext { return listWatch(watcher.CoreV1().Pods("")) },
	})
	waitSynced(t, 60*time.Second, cmOurs.inf.HasSynced, cmRef.inf.HasSynced, podOurs.inf.HasSynced, podRef.inf.HasSynced)
	if p != nil {
		p.StartChaos(50*time.Millisecond, 400*time.Millisecond)
	}

	ctx := t.Context()
	start := time.Now()
	cmStats, cmWait := startChurn(ctx, churnSpec{
		ops: configMapOps(writer), namespaces: cmNS, prefix: "cm", names: 100,
		total: churnConfigMapOps, workers: churnWorkers, seed: 1,
	})
	podStats, podWait := startChurn(ctx, churnSpec{
		ops: podOps(writer), namespaces: podNS, prefix: "pod", names: 30,
		total: churnPodOps, workers: churnWorkers / 2, seed: 2,
	})
	// A handler added mid-stream first gets the cache as it is, then the
	// rest of the stream.
	waitOps(t, cmStats, 0, churnConfigMapOps/3)
	cmOurs.addView(t, "late")
	cmRef.addView(t, "late")
	cmWait()
	podWait()
	elapsed := time.Since(start)
	if p != nil {
		p.Stop()
	}
	t.Logf("churn: configmaps %v; pods %v; in %v (%.0f writes/s)", cmStats, podStats, elapsed.Round(time.Millisecond),
		float64(cmStats.done()+podStats.done())/elapsed.Seconds())

	timeout := 60 * time.Second
	if p != nil {
		// After many cuts the reflectors' backoff can reach 30s (60s with
		// jitter) before their next attempt.
		timeout = 150 * time.Second
	}
	took, n := waitConverged(t, timeout, "configmaps converged", configMapServer(writer, ""), sidesSources(configMapListerSnapshot, cmOurs, cmRef))
	t.Logf("configmaps: %d on the server; all caches, listers and handlers equal it %v after the last write", n, took.Round(time.Millisecond))
	took, n = waitConverged(t, timeout, "pods converged", podServer(writer, ""), sidesSources(podListerSnapshot, podOurs, podRef))
	t.Logf("pods: %d on the server; converged %v later", n, took.Round(time.Millisecond))
	checkHandlerErrors(t, cmOurs, cmRef, podOurs, podRef)

	for _, s := range []*side{cmOurs, cmRef, podOurs, podRef} {
		t.Logf("%s: lists=%d watches=%d watch-error-handler calls=%d; early handler %s",
			s.name, len(s.lw.listCalls()), len(s.lw.watchCalls()), len(s.errs()), s.views["early"].Counts())
	}
	st := cmOurs.ours.Stats()
	t.Logf("ours configmaps stats: reflector events %d, relists %d, watch restarts %d, watch errors %d, queue merged %d",
		st.ReflectorEvents, st.Relists, st.WatchRestarts, st.WatchErrors, st.QueueMerged)
	if p != nil {
		// The cuts must have reached both informers, or the test proved
		// nothing about reconnecting.
		for _, s := range []*side{cmOurs, cmRef} {
			if w := len(s.lw.watchCalls()) + len(s.lw.listCalls()); w < 3 {
				t.Errorf("%s configmap informer made only %d list/watch requests: the cuts did not reach it", s.name, w)
			}
		}
	}
}
