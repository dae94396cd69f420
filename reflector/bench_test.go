package reflector

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkMachineWatchEvents measures the per-batch cost of turning 100
// watch events into deltas, tracing off.
func BenchmarkMachineWatchEvents(b *testing.B) {
	h := newHarness(b, nil)
	w := h.startWatching("1")
	events := make([]watch.Event, 100)
	for i := range events {
		events[i] = ev(watch.Modified, pod(fmt.Sprintf("p%d", i), fmt.Sprint(i+2)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e := h.m.WatchEvents(w.Gen, events, time.Time{})
		if e.deltas() == nil || len(e.deltas().Items) != len(events) {
			b.Fatal(describe(e))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}
