// Command sharded-controller is a controller-runtime controller sharded
// over the pods of a Deployment (deploy/) with ctrlruntime.Sharded: for
// each Bundle (deploy/crd.yaml, example.actorinformer.io/v1alpha1) it
// makes and updates a ConfigMap of the same name, owned by the Bundle,
// that carries its spec.data. Every replica is a member of one shard group
// (found through protoactor's k8s provider), whose ranges split the
// namespaces: a replica caches the Bundles and ConfigMaps of the
// namespaces of the ranges it delivers, and reconciles only those. No
// leader election.
//
// Its difference from the same controller in one process with leader
// election is 10 lines of main.go (docs/integration.md, "A sharded
// controller", shows them; TestOneProcessDiff checks them), beside
// member.go, the cluster member and its shard group, which the
// one-process controller does not have.
//
// -probe-address serves the manager's /healthz and /readyz (package
// shard's checks: see sharded.ready in member.go), -metrics-address its /metrics
// (controller-runtime's metrics, the member's and the workqueue's:
// deploy/hpa.yaml scales the Deployment on the queue's oldest key's age)
// and the member's Status as JSON (/status). SIGTERM stops the manager:
// the member leaves the group gracefully (the other replicas list and take
// its ranges before it stops delivering them), after its running
// reconciles returned.
//
// In a pod it needs (deploy/deployment.yaml): its service account's token
// and namespace (the k8s provider reads them, with the in-cluster
// configuration), POD_IP (the address the other replicas reach it at),
// RBAC (deploy/rbac.yaml) and the CRD.
//
// Outside a pod, give it a kubeconfig and an etcd for the members to find
// each other in (protoactor's etcd provider), and run it once per member:
//
//	sharded-controller -kubeconfig ~/.kube/config -provider etcd -etcd http://127.0.0.1:2379 \
//	  -namespace default -remote-bind 127.0.0.1 -remote-port 0 -probe-address 127.0.0.1:0 -metrics-address 127.0.0.1:0
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/actorinformer/actorinformer/ctrlruntime"
)

// queueName names the controller and its workqueue: the label
// actorinformer_workqueue_name of the queue's metrics (deploy/hpa.yaml).
const queueName = "bundles"

type config struct {
	namespace      string
	probeAddress   string
	metricsAddress string
	workers        int
	reconcileDelay time.Duration
}

func main() {
	klog.InitFlags(nil)
	var cfg config
	// -kubeconfig is controller-runtime's flag (ctrl.GetConfig): the
	// API server's kubeconfig, by default $KUBECONFIG, else in a pod the
	// in-cluster configuration, else ~/.kube/config.
	flag.StringVar(&cfg.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the namespace of the controller's Leases (default $POD_NAMESPACE); Bundles are reconciled in every namespace")
	flag.StringVar(&cfg.probeAddress, "probe-address", ":8081", "the address of /healthz and /readyz")
	flag.StringVar(&cfg.metricsAddress, "metrics-address", ":8080", "the address of /metrics and /status")
	flag.IntVar(&cfg.workers, "workers", 2, "concurrent reconciles")
	flag.DurationVar(&cfg.reconcileDelay, "reconcile-delay", 0, "how long each reconcile waits before it writes (a slower reconcile, for tests)")
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		klog.ErrorS(err, "sharded-controller")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, cfg config) error {
	if cfg.namespace == "" {
		return errors.New("-namespace (or $POD_NAMESPACE) is needed: see deploy/deployment.yaml")
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	// actorinformer's metrics (the workqueue's oldest key's age, which
	// deploy/hpa.yaml scales on; the shard member's), in
	// controller-runtime's registry: the manager's /metrics.
	exporter, err := otelprom.New(otelprom.WithRegisterer(ctrlmetrics.Registry))
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = meters.Shutdown(context.Background()) }()

	// The manager's grace period: more than a graceful leave (30 s at most).
	grace := 50 * time.Second
	sharded := newSharded(ctx, cfg, meters) // member.go: the cluster member, made and stopped by the manager's cache
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{NewCache: sharded.NewCache, Metrics: metricsserver.Options{BindAddress: cfg.metricsAddress, ExtraHandlers: sharded.status()},
		Scheme: scheme, HealthProbeBindAddress: cfg.probeAddress, GracefulShutdownTimeout: &grace})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("shard", sharded.CheckLive); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("shard", sharded.ready); err != nil {
		return err
	}
	r := &reconciler{client: mgr.GetClient(), scheme: scheme, delay: cfg.reconcileDelay}
	queue := ctrlruntime.NewTracing(nil, meters) // client-go's queue with actorinformer's metrics (no traces)
	err = ctrl.NewControllerManagedBy(mgr).Named(queueName).For(&Bundle{}).Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: cfg.workers, NewQueue: queue.NewQueue}).
		Complete(sharded.Reconciler(r))
	if err != nil {
		return err
	}
	klog.InfoS("sharded-controller started")
	// Until SIGTERM: then the manager stops, and its cache's shard group
	// leaves gracefully once the reconciles running have returned.
	return mgr.Start(ctx)
}

// reconciler makes and updates each Bundle's ConfigMap. It logs each
// reconcile's start and end (klog -v=2) with the wall clock in
// nanoseconds: the tests check from them that no two replicas reconcile
// one Bundle at once.
type reconciler struct {
	client client.Client
	scheme *runtime.Scheme
	delay  time.Duration
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.String()
	klog.V(2).InfoS("reconcile start", "key", key, "at", time.Now().UnixNano())
	defer func() { klog.V(2).InfoS("reconcile end", "key", key, "at", time.Now().UnixNano()) }()
	var b Bundle
	if err := r.client.Get(ctx, req.NamespacedName, &b); err != nil {
		if ctx.Err() != nil {
			return ctrl.Result{}, nil // stopping: as below
		}
		return ctrl.Result{}, client.IgnoreNotFound(err) // deleted: its ConfigMap goes with it (ownerReference)
	}
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Name}}
	op, err := controllerutil.CreateOrUpdate(ctx, r.client, cm, func() error {
		cm.Data = b.Spec.Data
		return controllerutil.SetControllerReference(&b, cm, r.scheme)
	})
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// The cache had not seen the ConfigMap's last write yet: again
		// once it has.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err != nil && ctx.Err() != nil {
		// The manager stops (this replica leaves): the range's next
		// owner lists it and reconciles every Bundle of it.
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	klog.V(2).InfoS("reconciled", "key", key, "operation", op, "bundleVersion", b.ResourceVersion)
	return ctrl.Result{}, nil
}
