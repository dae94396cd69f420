package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestJaegerReceivesWholeDeltaTraces builds cmd/demo, runs it on its
// simulated cluster for a few seconds exporting OTLP over HTTP to a Jaeger v2
// all-in-one, every delta sampled, and asks Jaeger's query API for the
// demo's traces until one holds a delta's whole chain:
// reflector.receive → fifo.queue → indexer.apply → listener.deliver → handler,
// each span the CHILD_OF the one before, in one trace.
func TestJaegerReceivesWholeDeltaTraces(t *testing.T) {
	j := testcluster.StartJaeger(t)
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, "./cmd/demo")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/demo: %v\n%s", err, out)
	}

	service := fmt.Sprintf("actorinformer-e2e-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	demo := exec.CommandContext(ctx, bin, "--simulate", "--duration", "3s", "--pods", "20", "--rate", "100",
		"--handlers", "2", "--interval", "1s", "--log-level", "warn")
	demo.Env = append(environWithout("OTEL_", "KUBECONFIG"),
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.OTLPHTTPEndpoint(),
		"OTEL_SERVICE_NAME="+service,
		"OTEL_TRACES_SAMPLER=always_on",
		// Every delta of the initial list is sampled at once: room for all
		// their spans, so that none is dropped before export.
		"OTEL_BSP_MAX_QUEUE_SIZE=100000",
		"OTEL_METRICS_EXPORTER=none",
	)
	var out bytes.Buffer
	demo.Stdout, demo.Stderr = &out, &out
	if err := demo.Run(); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("demo output:\n%s", out.String())

	var found string
	j.WaitForTraces(t, service, time.Minute, func(traces []testcluster.JaegerTrace) bool {
		for _, tr := range traces {
			if found = wholeChain(tr); found != "" {
				return true
			}
		}
		return false
	})
	t.Logf("complete trace: %s", found)
}

// chainOps is a delta's path, root first; each span is the child of the
// one before.
var chainOps = []string{telemetry.SpanReflector, telemetry.SpanQueue, telemetry.SpanIndexer, telemetry.SpanListener, telemetry.SpanHandler}

// wholeChain returns a description of a handler span of tr whose ancestors
// are, in order, the rest of chainOps up to a root reflector.receive span,
// with the attributes docs/tracing.md promises; "" if there is none.
func wholeChain(tr testcluster.JaegerTrace) string {
	byID := map[string]testcluster.JaegerSpan{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	parent := func(s testcluster.JaegerSpan) (testcluster.JaegerSpan, bool) {
		for _, r := range s.References {
			if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
				p, ok := byID[r.SpanID]
				return p, ok
			}
		}
		return testcluster.JaegerSpan{}, false
	}
next:
	for _, s := range tr.Spans {
		if s.OperationName != telemetry.SpanHandler {
			continue
		}
		path := []testcluster.JaegerSpan{s}
		cur := s
		for i := len(chainOps) - 2; i >= 0; i-- {
			p, ok := parent(cur)
			if !ok || p.OperationName != chainOps[i] || p.TraceID != tr.TraceID {
				continue next
			}
			path = append(path, p)
			cur = p
		}
		if _, ok := parent(cur); ok {
			continue // the reflector span must be the root
		}
		for _, check := range []struct {
			span testcluster.JaegerSpan
			tags []string
		}{
			{cur, []string{string(telemetry.AttrDeltaType), string(telemetry.AttrNamespace), string(telemetry.AttrObjectName),
				string(telemetry.AttrObjectUID), string(telemetry.AttrResourceVersion), string(telemetry.AttrInformer)}},
			{path[1], []string{string(telemetry.AttrHandler)}},
			{s, []string{string(telemetry.AttrHandler), string(telemetry.AttrNotification)}},
		} {
			for _, tag := range check.tags {
				if _, ok := check.span.Tag(tag); !ok {
					continue next
				}
			}
		}
		var b strings.Builder
		for i := len(path) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "%s(%s) ", path[i].OperationName, path[i].SpanID)
		}
		obj, _ := cur.Tag(string(telemetry.AttrObjectName))
		typ, _ := cur.Tag(string(telemetry.AttrDeltaType))
		return fmt.Sprintf("trace %s, %v of %v: %s", tr.TraceID, typ, obj, strings.TrimSpace(b.String()))
	}
	return ""
}

// environWithout returns the environment minus the variables starting
// with any of prefixes.
func environWithout(prefixes ...string) []string {
	var env []string
outer:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue outer
			}
		}
		env = append(env, kv)
	}
	return env
}

// TestWholeChainChecker: the trace check above accepts a whole chain and
// rejects a chain with a hop missing, a wrong parent or a missing tag.
func TestWholeChainChecker(t *testing.T) {
	span := func(id, op, parent string, tags ...string) testcluster.JaegerSpan {
		s := testcluster.JaegerSpan{TraceID: "t", SpanID: id, OperationName: op}
		if parent != "" {
			s.References = []testcluster.JaegerReference{{RefType: "CHILD_OF", TraceID: "t", SpanID: parent}}
		}
		for _, k := range tags {
			s.Tags = append(s.Tags, testcluster.JaegerKeyValue{Key: k, Type: "string", Value: "v"})
		}
		return s
	}
	rootTags := []string{string(telemetry.AttrDeltaType), string(telemetry.AttrNamespace), string(telemetry.AttrObjectName),
		string(telemetry.AttrObjectUID), string(telemetry.AttrResourceVersion), string(telemetry.AttrInformer)}
	whole := func() []testcluster.JaegerSpan {
		return []testcluster.JaegerSpan{
			span("1", telemetry.SpanReflector, "", rootTags...),
			span("2", telemetry.SpanQueue, "1"),
			span("3", telemetry.SpanIndexer, "2"),
			span("4", telemetry.SpanListener, "3", string(telemetry.AttrHandler)),
			span("5", telemetry.SpanHandler, "4", string(telemetry.AttrHandler), string(telemetry.AttrNotification)),
		}
	}
	if got := wholeChain(testcluster.JaegerTrace{TraceID: "t", Spans: whole()}); got == "" {
		t.Fatal("whole chain rejected")
	}
	for name, mutate := range map[string]func([]testcluster.JaegerSpan) []testcluster.JaegerSpan{
		"no queue span":    func(s []testcluster.JaegerSpan) []testcluster.JaegerSpan { return append(s[:1], s[2:]...) },
		"apply under root": func(s []testcluster.JaegerSpan) []testcluster.JaegerSpan { s[2].References[0].SpanID = "1"; return s },
		"root has a parent": func(s []testcluster.JaegerSpan) []testcluster.JaegerSpan {
			s[0] = span("1", telemetry.SpanReflector, "9", rootTags...)
			return append(s, span("9", "x", ""))
		},
		"root without uid": func(s []testcluster.JaegerSpan) []testcluster.JaegerSpan {
			s[0] = span("1", telemetry.SpanReflector, "", rootTags[:3]...)
			return s
		},
		"no handler span": func(s []testcluster.JaegerSpan) []testcluster.JaegerSpan { s[4].OperationName = "other"; return s },
	} {
		if got := wholeChain(testcluster.JaegerTrace{TraceID: "t", Spans: mutate(whole())}); got != "" {
			t.Errorf("%s: accepted: %s", name, got)
		}
	}
}
