package listener

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/telemetry"
)

// deliverer is a listener that does not coalesce, as its actor runs it:
// its core takes each batch and its call path makes at once the calls the
// core sends the handler.
type deliverer struct {
	sent indexer.Sent
	ctr  Counters
	core *Core
	h    *Handler
}

func newDeliverer(tel *telemetry.T, every int, h EventHandler) *deliverer {
	d := &deliverer{}
	d.ctr.Sent = &d.sent
	d.core = NewCore(Config{ID: 1, Counters: &d.ctr})
	d.h = NewHandler(HandlerConfig{Handler: h, Name: "count", Telemetry: tel, Counters: &d.ctr, HistogramEvery: every})
	return d
}

// deliver counts n as the indexer does, then delivers it.
func (d *deliverer) deliver(n *indexer.Notifications) {
	d.sent.Notifications.Add(int64(len(n.Items)))
	for _, m := range d.core.Step(n) {
		if c, ok := m.Body.(*Calls); ok {
			d.h.Call(c)
		}
	}
}

// counter counts the updates of pods.
type counter struct{ n atomic.Int64 }

func (c *counter) OnAdd(context.Context, any, bool) {}
func (c *counter) OnUpdate(_ context.Context, _, obj any) {
	if _, ok := obj.(*corev1.Pod); ok {
		c.n.Add(1)
	}
}
func (c *counter) OnDelete(context.Context, any) {}

// BenchmarkListenerDeliver measures a listener's plain core and call path
// delivering a batch of 256 updates to a counting handler, with the
// default (no-op) telemetry; one op is one notification. Run under both
// builds (with and without -tags actorinformer_notrace) it shows what the
// tracing and metrics checks cost this stage when nothing is recorded.
func BenchmarkListenerDeliver(b *testing.B) {
	const batch = 256
	var n counter
	d := newDeliverer(telemetry.Nop(), 0, &n)
	items := make([]indexer.Notification, batch)
	for i := range items {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p" + strconv.Itoa(i), ResourceVersion: "2"}}
		items[i] = indexer.Notification{Type: indexer.NotifyUpdate, Old: p, New: p}
	}
	notes := &indexer.Notifications{Items: items}
	b.ReportAllocs()
	for i := 0; i < b.N; i += batch {
		d.deliver(notes)
	}
	if n.n.Load() == 0 {
		b.Fatal("handler not called")
	}
}

// BenchmarkListenerDeliverMetrics is BenchmarkListenerDeliver with the
// notifications stamped (as with a MeterProvider) and untraced: without a
// MeterProvider, and with an SDK one recording the per-call histograms for
// every call or one in 8 (the informer's default). One op is one
// notification.
func BenchmarkListenerDeliverMetrics(b *testing.B) {
	const batch = 256
	for _, c := range []struct {
		name  string
		sdk   bool
		every int
	}{{"none", false, 8}, {"sdk-every-1", true, 1}, {"sdk-every-8", true, 8}} {
		b.Run(c.name, func(b *testing.B) {
			tel := telemetry.Nop()
			if c.sdk {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				tel = telemetry.New(telemetry.Config{MeterProvider: mp, Informer: telemetry.InformerInfo{Name: "bench"}})
			}
			var n counter
			d := newDeliverer(tel, c.every, &n)
			stamp := telemetry.StampAt(time.Now())
			items := make([]indexer.Notification, batch)
			for i := range items {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p" + strconv.Itoa(i), ResourceVersion: "2"}}
				items[i] = indexer.Notification{Type: indexer.NotifyUpdate, Old: p, New: p, Received: stamp}
			}
			notes := &indexer.Notifications{Items: items}
			b.ReportAllocs()
			for i := 0; i < b.N; i += batch {
				d.deliver(notes)
			}
			if n.n.Load() == 0 {
				b.Fatal("handler not called")
			}
		})
	}
}
