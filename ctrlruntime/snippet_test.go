package ctrlruntime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// runSecretsManager is docs/integration.md's controller-runtime snippet:
// a manager whose cache is made of actorinformer's informers, and a
// "secrets" controller whose Reconcile gets the Secrets' deltas' traces.
func runSecretsManager(ctx context.Context, cfg *rest.Config, tp trace.TracerProvider, mp metric.MeterProvider,
	secretToConfigMap handler.TypedEventHandler[*corev1.Secret, reconcile.Request], r reconcile.Reconciler) error {
	// doc:begin docs/integration.md
	informers := ctrlruntime.NewInformers(actors.WithTracerProvider(tp))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache: informers.NewCache, // the actor system stops with the cache
	})
	if err != nil {
		return err
	}
	tr := ctrlruntime.NewTracing(tp, mp) // one per controller
	err = ctrl.NewControllerManagedBy(mgr).Named("secrets").
		WatchesRawSource(ctrlruntime.Kind(tr, mgr.GetCache(), &corev1.Secret{}, secretToConfigMap)).
		WithOptions(controller.Options{NewQueue: tr.NewQueue}).
		Complete(tr.Reconciler(r))
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
	// doc:end
}

// TestIntegrationSnippet runs runSecretsManager on a real kube-apiserver:
// a Secret's creation reaches Reconcile, whose ctx carries the
// workqueue.process span linked to the delta's handler span
// "secrets/Secret.v1". The controller's name is the snippet's, and
// controller-runtime refuses a name twice in a process: run it once
// (-count=1).
func TestIntegrationSnippet(t *testing.T) {
	cfg := startCluster(t)
	defaultBind := metricsserver.DefaultBindAddress
	metricsserver.DefaultBindAddress = "0" // the snippet's manager serves no metrics here
	defer func() { metricsserver.DefaultBindAddress = defaultBind }()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	mp := sdkmetric.NewMeterProvider()

	secretToConfigMap := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *corev1.Secret) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}}}
	})
	reconciled := make(chan sdktrace.ReadOnlySpan, 16)
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if req.Name == "snippet" {
			if s, ok := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan); ok {
				reconciled <- s
			}
		}
		return reconcile.Result{}, nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mgrCtx, stopMgr := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runSecretsManager(mgrCtx, cfg, tp, mp, secretToConfigMap, r) }()

	client := kubernetes.NewForConfigOrDie(cfg)
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "snippet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The handler Kind adds may come after the informer listed the Secret:
	// that first add comes from the cache, with no delta's trace. An update
	// is a delta of the watch.
	var span sdktrace.ReadOnlySpan
	for gen := 0; span == nil || len(span.Links()) == 0; gen++ {
		select {
		case span = <-reconciled:
		case err := <-done:
			t.Fatalf("the manager ended: %v", err)
		case <-time.After(waitTimeout):
			t.Fatal("no reconcile of the Secret with a linked span")
		}
		if len(span.Links()) == 0 {
			patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, gen))
			if _, err := client.CoreV1().Secrets("default").Patch(ctx, "snippet", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if span.Name() != aiworkqueue.SpanProcess {
		t.Errorf("Reconcile's span is %q, want %s", span.Name(), aiworkqueue.SpanProcess)
	}
	// The handler span may end (and be exported) after the reconcile began.
	waitFor(t, "the linked handler span of secrets/Secret.v1", func() bool {
		for _, l := range span.Links() {
			for _, s := range exp.GetSpans() {
				if s.SpanContext.SpanID() != l.SpanContext.SpanID() || s.Name != "handler" {
					continue
				}
				for _, a := range s.Attributes {
					if a.Key == "actorinformer.handler.name" && a.Value.AsString() == "secrets/Secret.v1" {
						return true
					}
				}
			}
		}
		return false
	})
	stopMgr()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the manager: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the manager did not stop")
	}
}
