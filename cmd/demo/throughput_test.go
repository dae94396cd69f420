package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	benchRuntime = flag.Duration("demo.runtime", 6*time.Second, "BenchmarkDemoThroughput: how long each run of the demo lasts")
	benchModes   = flag.String("demo.modes", "off,http", "BenchmarkDemoThroughput: the modes to alternate, comma-separated: off (cfg.http \"\"), http (cfg.http 127.0.0.1:0: the web server and /metrics), http-nometrics (the web server without /metrics)")
	benchPods    = flag.Int("demo.pods", 1000, "BenchmarkDemoThroughput: simulated pods")
	benchWorkers = flag.Int("demo.workers", 1, "BenchmarkDemoThroughput: controller workers (0: no controller, no workqueue)")
)

// BenchmarkDemoThroughput measures the demo's informer throughput on the
// simulated cluster at --rate 0 (the workload as fast as the informer takes
// it) with the web server off and on: the demo as `go run ./cmd/demo`
// runs it (3 handlers, the controller with 1 worker, 1 % of deltas traced
// in memory), through run(). Every b.N iteration runs each mode once, in
// turn, for -demo.runtime; the result is the indexer's events per second,
// the mean of the summary lines after the first (which holds the initial
// list), and the process's CPU time per event; the benchmark reports each
// mode's medians and their ratios to the first mode's, after a first run
// it does not count. Run it with e.g.
//
//	go test -run '^$' -bench DemoThroughput -benchtime 5x ./cmd/demo -args -demo.runtime 6s -demo.modes off,http
//
// It asserts nothing: it is a measurement (docs/performance.md, "The demo's
// web server").
func BenchmarkDemoThroughput(b *testing.B) {
	// The demo's defaults: traces in memory, no metrics exporter.
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_METRICS_EXPORTER"} {
		b.Setenv(k, "")
	}
	modes := strings.Split(*benchModes, ",")
	// A first run, not counted: the process's first run is much slower
	// (its heap and the scheduler's state grow to size).
	if _, _, err := demoThroughput(modes[0], min(*benchRuntime, 3*time.Second), *benchPods, *benchWorkers); err != nil {
		b.Fatal(err)
	}
	rates := make(map[string][]float64, len(modes))
	cpus := make(map[string][]float64, len(modes))
	for b.Loop() {
		for _, mode := range modes {
			r, cpu, err := demoThroughput(mode, *benchRuntime, *benchPods, *benchWorkers)
			if err != nil {
				b.Fatal(err)
			}
			rates[mode] = append(rates[mode], r)
			cpus[mode] = append(cpus[mode], cpu)
			// Not b.Logf: the benchmark's log keeps only its first lines.
			fmt.Fprintf(os.Stderr, "%-6s %8.0f events/s %6.2f µs CPU/event\n", mode, r, cpu)
		}
	}
	first, firstCPU := median(rates[modes[0]]), median(cpus[modes[0]])
	for _, mode := range modes {
		rs, cs := rates[mode], cpus[mode]
		m, c := median(rs), median(cs)
		b.ReportMetric(m, mode+"-events/s")
		b.ReportMetric(c, mode+"-µs-cpu/event")
		if mode != modes[0] && first > 0 {
			b.ReportMetric(m/first, mode+"/"+modes[0]+"-rate")
			b.ReportMetric(c/firstCPU, mode+"/"+modes[0]+"-cpu")
		}
		b.Logf("%-6s median %8.0f events/s [%.0f–%.0f], %6.2f µs CPU/event [%.2f–%.2f] over %d runs",
			mode, m, slices.Min(rs), slices.Max(rs), c, slices.Min(cs), slices.Max(cs), len(rs))
	}
}

// demoThroughput runs the demo once in mode and returns the indexer's
// events per second after the first summary line, and the process's CPU
// time (user and system) per event the indexer applied over the whole run
// (with the workload's, the list's and the handlers' work: all of it the
// same in every mode).
func demoThroughput(mode string, runtime time.Duration, pods, workers int) (rate, cpuPerEvent float64, err error) {
	cfg := config{
		rate: 0, pods: pods, namespaces: 4, seed: 1,
		duration: runtime, interval: time.Second,
		handlers: 3, workers: workers, logLevel: "off",
	}
	switch mode {
	case "off":
	case "http":
		cfg.http = "127.0.0.1:0"
	case "http-nometrics":
		cfg.http, cfg.noMetrics = "127.0.0.1:0", true
	default:
		return 0, 0, fmt.Errorf("unknown mode %q", mode)
	}
	runtimeGC()
	var out bytes.Buffer
	cpu0 := cpuTime()
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		return 0, 0, fmt.Errorf("%s: %w\n%s", mode, err, out.String())
	}
	cpu := cpuTime() - cpu0
	lines := indexerRate.FindAllStringSubmatch(out.String(), -1)
	total := indexerTotal.FindStringSubmatch(out.String())
	if len(lines) < 2 || total == nil {
		return 0, 0, fmt.Errorf("%s: too few summary lines (-demo.runtime of at least 3s):\n%s", mode, out.String())
	}
	var sum float64
	for _, m := range lines[1:] {
		r, _ := strconv.ParseFloat(m[1], 64)
		sum += r
	}
	n, _ := strconv.ParseFloat(total[1], 64)
	return sum / float64(len(lines)-1), float64(cpu.Microseconds()) / max(n, 1), nil
}

// indexerTotal matches the totals line's indexer count.
var indexerTotal = regexp.MustCompile(`(?m)^totals after .*?, indexer ([0-9]+),`)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runtimeGC collects twice, so that a run does not pay for the previous
// one's garbage.
func runtimeGC() {
	runtime.GC()
	runtime.GC()
}

// indexerRate matches a summary line's indexer rate.
var indexerRate = regexp.MustCompile(`(?m)^\[ *[0-9.]+s\] reflector .*? \| indexer +([0-9]+)/s`)

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
