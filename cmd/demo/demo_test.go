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
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestMain checks that the tests leave no goroutine behind: the demo's
// actors, watches, workload and exporters all stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options(clusterGoroutines...)...) }

// clusterGoroutines are the goroutines that protoactor's cluster leaves
// behind in the tests that run a sharded group (members_test.go adds
// them).
var clusterGoroutines []goleak.Option

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

// reconcilesLine matches the controller's totals line.
var reconcilesLine = regexp.MustCompile(`(?m)^controller: (\d+) reconciles by (\d+) worker`)

func reconciles(t *testing.T, out string) int64 {
	t.Helper()
	m := reconcilesLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no controller totals in output:\n%s", out)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// traceHeader matches the line before the span tree printed at exit with a
// controller: the delta's trace ID and its processing's.
var traceHeader = regexp.MustCompile(`one traced delta, from the watch to every handler \(trace ([0-9a-f]{32})\),\nthen the controller's processing of its key \(trace ([0-9a-f]{32}), linked from the controller's handler span\):\n`)

// checkControllerTree checks the span tree printed at exit: a delta's trace
// from reflector.receive to the controller's handler span, then the root
// workqueue.process span of another trace, linked to that handler span, with
// demo.reconcile under it.
func checkControllerTree(t *testing.T, out string) {
	t.Helper()
	m := traceHeader.FindStringSubmatchIndex(out)
	if m == nil {
		t.Errorf("no delta with its processing printed")
		return
	}
	deltaID, processID := out[m[2]:m[3]], out[m[4]:m[5]]
	if deltaID == processID {
		t.Errorf("the processing is in the delta's trace %s", deltaID)
	}
	tree := strings.Split(strings.TrimSuffix(out[m[1]:], "\n"), "\n")
	// The delta: each stage once, in order, then the controller's handler.
	next := 0
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`^  reflector\.receive\s+\+`),
		regexp.MustCompile(`^  └─ fifo\.queue\s+\+`),
		regexp.MustCompile(`^     └─ indexer\.apply\s+\+`),
		regexp.MustCompile(`^        [├└]─ listener\.deliver\s+\+.*\bhandler=controller$`),
		regexp.MustCompile(`^        [│ ]  └─ handler\s+\+.*\bhandler=controller$`),
		regexp.MustCompile(`^  workqueue\.process\s+\+\S+\s+\S+\s+item=\S+/\S+ adds=[1-9]`),
		regexp.MustCompile(`^  │  linked from handler handler=controller in trace ` + deltaID + `$`),
		regexp.MustCompile(`^  └─ demo\.reconcile\s+\+\S+\s+\S+\s+\S+/\S+ (exists|deleted)`),
	} {
		for next < len(tree) && !want.MatchString(tree[next]) {
			next++
		}
		if next == len(tree) {
			t.Errorf("span tree lacks a line matching %s (after the lines before)", want)
			return
		}
		next++
	}
}

