package main

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// promMetrics is the source of the demo's /metrics endpoint: an
// OpenTelemetry reader (the OTel Prometheus exporter) on the demo's
// MeterProvider, registered with a registry of its own, not Prometheus's
// global one. It is a pull reader: the meters are read only when /metrics
// is scraped.
type promMetrics struct {
	registry *prometheus.Registry
	reader   sdkmetric.Reader
}

// newPromMetrics creates the exporter; its reader goes to the
// MeterProvider (setupTelemetry's readers), its registry to
// metricsHandler.
func newPromMetrics() (*promMetrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return &promMetrics{registry: reg, reader: exp}, nil
}

// metricsHandler serves the registry's metrics in the Prometheus text
// format (or OpenMetrics when the scraper asks for it): the handler to
// mount at /metrics. A metric that fails to be gathered is left out and
// the others are still served.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// metricsReaders returns the /metrics endpoint's exporter and the readers
// to add to the MeterProvider for it: none when the web server is off
// (cfg.http "") or /metrics is (cfg.noMetrics), so that the pipeline then
// records no metrics at all unless OTEL_METRICS_EXPORTER asks for them.
func metricsReaders(cfg config) (*promMetrics, []sdkmetric.Reader, error) {
	if cfg.http == "" || cfg.noMetrics {
		return nil, nil, nil
	}
	p, err := newPromMetrics()
	if err != nil {
		return nil, nil, err
	}
	return p, []sdkmetric.Reader{p.reader}, nil
}
