package actors_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// plainPodListWatch is a cache.ListWatch over a clientset, written by hand
// as in client-go's older examples: it does not tell the informer whether
// the client can stream lists (cache.ToListWatcherWithWatchListSemantics
// would), so WatchList stays on, as client-go's WatchListClient gate says.
func plainPodListWatch(c kubernetes.Interface) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
}

// TestWatchListOverFakeClientsetFallsBack is the setup most unit tests of a
// controller have: a plain ListWatch over client-go's fake clientset, which
// accepts the WatchList request as a plain watch, sends the existing objects
// as Added events and never the initial-events-end bookmark. client-go's
// informer waits for that bookmark forever, logging every 10 s. Ours must
// say why it waits (log, Stats, metric), then list and sync: within 15 s.
//
// Real time (about 10 s, both cases at once): it checks the fake clientset,
// the informer and what it reports, end to end; the fallback's logic runs
// on the fake clock in internal/sim/testdata/watchlist_no_bookmark.txt.
func TestWatchListOverFakeClientsetFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []runtime.Object
	}{
		{"with objects", []runtime.Object{
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"}},
		}},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewClientset(tc.pods...)
			var logs safeBuffer
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			inf := actors.NewSharedIndexInformer(plainPodListWatch(client), &corev1.Pod{}, 0, nil,
				actors.WithName("fakepods"), actors.WithMeterProvider(mp),
				actors.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			start := time.Now()
			ctx, stop := running(t, inf)

			// While it waits, Stats and the metrics say for what.
			eventually(t, 5*time.Second, "the wait shows in Stats", func() string {
				if st := inf.Stats().Reflector; !st.AwaitingInitialEventsEnd || st.AwaitingSince.IsZero() {
					return fmt.Sprintf("reflector status %+v", st)
				}
				return ""
			})
			if got := waitingGauge(t, reader, 1); got != 1 {
				t.Errorf("%s = %d while waiting, want 1", "actorinformer.reflector.watchlist.waiting", got)
			}

			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
				t.Fatalf("not synced within 15 s; Stats %+v; logs:\n%s", inf.Stats(), logs.String())
			}
			t.Logf("synced after %v", time.Since(start).Round(100*time.Millisecond))
			if n := len(inf.GetStore().ListKeys()); n != len(tc.pods) {
				t.Errorf("cache holds %d objects, want %d", n, len(tc.pods))
			}
			log := logs.String()
			for _, want := range []string{"informer=fakepods", "initial-events-end", "WatchList is off"} {
				if !strings.Contains(log, want) {
					t.Errorf("logs lack %q:\n%s", want, log)
				}
			}
			st := inf.Stats()
			if st.Reflector.AwaitingInitialEventsEnd || st.Reflector.UseWatchList || st.Reflector.LastSyncUsedWatchList {
				t.Errorf("after the fallback the reflector status is %+v", st.Reflector)
			}
			if got := waitingGauge(t, reader, 0); got != 0 {
				t.Errorf("waiting gauge %d after the fallback, want 0", got)
			}

			// The watch after the list goes on as usual.
			if _, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "the later pod", func() string {
				if _, ok, _ := inf.GetStore().GetByKey("default/late"); !ok {
					return "default/late not cached"
				}
				return ""
			})
			stop()
		})
	}
}

// waitingGauge reads the WatchList waiting gauge; built with tracing (and
// metrics) compiled out, there is none, and it returns want.
func waitingGauge(t *testing.T, reader *sdkmetric.ManualReader, want int64) int64 {
	t.Helper()
	if telemetry.CompiledOut {
		return want
	}
	m, ok := informertest.CollectMetrics(t, reader)["actorinformer.reflector.watchlist.waiting"]
	if !ok {
		t.Fatal("no actorinformer.reflector.watchlist.waiting metric")
	}
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 {
		t.Fatalf("actorinformer.reflector.watchlist.waiting: %+v", m.Data)
	}
	return g.DataPoints[0].Value
}
