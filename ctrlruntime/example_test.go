package ctrlruntime_test

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
)

// A manager whose cache is made of actorinformer's informers, and a
// controller whose Reconcile gets the traces of the Secrets' deltas
// (docs/integration.md). It is compiled, not run: it needs a cluster.
func Example_manager() {
	var tp trace.TracerProvider // e.g. an OpenTelemetry SDK TracerProvider
	ctx := ctrl.SetupSignalHandler()

	informers := ctrlruntime.NewInformers(actors.WithTracerProvider(tp))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		NewCache: informers.NewCache, // the actor system stops with the cache
	})
	if err != nil {
		panic(err)
	}

	tr := ctrlruntime.NewTracing(tp, nil)
	secretToConfigMap := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, s *corev1.Secret) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}}}
	})
	err = ctrl.NewControllerManagedBy(mgr).Named("secrets").
		WatchesRawSource(ctrlruntime.Kind(tr, mgr.GetCache(), &corev1.Secret{}, secretToConfigMap)).
		WithOptions(controller.Options{NewQueue: tr.NewQueue}).
		Complete(tr.Reconciler(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			// trace.SpanFromContext(ctx) is the workqueue.process span,
			// linked to the handler spans of the Secrets' deltas.
			var cm corev1.ConfigMap
			err := mgr.GetClient().Get(ctx, req.NamespacedName, &cm) // from actorinformer's cache
			return reconcile.Result{}, client.IgnoreNotFound(err)
		})))
	if err != nil {
		panic(err)
	}
	if err := mgr.Start(ctx); err != nil {
		panic(err)
	}
}

// The simple form: only cache.Options.NewInformer. Each informer runs its
// own actor system.
func ExampleNewInformer() {
	var tp trace.TracerProvider
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Cache: cache.Options{
			NewInformer: ctrlruntime.NewInformer(actors.WithTracerProvider(tp)),
		},
	})
	if err != nil {
		panic(err)
	}
	_ = mgr
}
