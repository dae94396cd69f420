package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/actorinformer/actorinformer/telemetry"
)

// TestMetricsEndpoint runs the demo's informer on the simulated cluster
// with the /metrics exporter as its MeterProvider's reader, serves
// metricsHandler on a test server and checks that a scrape is valid
// Prometheus text with the informer's metrics: events through each stage
// and per handler, counted, and the listeners' backlog gauge.
func TestMetricsEndpoint(t *testing.T) {
	if telemetry.CompiledOut {
		t.Skip("built with actorinformer_notrace: the library records no metrics")
	}
	prom, readers, err := metricsReaders(config{http: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(readers[0]))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tel := &otelSetup{tracerProvider: tracenoop.NewTracerProvider(), meterProvider: mp}

	sim := newSimCluster()
	defer sim.Close()
	load := newWorkload(sim, 1, 2, 100)
	if err := load.populate(); err != nil {
		t.Fatal(err)
	}
	cfg := config{handlers: 2, workers: 0, panicEvery: 4}
	factory, _, _, _, err := newInformer(sim.Client(), cfg, tel, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	factory.Start(stop)
	defer factory.Shutdown()
	defer close(stop)
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatal("not synced")
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	wg.Go(func() {
		if err := load.run(loadCtx, 1000); err != nil {
			t.Errorf("workload: %v", err)
		}
	})

	srv := httptest.NewServer(metricsHandler(prom.registry))
	defer srv.Close()
	want := map[string]dto.MetricType{
		"actorinformer_reflector_events_total": dto.MetricType_COUNTER,
		"actorinformer_fifo_events_in_total":   dto.MetricType_COUNTER,
		"actorinformer_indexer_events_total":   dto.MetricType_COUNTER,
		"actorinformer_listener_events_total":  dto.MetricType_COUNTER,
		"actorinformer_handler_panics_total":   dto.MetricType_COUNTER,
		"actorinformer_listener_backlog":       dto.MetricType_GAUGE,
		"actorinformer_cache_size":             dto.MetricType_GAUGE,
	}
	var last string
	for ctx.Err() == nil {
		families, text := scrape(t, srv.URL)
		last = text
		missing := false
		for name, typ := range want {
			f := families[name]
			if f == nil || f.GetType() != typ || len(f.GetMetric()) == 0 {
				missing = true
				break
			}
		}
		// Every handler's delivered events, labelled by handler, and the
		// reflector's past the first list.
		if !missing && len(byHandler(families["actorinformer_listener_events_total"])) == 2 &&
			families["actorinformer_reflector_events_total"].GetMetric()[0].GetCounter().GetValue() > 100 &&
			families["actorinformer_handler_panics_total"].GetMetric()[0].GetCounter().GetValue() > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no scrape with every expected metric within a minute; the last:\n%s", last)
}

// scrape gets url and parses it as Prometheus text.
func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q, want the Prometheus text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("not Prometheus text: %v\n%s", err, body)
	}
	return families, string(body)
}

// byHandler maps a family's series by their handler label.
func byHandler(f *dto.MetricFamily) map[string]*dto.Metric {
	m := map[string]*dto.Metric{}
	for _, s := range f.GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "actorinformer_handler_name" {
				m[l.GetValue()] = s
			}
		}
	}
	return m
}
