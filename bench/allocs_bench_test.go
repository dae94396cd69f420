package bench

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allocsCheck makes BenchmarkAllocGuard fail when our informer allocates
// more per event than the baseline in testdata/allocs.txt allows
// (hack/test.sh sets it).
var allocsCheck = flag.Bool("bench.allocs-check", false, "fail BenchmarkAllocGuard above the baseline of testdata/allocs.txt")

// BenchmarkAllocGuard is the allocation guard: our informer alone in the
// watch scenario with 1 handler (1,000 pods listed, then 100,000 Modified
// events), each b.N iteration one run; it reports the median allocations
// and bytes per event of the watch phase. Counts, not times: they hardly
// move with the machine's load, since the pipeline allocates per batch
// next to nothing. With -bench.allocs-check, a median above the baseline
// plus the tolerance of testdata/allocs.txt fails:
//
//	go test ./bench -run '^$' -bench '^BenchmarkAllocGuard$' -benchtime 5x -args -bench.allocs-check
func BenchmarkAllocGuard(b *testing.B) {
	sc := &Watch{Keys: 1_000, Events: 100_000, Handlers: 1}
	sc.Prepare()
	var allocs, bytes []float64
	b.ResetTimer()
	for range b.N {
		ms, err := sc.Run(Actors)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range ms {
			switch m.Unit {
			case "allocs/event":
				allocs = append(allocs, m.Value)
			case "B/event":
				bytes = append(bytes, m.Value)
			}
		}
	}
	b.StopTimer()
	if len(allocs) != b.N || len(bytes) != b.N {
		b.Fatalf("%d allocation and %d byte figures for %d runs", len(allocs), len(bytes), b.N)
	}
	got := median(allocs)
	b.ReportMetric(got, "allocs/event")
	b.ReportMetric(median(bytes), "B/event")
	if !*allocsCheck {
		return
	}
	base, tol, err := readAllocsBaseline("testdata/allocs.txt")
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("allocations per event: %.3f (runs %.3f), baseline %.2f + %.2f", got, allocs, base, tol)
	if got > base+tol {
		b.Fatalf("our informer allocates %.3f times per event in the watch scenario (runs: %.3f), above the baseline %.2f + %.2f of testdata/allocs.txt: a change added an allocation per event", got, allocs, base, tol)
	}
}

// median returns the median of xs (the lower middle one of an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// readAllocsBaseline reads the "baseline" and "tolerance" lines of the
// guard's file (# starts a comment).
func readAllocsBaseline(path string) (base, tol float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		v, perr := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if !ok || perr != nil || (name != "baseline" && name != "tolerance") || seen[name] {
			return 0, 0, fmt.Errorf("%s:%d: %q: want one \"baseline N\" and one \"tolerance N\" line", path, n, line)
		}
		seen[name] = true
		if name == "baseline" {
			base = v
		} else {
			tol = v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !seen["baseline"] || !seen["tolerance"] {
		return 0, 0, fmt.Errorf("%s: want one \"baseline N\" and one \"tolerance N\" line", path)
	}
	return base, tol, nil
}
