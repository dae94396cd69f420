package ctrlruntime_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
)

// TestManagerNamespacesMetadata runs our informers in a cache limited to two
// namespaces (one informer per namespace and kind) with a metadata-only
// controller and a ctrlruntime.Kind source, which falls back to a plain
// handler there (the cache's informer is a wrapper). It checks that both
// reconcile in both namespaces, the names of the informers (in their
// spans), and that the manager leaves nothing running.
func TestManagerNamespacesMetadata(t *testing.T) {
	cfg := startCluster(t)
	leaks := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	nss := []string{"ctrlruntime-ns1", "ctrlruntime-ns2"}
	for _, ns := range nss {
		if err := direct.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	informers := ctrlruntime.NewInformers(actors.WithTracerProvider(tp))
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Controller names are unique per process: let -count=N rerun.
		Controller: config.Controller{SkipNameValidation: &skipNameValidation},
		NewCache:   informers.NewCache,
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{nss[0]: {}, nss[1]: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var metaSeen, secretSeen []string
	metaTracing := ctrlruntime.NewTracing(tp, nil)
	err = builder.ControllerManagedBy(mgr).Named("configmap-metadata").
		For(&corev1.ConfigMap{}, builder.OnlyMetadata).
		WithOptions(controller.Options{NewQueue: metaTracing.NewQueue}).
		Complete(metaTracing.Reconciler(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, m); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			mu.Lock()
			metaSeen = append(metaSeen, req.String())
			mu.Unlock()
			return reconcile.Result{}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	secretTracing := ctrlruntime.NewTracing(tp, nil)
	toSelf := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *corev1.Secret) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}}}
	})
	err = builder.ControllerManagedBy(mgr).Named("secrets-namespaced").
		WatchesRawSource(ctrlruntime.Kind(secretTracing, mgr.GetCache(), &corev1.Secret{}, toSelf)).
		WithOptions(controller.Options{NewQueue: secretTracing.NewQueue}).
		Complete(secretTracing.Reconciler(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			mu.Lock()
			secretSeen = append(secretSeen, req.String())
			mu.Unlock()
			return reconcile.Result{}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}

	stop := startManager(t, ctx, mgr)
	defer stop()

	for _, ns := range nss {
		if err := direct.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}}); err != nil {
			t.Fatal(err)
		}
		if err := direct.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both controllers to reconcile in both namespaces", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ns := range nss {
			if !slices.Contains(metaSeen, ns+"/c") || !slices.Contains(secretSeen, ns+"/s") {
				return false
			}
		}
		return true
	})

	stop()
	if !informers.ActorSystem().IsStopped() {
		t.Error("the informers' actor system is still running after the manager stopped")
	}
	if tracingCompiled {
		names := map[string]bool{}
		for _, s := range exp.GetSpans() {
			if v := attr(s.Attributes, "actorinformer.informer.name"); v != "" {
				names[v] = true
			}
		}
		// One informer per namespace: which namespace gets "#2" depends on
		// the order controller-runtime creates them in.
		for _, want := range []string{"ConfigMap.v1/metadata", "ConfigMap.v1/metadata#2", "Secret.v1", "Secret.v1#2"} {
			if !names[want] {
				t.Errorf("no span of informer %q; informers in spans: %v", want, names)
			}
		}
	}
	for _, ns := range nss {
		if err := direct.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Errorf("deleting namespace: %v", err)
		}
	}
	// controller-runtime's metadata watches go through apimachinery's
	// watch.Filter, whose goroutine blocks for ever sending an event that
	// came in as the informer stopped reading (filter.go's loop has no stop
	// case). client-go's informer leaves it behind the same way (checked
	// by running this test without NewCache), so it is not ours.
	filterLoop := goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop")
	if err := goleak.Find(leakOptions(leaks, filterLoop)...); err != nil {
		t.Errorf("goroutines left after the manager stopped: %v", err)
	}
}
