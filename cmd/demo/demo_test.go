package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/internal/telemetry"
)

// TestMain checks that the tests leave no goroutine behind: the demo's
// actors, watches, workload and exporters all stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// setOTelEnv clears the OTEL_* variables the demo and the SDK read, then
// sets kv (name, value, ...) for the test.
func setOTelEnv(t *testing.T, kv ...string) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_METRICS_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// env is a getenv over a fixed set of variables.
func env(vars ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(vars); i += 2 {
		m[vars[i]] = vars[i+1]
	}
	return func(k string) string { return m[k] }
}

// totalsRow matches a row of the final table: handler, delivered,
// undelivered, panics.
var totalsRow = regexp.MustCompile(`(?m)^  (\S+)\s+(\d+)\s+(\d+)\s+(\d+)$`)

func handlerTotals(t *testing.T, out string) map[string][3]int64 {
	t.Helper()
	_, table, ok := strings.Cut(out, "\ntotals after ")
	if !ok {
		t.Fatalf("no totals in output:\n%s", out)
	}
	rows := map[string][3]int64{}
	for _, m := range totalsRow.FindAllStringSubmatch(table, -1) {
		var r [3]int64
		for i := range r {
			r[i], _ = strconv.ParseInt(m[i+2], 10, 64)
		}
		rows[m[1]] = r
	}
	return rows
}

// TestDemoRunsBriefly runs the demo on the simulated cluster with every kind
// of handler and checks that each got events, the panicking one panicked,
// the totals and a traced delta were printed, and nothing leaked.
func TestDemoRunsBriefly(t *testing.T) {
	cfg := config{
		rate: 500, pods: 50, namespaces: 2, seed: 1,
		duration: 1500 * time.Millisecond, interval: 250 * time.Millisecond,
		handlers: 4, slowHandler: 100 * time.Microsecond, panicEvery: 7,
		logLevel: "off",
	}
	var out bytes.Buffer
	// Every delta sampled, so one is surely complete.
	setOTelEnv(t, "OTEL_TRACES_SAMPLER", "always_on")
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"cluster: simulated", "synced 50 pods", "] reflector ", "workload after the initial 50 pods"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	rows := handlerTotals(t, s)
	for _, h := range []string{"trace", "slow", "panic", "count"} {
		r, ok := rows[h]
		if !ok {
			t.Errorf("no totals for handler %s", h)
			continue
		}
		if r[0] == 0 {
			t.Errorf("handler %s: nothing delivered", h)
		}
	}
	if rows["panic"][2] == 0 {
		t.Error("the panicking handler did not panic")
	}
	// With tracing compiled out (-tags actorinformer_notrace) the library
	// makes no span, so no delta's span tree is printed.
	if !telemetry.CompiledOut {
		for _, span := range []string{"reflector.receive", "fifo.queue", "indexer.apply", "listener.deliver", "handler", userSpanName} {
			if !strings.Contains(s, " "+span+" ") {
				t.Errorf("traced delta lacks span %s", span)
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
}

// TestDemoTracingOff: OTEL_TRACES_EXPORTER=none prints no trace.
func TestDemoTracingOff(t *testing.T) {
	cfg := config{rate: 100, pods: 10, namespaces: 1, duration: 300 * time.Millisecond, interval: 100 * time.Millisecond, handlers: 1, logLevel: "off"}
	var out bytes.Buffer
	setOTelEnv(t, "OTEL_TRACES_EXPORTER", "none")
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "traces:  off") || strings.Contains(s, "reflector.receive") {
		t.Errorf("output:\n%s", s)
	}
	if r := handlerTotals(t, out.String())["trace"]; r[0] < 10 {
		t.Errorf("trace handler got %d events, want at least the 10 initial pods", r[0])
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name           string
		args           []string
		env            func(string) string
		wantKubeconfig string
		wantInCluster  bool
	}{
		{"simulated by default", nil, env(), "", false},
		{"flag", []string{"--kubeconfig", "/k"}, env("KUBECONFIG", "/env"), "/k", false},
		{"KUBECONFIG", nil, env("KUBECONFIG", "/env", "KUBERNETES_SERVICE_HOST", "10.0.0.1"), "/env", false},
		{"in a pod", nil, env("KUBERNETES_SERVICE_HOST", "10.0.0.1"), "", true},
		{"--simulate wins", []string{"--simulate"}, env("KUBECONFIG", "/env", "KUBERNETES_SERVICE_HOST", "10.0.0.1"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(tc.args, tc.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.kubeconfig != tc.wantKubeconfig || cfg.inCluster != tc.wantInCluster {
				t.Errorf("kubeconfig %q in-cluster %v, want %q %v", cfg.kubeconfig, cfg.inCluster, tc.wantKubeconfig, tc.wantInCluster)
			}
		})
	}
	if _, err := parseFlags([]string{"extra"}, env(), io.Discard); err == nil {
		t.Error("a positional argument was accepted")
	}
}