// TestDemoRunsBriefly runs the demo on the simulated cluster with the
// controller and every kind of handler and checks that each got events, the
// panicking one panicked, the controller reconciled, the totals and a traced
// delta with its processing were printed, and nothing leaked.
func TestDemoRunsBriefly(t *testing.T) {
	cfg := config{
		rate: 500, pods: 50, namespaces: 2, seed: 1,
		duration: 1500 * time.Millisecond, interval: 250 * time.Millisecond,
		handlers: 4, workers: 2, slowHandler: 100 * time.Microsecond, panicEvery: 7,
		logLevel: "off",
	}
	var out bytes.Buffer
	// Every delta sampled, so one is surely complete.
	setOTelEnv(t, "OTEL_TRACES_SAMPLER", "always_on")
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"cluster: simulated", "synced 50 pods", "] reflector ", "| workqueue depth ", "workload after the initial 50 pods"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	rows := handlerTotals(t, s)
	for _, h := range []string{"controller", "slow", "panic", "count"} {
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
	// Keys added while queued merge: at least one reconcile, at most one
	// per event.
	if n := reconciles(t, s); n == 0 || n > rows["controller"][0] {
		t.Errorf("%d reconciles for %d events", n, rows["controller"][0])
	}
	// With tracing compiled out (-tags actorinformer_notrace) the library
	// makes no span, so no delta's span tree is printed.
	if !telemetry.CompiledOut {
		checkControllerTree(t, s)
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
}

// TestDemoWithoutController: with --workers 0 the first handler is the
// tracing one, its span under the delta's handler span, and there is no
// queue.
func TestDemoWithoutController(t *testing.T) {
	cfg := config{rate: 200, pods: 10, namespaces: 1, duration: 2 * time.Second, interval: 100 * time.Millisecond, handlers: 2, logLevel: "off"}
	var out bytes.Buffer
	setOTelEnv(t, "OTEL_TRACES_SAMPLER", "always_on")
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if r := handlerTotals(t, s)["trace"]; r[0] < 10 {
		t.Errorf("trace handler got %d events, want at least the 10 initial pods", r[0])
	}
	if strings.Contains(s, "workqueue") || strings.Contains(s, "controller") {
		t.Error("a controller ran with no workers")
	}
	if !telemetry.CompiledOut {
		want := regexp.MustCompile(`(?m)^  .*└─ handler\s.*handler=trace\n.*└─ demo\.reconcile\s+\+\S+\s+\S+\s+(add|update|delete) \S+/\S+$`)
		if !want.MatchString(s) {
			t.Error("no demo.reconcile span under the tracing handler's span")
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
}

// TestDemoTracingOff: OTEL_TRACES_EXPORTER=none prints no trace; the
// controller still works.
func TestDemoTracingOff(t *testing.T) {
	cfg := config{rate: 100, pods: 10, namespaces: 1, duration: 2 * time.Second, interval: 100 * time.Millisecond, handlers: 1, workers: 1, logLevel: "off"}
	var out bytes.Buffer
	setOTelEnv(t, "OTEL_TRACES_EXPORTER", "none")
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "traces:  off") || strings.Contains(s, "reflector.receive") {
		t.Errorf("output:\n%s", s)
	}
	if r := handlerTotals(t, out.String())["controller"]; r[0] < 10 {
		t.Errorf("controller handler got %d events, want at least the 10 initial pods", r[0])
	}
	if n := reconciles(t, out.String()); n < 10 {
		t.Errorf("%d reconciles, want at least one per initial pod", n)
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
	if cfg, err := parseFlags(nil, env(), io.Discard); err != nil || cfg.workers != 1 {
		t.Errorf("default workers %d (err %v), want 1: the controller by default", cfg.workers, err)
	}
	if _, err := parseFlags([]string{"--workers", "-1"}, env(), io.Discard); err == nil {
		t.Error("--workers -1 was accepted")
	}
	// One informer unless --members says otherwise.
	if cfg, err := parseFlags(nil, env(), io.Discard); err != nil || cfg.members != 1 || cfg.ranges != 16 || cfg.memberTTL != 3*time.Second {
		t.Errorf("defaults: members %d, ranges %d, member TTL %s (err %v); want 1, 16, 3s", cfg.members, cfg.ranges, cfg.memberTTL, err)
	}
	if cfg, err := parseFlags([]string{"--members", "3", "--ranges", "24", "--member-ttl", "1s", "--fault", "kill=m2@20s"}, env(), io.Discard); err != nil ||
		cfg.members != 3 || cfg.ranges != 24 || cfg.memberTTL != time.Second || len(cfg.faults) != 1 {
		t.Errorf("--members 3 --ranges 24 --member-ttl 1s --fault kill=m2@20s: %+v, %v", cfg, err)
	}
	for _, args := range [][]string{
		{"--members", "0"}, {"--members", "9"}, {"--members", "3", "--ranges", "0"}, {"--members", "3", "--ranges", "2000"},
		{"--members", "3", "--member-ttl", "-1s"}, {"--members", "3", "--compare"}, {"--fault", "kill"}, {"--members", "1", "--fault", "add"},
	} {
		if _, err := parseFlags(args, env(), io.Discard); err == nil {
			t.Errorf("%q was accepted", args)
		}
	}
}
