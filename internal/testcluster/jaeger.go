package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Jaeger is a Jaeger v2 all-in-one (OpenTelemetry collector based, in-memory
// storage) started by StartJaeger. It receives OTLP over gRPC and HTTP and
// answers Jaeger's JSON query API.
type Jaeger struct {
	dir       string
	proc      *process
	otlpGRPC  string
	otlpHTTP  string
	queryHTTP string
	queryGRPC string
}

// jaegerConfig replaces Jaeger's embedded all-in-one configuration, whose
// ports (4317, 4318, 16686, 14250, 9411, 8888, ...) are fixed, with one that
// runs only what tests need on free loopback ports.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: %s
    grpc:
      endpoint: %s

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s

processors:
  batch:
    timeout: 50ms

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// StartJaeger starts Jaeger on free 127.0.0.1 ports in a temp working
// directory, waits until its query API answers /api/services and its OTLP
// ports accept connections (timeout DefaultReadyTimeout), and registers a
// t.Cleanup that kills it. It skips the test when the jaeger binary is
// missing (fails it when $ACTORINFORMER_REQUIRE_CLUSTER is set).
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin, err := binPath(JaegerBinary)
	if err != nil {
		skipOrFatal(t, err)
	}
	j := &Jaeger{dir: t.TempDir()}
	t.Cleanup(func() {
		if j.proc != nil {
			j.proc.kill()
		}
	})
	// Jaeger's embedded all-in-one configuration reads this file relative to
	// the working directory. The configuration below does not use it, but the
	// file costs nothing and keeps the directory usable with the default one.
	sdir := filepath.Join(j.dir, "cmd", "jaeger")
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	if err := os.WriteFile(filepath.Join(sdir, "sampling-strategies.json"),
		[]byte(`{"default_strategy":{"type":"probabilistic","param":1}}`+"\n"), 0o644); err != nil {
		t.Fatalf("testcluster: %v", err)
	}

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(4)
		if err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		j.otlpGRPC, j.otlpHTTP = hostPort(ports[0]), hostPort(ports[1])
		j.queryHTTP, j.queryGRPC = hostPort(ports[2]), hostPort(ports[3])
		cfgPath := filepath.Join(j.dir, "config.yaml")
		cfg := fmt.Sprintf(jaegerConfig, j.queryHTTP, j.queryGRPC, j.otlpGRPC, j.otlpHTTP)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		p, err := startProcess("jaeger", bin, []string{"--config", cfgPath}, j.dir, filepath.Join(j.dir, "jaeger.log"))
		if err != nil {
			t.Fatalf("testcluster: %v", err)
		}
		j.proc = p
		lastErr = waitProcessReady(p, DefaultReadyTimeout, j.checkReady)
		if lastErr == nil {
			return j
		}
		p.kill()
		if !portInUse(p.logTail(logTailLines)) {
			break
		}
	}
	t.Fatalf("testcluster: %v", lastErr)
	return nil
}

func (j *Jaeger) checkReady(ctx context.Context) error {
	if _, err := httpGet(ctx, nil, j.QueryURL()+"/api/services", ""); err != nil {
		return err
	}
	// Receivers start after the extensions: wait for the OTLP ports too.
	for _, addr := range []string{j.otlpHTTP, j.otlpGRPC} {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		c.Close()
	}
	return nil
}

// OTLPHTTPEndpoint returns the OTLP/HTTP receiver's host:port (plain HTTP),
// the form otlptracehttp.WithEndpoint takes (with WithInsecure).
func (j *Jaeger) OTLPHTTPEndpoint() string { return j.otlpHTTP }

// OTLPGRPCEndpoint returns the OTLP/gRPC receiver's host:port (plaintext),
// the form otlptracegrpc.WithEndpoint takes (with WithInsecure).
func (j *Jaeger) OTLPGRPCEndpoint() string { return j.otlpGRPC }

// QueryURL returns the base URL of the query API, http://127.0.0.1:PORT
// (GET /api/services, /api/traces?service=NAME, /api/traces/TRACEID).
func (j *Jaeger) QueryURL() string { return "http://" + j.queryHTTP }

// Log returns the last n lines of Jaeger's log.
func (j *Jaeger) Log(n int) string { return j.proc.logTail(n) }

// JaegerTrace is one trace as Jaeger's JSON query API returns it.
type JaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []JaegerSpan             `json:"spans"`
	Processes map[string]JaegerProcess `json:"processes"`
}

// JaegerSpan is one span of a JaegerTrace. Times are in microseconds.
type JaegerSpan struct {
	TraceID       string            `json:"traceID"`
	SpanID        string            `json:"spanID"`
	OperationName string            `json:"operationName"`
	References    []JaegerReference `json:"references"`
	StartTime     int64             `json:"startTime"`
	Duration      int64             `json:"duration"`
	Tags          []JaegerKeyValue  `json:"tags"`
	ProcessID     string            `json:"processID"`
}

// JaegerReference links a span to its parent (refType CHILD_OF) or to a
// linked span (FOLLOWS_FROM).
type JaegerReference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// JaegerKeyValue is a span or process tag.
type JaegerKeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// JaegerProcess is the service that emitted spans.
type JaegerProcess struct {
	ServiceName string           `json:"serviceName"`
	Tags        []JaegerKeyValue `json:"tags"`
}

// Tag returns the value of the span tag key and whether it is there.
func (s JaegerSpan) Tag(key string) (any, bool) {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Services returns the service names Jaeger has seen.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var resp struct {
		Data []string `json:"data"`
	}
	if err := j.getJSON(ctx, "/api/services", &resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// Traces returns the traces of service (at most 1000, from the last hour).
func (j *Jaeger) Traces(ctx context.Context, service string) ([]JaegerTrace, error) {
	q := url.Values{}
	q.Set("service", service)
	q.Set("limit", "1000")
	q.Set("lookback", "1h")
	var resp struct {
		Data []JaegerTrace `json:"data"`
	}
	if err := j.getJSON(ctx, "/api/traces?"+q.Encode(), &resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// WaitForTraces polls Traces until done returns true for the result or the
// timeout passes, then fails the test with the last result. It returns the
// traces that satisfied done.
func (j *Jaeger) WaitForTraces(t testing.TB, service string, timeout time.Duration, done func([]JaegerTrace) bool) []JaegerTrace {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var (
		last    []JaegerTrace
		lastErr error
	)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last, lastErr = j.Traces(ctx, service)
		cancel()
		if lastErr == nil && done(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("testcluster: traces of service %q not as expected after %v (err=%v, %d traces: %s)",
				service, timeout, lastErr, len(last), summarizeTraces(last))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func summarizeTraces(ts []JaegerTrace) string {
	s := ""
	for _, tr := range ts {
		s += "[" + tr.TraceID + ":"
		for _, sp := range tr.Spans {
			s += " " + sp.OperationName
		}
		s += "]"
	}
	return s
}

func (j *Jaeger) getJSON(ctx context.Context, path string, out any) error {
	body, err := httpGet(ctx, nil, j.QueryURL()+path, "")
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		return fmt.Errorf("decode %s: %w (body %.200s)", path, err, strconv.Quote(body))
	}
	return nil
}
