package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/testcluster"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// TestDemoWatchesARealCluster runs the demo against a kube-apiserver through
// a kubeconfig file, with pods created before and during the run.
func TestDemoWatchesARealCluster(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	kubeconfig := writeKubeconfig(t, c)
	client := kubernetes.NewForConfigOrDie(c.Config())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createPod := func(ctx context.Context, name string) error {
		_, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}, metav1.CreateOptions{})
		return err
	}
	const before, during = 10, 10
	for i := range before {
		if err := createPod(ctx, fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	created := make(chan error, 1)
	go func() {
		defer close(created)
		time.Sleep(500 * time.Millisecond) // usually after the initial list; either way the pods arrive
		for i := range during {
			if err := createPod(ctx, fmt.Sprintf("during-%d", i)); err != nil {
				created <- err
				return
			}
		}
	}()

	setOTelEnv(t)
	cfg := config{kubeconfig: kubeconfig, duration: 2500 * time.Millisecond, interval: 500 * time.Millisecond, handlers: 2, workers: 1, logLevel: "off"}
	var out bytes.Buffer
	if err := run(ctx, cfg, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "cluster: kubeconfig "+kubeconfig) {
		t.Errorf("output does not name the kubeconfig:\n%s", s)
	}
	for _, h := range []string{"controller", "count"} {
		if r := handlerTotals(t, s)[h]; r[0] != before+during {
			t.Errorf("handler %s got %d events, want %d\n%s", h, r[0], before+during, s)
		}
	}
	// Every pod has a key of its own: at least one reconcile each.
	if n := reconciles(t, s); n < before+during {
		t.Errorf("%d reconciles, want at least %d\n%s", n, before+during, s)
	}
}

// writeKubeconfig writes a kubeconfig file for c in the test's temporary
// directory and returns its path.
func writeKubeconfig(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host(), InsecureSkipTLSVerify: true}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.AdminToken()}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestDemoExportsToJaeger runs the demo with OTEL_TRACES_EXPORTER=otlp and
// finds, in Jaeger, under the default service name, the controller's
// demo.reconcile span under a workqueue.process span that links
// (FOLLOWS_FROM) to the handler span of a delta's trace, from
// reflector.receive.
func TestDemoExportsToJaeger(t *testing.T) {
	informertest.NeedsTracing(t)
	j := testcluster.StartJaeger(t)
	setOTelEnv(t,
		"OTEL_TRACES_EXPORTER", "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+j.OTLPHTTPEndpoint(),
		"OTEL_TRACES_SAMPLER", "traceidratio",
		"OTEL_TRACES_SAMPLER_ARG", "0.5")
	cfg := config{rate: 100, pods: 20, namespaces: 2, duration: time.Second, interval: 500 * time.Millisecond, handlers: 2, workers: 1, logLevel: "off"}
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "traces:  OTEL_TRACES_EXPORTER=otlp, OTEL_TRACES_SAMPLER=traceidratio") {
		t.Errorf("banner:\n%s", out.String())
	}
	j.WaitForTraces(t, defaultServiceName, 30*time.Second, func(traces []testcluster.JaegerTrace) bool {
		byID := map[string]testcluster.JaegerTrace{}
		for _, tr := range traces {
			byID[tr.TraceID] = tr
		}
		for _, tr := range traces {
			for _, s := range tr.Spans {
				if s.OperationName != userSpanName {
					continue
				}
				for _, ref := range s.References {
					if ref.RefType != "CHILD_OF" {
						continue
					}
					if parent, ok := spanOf(tr, ref.SpanID); ok && parent.OperationName == aiworkqueue.SpanProcess && linksToDelta(parent, byID) {
						return true
					}
				}
			}
		}
		return false
	})
}

// linksToDelta reports whether s has a FOLLOWS_FROM reference to a handler
// span of another trace of traces that holds reflector.receive.
func linksToDelta(s testcluster.JaegerSpan, traces map[string]testcluster.JaegerTrace) bool {
	for _, ref := range s.References {
		if ref.RefType != "FOLLOWS_FROM" || ref.TraceID == s.TraceID {
			continue
		}
		delta, ok := traces[ref.TraceID]
		if !ok {
			continue
		}
		if h, ok := spanOf(delta, ref.SpanID); ok && h.OperationName == "handler" && hasOperation(delta, "reflector.receive") {
			return true
		}
	}
	return false
}

func spanOf(tr testcluster.JaegerTrace, spanID string) (testcluster.JaegerSpan, bool) {
	for _, s := range tr.Spans {
		if s.SpanID == spanID {
			return s, true
		}
	}
	return testcluster.JaegerSpan{}, false
}

func hasOperation(tr testcluster.JaegerTrace, op string) bool {
	for _, s := range tr.Spans {
		if s.OperationName == op {
			return true
		}
	}
	return false
}
