package handover_test

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkSettledSecond is one second of a settled group of 3 members
// and 16 ranges, nothing moving: every member's ticks, heartbeats, lease
// renewals and lease snapshots, through the simulator. core-ns/s is what
// the three members' protocol steps took in that second (their Step calls
// alone, the simulator's bookkeeping aside).
func BenchmarkSettledSecond(b *testing.B) {
	w := newWorld(b, 16)
	w.fifo = true
	for _, m := range []string{"m1", "m2", "m3"} {
		w.exec("start " + m)
	}
	if !w.quiesce(rand.New(rand.NewPCG(7, 7))) {
		b.Fatalf("no quiescence: %v", w.errs)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	var core time.Duration
	w.coreTime = &core
	b.ResetTimer()
	for range b.N {
		for range 10 {
			for w.busy() {
				w.exec(w.random(rng, false))
			}
			w.exec("advance 100")
			for _, n := range w.runningNodes() {
				w.exec("leases " + string(n.id))
			}
		}
		w.lines = w.lines[:0]
	}
	b.StopTimer()
	b.ReportMetric(float64(core.Nanoseconds())/float64(b.N), "core-ns/s")
	if len(w.errs) > 0 {
		b.Fatal(w.errs)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		if n := delivered(w, m); n < 5 || n > 6 {
			b.Fatalf("%s delivers %d ranges after the run", m, n)
		}
	}
}
