package fifo

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestQueueStampsTombstonesAndSyncs checks that the deltas the queue makes
// itself carry the time it made them when metrics are on (the event age
// starts there), and nothing otherwise; the others keep the reflector's.
func TestQueueStampsTombstonesAndSyncs(t *testing.T) {
	informertest.NeedsTracing(t)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	made := time.Now()
	for _, metered := range []bool{false, true} {
		cfg := telemetry.Config{}
		if metered {
			cfg.MeterProvider = mp
		}
		k := newKnown(o("a", 1), o("b", 1))
		q := New(Config{Known: k, Telemetry: telemetry.New(cfg), Clock: testingclock.NewFakePassiveClock(made)})
		listed := replaced("a", 2)
		listed.Received = telemetry.StampAt(made.Add(-time.Second))
		q.replace([]Delta{listed}, "10", nil) // b is gone: tombstone
		got := popAll(t, q)
		k.set("a", o("a", 2))
		k.del("b")
		q.resync()
		got = append(got, popAll(t, q)...)
		var types []DeltaType
		for _, d := range got {
			types = append(types, d.Type)
		}
		if len(types) != 4 || types[0] != Deleted || types[1] != Replaced || types[2] != Bookmark || types[3] != Sync {
			t.Fatalf("deltas %s, want b's tombstone, a, the bookmark, a's sync", describe(got))
		}
		for _, d := range got {
			want := time.Duration(0)
			switch {
			case d.Type == Replaced:
				if d.Received != listed.Received {
					t.Errorf("metered %v: listed delta's stamp changed", metered)
				}
				continue
			case d.Type == Bookmark:
				continue
			case metered:
				want = time.Minute
			}
			if got := d.Received.Age(made.Add(time.Minute)); got != want {
				t.Errorf("metered %v: %s delta of %s: age %v, want %v", metered, d.Type, d.Key, got, want)
			}
		}
	}
}
