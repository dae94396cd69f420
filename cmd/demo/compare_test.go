package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// TestCompareMeasuresClientGo runs client-go's side on the simulated
// cluster under load with a tracing, a slow, a panicking and a counting
// handler, and checks its snapshot: non-zero rates for the informer and
// every handler, the slow handler's backlog and event age, the panics
// recovered (the test process survives them), and the JSON shape the page
// reads.
func TestCompareMeasuresClientGo(t *testing.T) {
	sim := newSimCluster()
	defer sim.Close()
	load := newWorkload(sim, 1, 2, 100)
	if err := load.populate(); err != nil {
		t.Fatal(err)
	}
	cfg := config{slowHandler: 2 * time.Millisecond, panicEvery: 3}
	hs := newHandlers(4, cfg.slowHandler, cfg.panicEvery, tracenoop.NewTracerProvider(), nil)
	side, err := newClientGoSide(sim.Client(), cfg, hs)
	if err != nil {
		t.Fatal(err)
	}
	side.start(time.Now())
	defer side.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if !side.waitForSync(ctx) {
		t.Fatal("client-go's informer did not sync")
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wg.Go(func() {
		if err := load.run(loadCtx, 2000); err != nil {
			t.Errorf("workload: %v", err)
		}
	})

	// Wait until one snapshot shows everything (the window is one to two
	// seconds, so rates are of events after the first list).
	var snap compareSnapshot
	ok := false
	for !ok && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		snap = side.Snapshot()
		c := snap.ClientGo
		ok = c.Rate > 0 && c.Synced && c.CacheSize > 0 && c.WindowS >= 1 && len(c.Handlers) == 4
		for _, h := range c.Handlers {
			ok = ok && h.Rate > 0 && h.P99ms > 0 && h.P50ms > 0 && h.P99ms >= h.P50ms && h.DurationP99ms > 0
			switch h.Name {
			case "slow":
				ok = ok && h.Backlog > 0 && h.DurationP50ms >= 2 && h.P99ms >= 2
			case "panic":
				ok = ok && h.Panics > 0
			}
		}
	}
	if !ok {
		t.Fatalf("no complete snapshot within a minute; the last: %+v", snap)
	}
	names := make([]string, len(snap.ClientGo.Handlers))
	for i, h := range snap.ClientGo.Handlers {
		names[i] = h.Name
	}
	if got, want := strings.Join(names, ","), "trace,slow,panic,count"; got != want {
		t.Errorf("handlers %s, want the demo's %s", got, want)
	}

	// The JSON the page reads.
	raw, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	cg, _ := doc["clientgo"].(map[string]any)
	if cg == nil {
		t.Fatalf("no clientgo object in %s", raw)
	}
	if r, _ := cg["rate"].(float64); r <= 0 {
		t.Errorf("clientgo.rate = %v in %s", cg["rate"], raw)
	}
	list, _ := cg["handlers"].([]any)
	if len(list) != 4 {
		t.Fatalf("clientgo.handlers = %v in %s", cg["handlers"], raw)
	}
	for _, e := range list {
		h, _ := e.(map[string]any)
		if _, ok := h["name"].(string); !ok {
			t.Errorf("handler without a name: %v", h)
		}
		for _, k := range []string{"rate", "backlog", "p50_ms", "p99_ms", "duration_p50_ms", "duration_p99_ms", "panics", "delivered"} {
			if _, ok := h[k].(float64); !ok {
				t.Errorf("handler %v: %s is not a number", h["name"], k)
			}
		}
	}
}

// clientGoLine matches client-go's summary line's informer rate.
var clientGoLine = regexp.MustCompile(`(?m)^ +client-go +(\d+)/s \| cache +\d+ \| trace +\d+/s`)

// clientGoPanics matches client-go's panicking handler's totals.
var clientGoPanics = regexp.MustCompile(`(?m)^  client-go panic: (\d+) delivered, (\d+) panics`)

// TestDemoCompare runs the demo with --compare and checks client-go's
// lines: a summary line under ours with a non-zero rate, its sync, and its
// totals with the panicking handler's panics recovered.
func TestDemoCompare(t *testing.T) {
	cfg := config{
		rate: 500, pods: 50, namespaces: 2, seed: 1,
		duration: 2 * time.Second, interval: 250 * time.Millisecond,
		handlers: 3, panicEvery: 5, logLevel: "off", compare: true,
	}
	setOTelEnv(t, "OTEL_TRACES_EXPORTER", "none")
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, "client-go's informer (--compare) synced 50 pods") {
		t.Error("client-go's sync not reported")
	}
	busy := false
	for _, m := range clientGoLine.FindAllStringSubmatch(s, -1) {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			busy = true
		}
	}
	if !busy {
		t.Error("no client-go summary line with a non-zero rate")
	}
	m := clientGoPanics.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no client-go totals for the panicking handler:\n%s", s)
	}
	if m[1] == "0" || m[2] == "0" {
		t.Errorf("client-go's panicking handler: %s delivered, %s panics", m[1], m[2])
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
}

// TestLatencyHist checks the buckets' bounds and the quantiles.
func TestLatencyHist(t *testing.T) {
	for d := time.Duration(1); d < 3*time.Hour; d = d*9/8 + 1 {
		i := latencyBucket(d)
		if i < latencyBuckets-1 && d >= latencyUpper(i) {
			t.Fatalf("%v in bucket %d below %v", d, i, latencyUpper(i))
		}
		if i > 0 && d < latencyUpper(i-1) {
			t.Fatalf("%v in bucket %d, but bucket %d ends at %v", d, i, i-1, latencyUpper(i-1))
		}
		if i > 0 && i < latencyBuckets-1 && float64(latencyUpper(i)) > 1.25*float64(d) {
			t.Fatalf("%v in bucket %d up to %v: more than 25 %% above", d, i, latencyUpper(i))
		}
	}
	var h latencyHist
	for i := 1; i <= 100; i++ {
		h.observe(time.Duration(i) * time.Millisecond)
	}
	before := h.counts()
	for range 10 {
		h.observe(time.Second)
	}
	for _, c := range []struct {
		prev []int64
		q    float64
		lo   time.Duration
	}{
		{nil, 0.5, 50 * time.Millisecond},
		{nil, 0.99, time.Second},
		{before, 0.5, time.Second}, // only the later seconds
	} {
		got, ok := latencyQuantile(h.counts(), c.prev, c.q)
		if !ok || got < c.lo || float64(got) > 1.25*float64(c.lo) {
			t.Errorf("q%g (prev %v): %v, want %v to %v", c.q, c.prev != nil, got, c.lo, time.Duration(1.25*float64(c.lo)))
		}
	}
	if _, ok := latencyQuantile(h.counts(), h.counts(), 0.5); ok {
		t.Error("a quantile of nothing")
	}
}
