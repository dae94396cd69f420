package bench

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// Sizes are small unless -bench.full is given (go test ./bench -bench .
// -args -bench.full) or ACTORINFORMER_BENCH_FULL=1 is set. Every b.N
// iteration is one run of each implementation, alternated; the metrics
// reported are medians over the iterations (-benchtime 5x: five runs each)
// and their ratio ours ÷ client-go. -bench.impl runs one implementation
// only, for profiling:
//
//	go test ./bench -run '^$' -bench 'Watch/handlers=4' -benchtime 3x \
//	    -cpuprofile cpu.out -args -bench.full -bench.impl=actors
var (
	fullFlag = flag.Bool("bench.full", false, "use the sizes of issue 5 instead of the small smoke sizes")
	implFlag = flag.String("bench.impl", "", "run only this implementation (actors or client-go)")
)

func benchSizes() Sizes {
	if *fullFlag || os.Getenv("ACTORINFORMER_BENCH_FULL") == "1" {
		return Full
	}
	return Small
}

func benchImpls(b *testing.B) []Impl {
	name := *implFlag
	if name == "" {
		name = os.Getenv("ACTORINFORMER_BENCH_IMPL")
	}
	if name == "" {
		return Impls
	}
	impl, err := ParseImpl(name)
	if err != nil {
		b.Fatal(err)
	}
	return []Impl{impl}
}

// runScenario runs sc b.N times per implementation and reports the medians.
func runScenario(b *testing.B, sc Scenario) {
	impls := benchImpls(b)
	sc.Prepare()
	b.ResetTimer()
	t, err := Compare(sc, b.N, impls, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	for _, r := range t.Rows {
		slug := unitSlug(r.Name + "-" + r.Unit)
		for _, impl := range impls {
			b.ReportMetric(r.Stats[impl].Median, string(impl)+":"+slug)
		}
		if ratio, ok := r.Ratio(); ok && r.Better != Neither {
			b.ReportMetric(ratio, "ratio:"+slug)
		}
	}
	b.Log("\n" + t.Markdown())
}

func unitSlug(s string) string {
	return strings.NewReplacer(" ", "_", "'", "", "(", "", ")", "", ",", "").Replace(s)
}

// BenchmarkInitialSync is scenario 1: time from Run until every handler has
// had every add of the first list; peak heap; bytes per object.
func BenchmarkInitialSync(b *testing.B) {
	z := benchSizes()
	runScenario(b, &InitialSync{Objects: z.SyncObjects, Handlers: Handlers})
}

// BenchmarkWatch is scenario 2: watch-phase throughput with 1 and 4
// handlers; bytes and allocations per event.
func BenchmarkWatch(b *testing.B) {
	z := benchSizes()
	one := &Watch{Keys: z.WatchKeys, Events: z.WatchEvents, Handlers: 1}
	four := &Watch{Keys: z.WatchKeys, Events: z.WatchEvents, Handlers: Handlers}
	b.Run("handlers=1", func(b *testing.B) { runScenario(b, one) })
	one = nil // its pre-built events (1.3 GB at full size) can go
	b.Run("handlers=4", func(b *testing.B) { runScenario(b, four) })
}

// BenchmarkSlowHandler is scenario 3: the fast handlers' delivery latency
// next to a handler sleeping 1 ms per event, the slow one's backlog memory,
// and the same stream without the slow handler as a control.
func BenchmarkSlowHandler(b *testing.B) {
	z := benchSizes()
	slow := &SlowHandler{Keys: z.SlowKeys, Events: z.SlowEvents, Rate: z.SlowRate, Handlers: Handlers, Delay: SlowDelay}
	control := &SlowHandler{Keys: z.SlowKeys, Events: z.SlowEvents, Rate: z.SlowRate, Handlers: Handlers}
	b.Run("slow", func(b *testing.B) { runScenario(b, slow) })
	b.Run("control", func(b *testing.B) { runScenario(b, control) })
}

// BenchmarkRelist is scenario 4: a relist with 10 % of the objects deleted
// and 10 % changed: time, tombstones delivered, peak heap.
func BenchmarkRelist(b *testing.B) {
	z := benchSizes()
	runScenario(b, &Relist{Objects: z.RelistObjects, Handlers: Handlers})
}

// tracing cost: see tracing_bench_test.go
