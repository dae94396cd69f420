package actors

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/telemetry"
)

// BenchmarkListenerDeliver measures a listener's plain core delivering a
// batch of 256 updates to a counting handler, with the default (no-op)
// telemetry; one op is one notification. Run under both builds (with and
// without -tags actorinformer_notrace) it shows what the tracing and
// metrics checks cost this stage when nothing is recorded.
func BenchmarkListenerDeliver(b *testing.B) {
	const batch = 256
	var n atomic.Int64
	h := plainHandler{h: cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if _, ok := obj.(*corev1.Pod); ok {
			n.Add(1)
		}
	}}}
	var halted atomic.Bool
	l := newListener(1, h, "count", 0, telemetry.Nop(), &halted)
	items := make([]indexer.Notification, batch)
	for i := range items {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p" + strconv.Itoa(i), ResourceVersion: "2"}}
		items[i] = indexer.Notification{Type: indexer.NotifyUpdate, Old: p, New: p}
	}
	notes := &indexer.Notifications{Items: items}
	b.ReportAllocs()
	for i := 0; i < b.N; i += batch {
		l.backlog.N.Add(batch)
		l.deliver(notes)
	}
	if n.Load() == 0 {
		b.Fatal("handler not called")
	}
}

// BenchmarkListenerDeliverMetrics is BenchmarkListenerDeliver with the
// notifications stamped (as with a MeterProvider) and untraced: without a
// MeterProvider, and with an SDK one recording the per-call histograms for
// every call or one in 8 (WithHandlerHistogramEvery). One op is one
// notification.
func BenchmarkListenerDeliverMetrics(b *testing.B) {
	const batch = 256
	for _, c := range []struct {
		name  string
		sdk   bool
		every int
	}{{"none", false, 0}, {"sdk-every-1", true, 1}, {"sdk-every-8", true, 8}} {
		b.Run(c.name, func(b *testing.B) {
			tel := telemetry.Nop()
			if c.sdk {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				tel = telemetry.New(telemetry.Config{MeterProvider: mp, Informer: telemetry.InformerInfo{Name: "bench"}})
			}
			var n atomic.Int64
			h := plainHandler{h: cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
				if _, ok := obj.(*corev1.Pod); ok {
					n.Add(1)
				}
			}}}
			var halted atomic.Bool
			l := newListener(1, h, "count", 0, tel, &halted)
			if c.every > 0 {
				l.histEvery = c.every
			}
			stamp := telemetry.StampAt(time.Now())
			items := make([]indexer.Notification, batch)
			for i := range items {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p" + strconv.Itoa(i), ResourceVersion: "2"}}
				items[i] = indexer.Notification{Type: indexer.NotifyUpdate, Old: p, New: p, Received: stamp}
			}
			notes := &indexer.Notifications{Items: items}
			b.ReportAllocs()
			for i := 0; i < b.N; i += batch {
				l.backlog.N.Add(batch)
				l.deliver(notes)
			}
			if n.Load() == 0 {
				b.Fatal("handler not called")
			}
		})
	}
}
