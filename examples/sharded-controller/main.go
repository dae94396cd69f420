// Command sharded-controller is a small controller sharded over the pods
// of a Deployment (deploy/): every replica is a member of one shard group,
// found through protoactor's k8s provider, and caches and reconciles only
// the ConfigMaps of its namespace whose ranges it owns.
//
// Each replica runs the informer of package shard on ConfigMaps, a
// workqueue fed by its handler, and workers that reconcile the keys
// (here: log them at klog -v=2) and drop those of ranges that moved to
// another replica (Released). -probe-address serves the pod's probes,
// /healthz and /readyz (probeHandler), the member's and the workqueue's
// metrics in the Prometheus format (/metrics; deploy/hpa.yaml scales the
// Deployment on the queue's oldest key's age) and its Status as JSON
// (/status). SIGTERM
// leaves the group gracefully: the other replicas list and take its ranges
// before it stops delivering them.
//
// In a pod it needs (deploy/deployment.yaml): its service account's token
// and namespace (the k8s provider reads them, with the in-cluster
// configuration), POD_IP (the address the other replicas reach it at:
// protoactor's remote listens on every interface, so it must be told which
// address to give its actors), and RBAC: deploy/rbac.yaml.
//
// Outside a pod, give it a kubeconfig and an etcd for the members to find
// each other in (protoactor's etcd provider), and run it once per member:
//
//	sharded-controller -kubeconfig ~/.kube/config -provider etcd -etcd http://127.0.0.1:2379 \
//	  -namespace default -remote-bind 127.0.0.1 -remote-port 0 -probe-address 127.0.0.1:0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/etcdcheck"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

type config struct {
	kubeconfig   string
	provider     string
	etcd         string
	namespace    string
	group        string
	memberName   string
	ranges       int
	podIP        string
	remoteBind   string
	remotePort   int
	probeAddress string
	workers      int
}

// restConfig is the kubeconfig's, or in a pod the in-cluster one.
func (cfg config) restConfig() (*rest.Config, error) {
	if cfg.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	}
	return rest.InClusterConfig()
}

func main() {
	klog.InitFlags(nil)
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "the API server's kubeconfig (default: the pod's in-cluster configuration)")
	flag.StringVar(&cfg.provider, "provider", "k8s", "how the members find each other: k8s (protoactor's Kubernetes provider, in pods) or etcd")
	flag.StringVar(&cfg.etcd, "etcd", "http://127.0.0.1:2379", "with -provider etcd: the etcd the members find each other in")
	flag.StringVar(&cfg.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the namespace whose ConfigMaps are reconciled (default $POD_NAMESPACE)")
	flag.StringVar(&cfg.group, "group", "configmaps", "the shard group: every replica of the controller gives the same")
	flag.StringVar(&cfg.memberName, "member-name", "", "the member's name, in its ids, logs and metrics (default: the host's, in a pod the pod's)")
	flag.IntVar(&cfg.ranges, "ranges", 24, "ranges the ConfigMaps' UID hash is split into: the same on every replica")
	flag.StringVar(&cfg.podIP, "pod-ip", os.Getenv("POD_IP"), "the pod's IP, where the other replicas reach this one (default $POD_IP; \"\": -remote-bind's)")
	flag.StringVar(&cfg.remoteBind, "remote-bind", "0.0.0.0", "the address protoactor's remote listens on")
	flag.IntVar(&cfg.remotePort, "remote-port", 8090, "the port protoactor's remote listens on")
	flag.StringVar(&cfg.probeAddress, "probe-address", ":8081", "the address of /healthz and /readyz")
	flag.IntVar(&cfg.workers, "workers", 2, "workers reconciling keys")
	flag.Parse()
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
	restConfig, err := cfg.restConfig()
	if err != nil {
		return err
	}
	// Each range has an informer: at a start, one list and one watch
	// each. client-go's default, 5 requests a second, would hold a
	// replica's start up by seconds.
	restConfig.QPS, restConfig.Burst = 50, 100
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	// The leases and range records have a client of their own (its own
	// rate limiter): no burst of the ranges' lists holds a renewal up.
	leaseClient, err := kubernetes.NewForConfig(rest.CopyConfig(restConfig))
	if err != nil {
		return err
	}

	// The cluster member: protoactor's k8s provider finds the other
	// replicas by the labels it puts on their pods, the etcd provider by
	// their keys. A member fenced after the provider dropped it rejoins on
	// a new one (shard.WithRejoin).
	newCluster := func(ctx context.Context) (*cluster.Cluster, error) {
		var provider cluster.ClusterProvider
		var err error
		switch cfg.provider {
		case "k8s":
			if provider, err = k8s.NewWithConfig(restConfig); err != nil {
				return nil, err
			}
		case "etcd":
			etcdCfg := clientv3.Config{Endpoints: []string{cfg.etcd}, DialTimeout: 5 * time.Second,
				DialOptions: shard.WindowDialOptions(), Logger: shard.EtcdLogger(nil)}
			// The provider waits for ever, silently, for an etcd it
			// cannot reach.
			if err := etcdcheck.Check(ctx, etcdCfg); err != nil {
				return nil, err
			}
			if provider, err = etcd.NewWithConfig("/sharded-controller", etcdCfg, etcd.WithKeepAliveTTL(3*time.Second)); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("-provider %q: want k8s or etcd", cfg.provider)
		}
		opts := []remote.ConfigOption{remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096)}
		if cfg.podIP != "" {
			// The address in this member's actor addresses, which the
			// provider gives the others (the pod's IP).
			opts = append(opts, remote.WithAdvertisedHost(net.JoinHostPort(cfg.podIP, strconv.Itoa(cfg.remotePort))))
		}
		c := cluster.New(actors.NewActorSystem(), cluster.Configure("sharded-controller", provider, disthash.New(),
			remote.Configure(cfg.remoteBind, cfg.remotePort, append(opts, shard.RemoteOption())...),
			shard.ClusterOptions()...))
		if err := shard.StartMember(ctx, c); err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := newCluster(ctx)
	if err != nil {
		return err
	}
	// The provider first (it takes the member's labels off its pod: the
	// others stop counting it at once), then the rest, without the 2 s
	// that cluster.Shutdown(true) waits for grains (a shard member has
	// none) and its graceful remote stop (which waits for connection
	// retries to a peer that died). After a rejoin, the cluster member in
	// use is the one newCluster made last (inf.Cluster()).
	shutdown := func(c *cluster.Cluster) {
		_ = c.Config.ClusterProvider.Shutdown(true)
		c.Shutdown(false)
	}

	configMaps := client.CoreV1().ConfigMaps(cfg.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return configMaps.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return configMaps.Watch(ctx, o)
		},
	}
	// The member's metrics, served at /metrics.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		shutdown(c)
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = meters.Shutdown(context.Background()) }()
	opts := []shard.Option{shard.WithRanges(cfg.ranges),
		// Each replica's Lease in its namespace fences it.
		shard.WithLeases(leaseClient.CoordinationV1(), cfg.namespace),
		// What of that, and of the ConfigMaps' list and watch, RBAC
		// refuses: logged, and said by CheckSynced and /status.
		shard.WithAccessCheck(client.AuthorizationV1(), schema.GroupResource{Resource: "configmaps"}, cfg.namespace),
		shard.WithInformerOptions(actors.WithMeterProvider(meters)),
		shard.WithRejoin(newCluster)}
	if cfg.memberName != "" {
		opts = append(opts, shard.WithMemberName(cfg.memberName))
	}
	inf, err := shard.New(c, cfg.group, lw, &corev1.ConfigMap{}, opts...)
	if err != nil {
		shutdown(c)
		return err
	}
	queue := newQueue(meters)
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		shutdown(c)
		return err
	}

	// With the k8s provider the readiness must not wait for ranges
	// (probeHandler); with etcd it is the member's: CheckSynced, which says
	// why it does not deliver.
	ready := shard.Check(inf.CheckLive)
	if cfg.provider == "etcd" {
		ready = inf.CheckSynced
	}
	mux := probeHandler(inf, ready)
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(inf.Status())
	})
	probes := &http.Server{Addr: cfg.probeAddress, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", cfg.probeAddress)
	if err != nil {
		shutdown(c)
		return err
	}
	go func() { _ = probes.Serve(ln) }()
	klog.InfoS("sharded-controller started", "namespace", cfg.namespace, "group", cfg.group, "ranges", cfg.ranges,
		"address", c.ActorSystem.Address(), "probes", ln.Addr().String())

	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() { work(inf, queue, reconciler(inf)) })
	}
	inf.RunWithContext(ctx) // until SIGTERM: then it leaves the group gracefully
	queue.ShutDown()
	wg.Wait()
	stopping := time.Now()
	shutdown(inf.Cluster())
	klog.InfoS("sharded-controller stopped", "clusterShutdown", time.Since(stopping))
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return probes.Shutdown(shutdownCtx)
}

// newQueue is client-go's rate-limiting queue, its metrics (depth, and how
// long its oldest key has waited: what deploy/hpa.yaml scales on) recorded
// through mp, served at /metrics.
func newQueue(mp metric.MeterProvider) *aiworkqueue.Traced[string] {
	return aiworkqueue.NewRateLimitingQueue("configmaps", workqueue.DefaultTypedControllerRateLimiter[string](), nil, mp)
}

// work takes keys from the queue until it shuts down: those of ranges
// this replica released are another's now.
func work(inf *shard.Informer, queue workqueue.TypedRateLimitingInterface[string], reconcile func(string) error) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		if inf.Released(key) {
			queue.Forget(key)
			queue.Done(key)
			continue
		}
		if err := reconcile(key); err != nil {
			klog.ErrorS(err, "reconcile failed", "key", key)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

// reconciler is the controller's work on one key: here, it reads the
// object from this replica's cache and logs what it found.
func reconciler(inf *shard.Informer) func(string) error {
	return func(key string) error {
		obj, exists, err := inf.GetIndexer().GetByKey(key)
		if err != nil {
			return err
		}
		if !exists {
			klog.V(2).InfoS("reconciled a deleted ConfigMap", "key", key)
			return nil
		}
		cm := obj.(*corev1.ConfigMap)
		klog.V(2).InfoS("reconciled", "key", key, "entries", len(cm.Data), "resourceVersion", cm.ResourceVersion)
		return nil
	}
}

// probeHandler serves the pod's probes, with package shard's liveness
// check in both: it fails once the member gave up on its group (it was
// dropped and could not rejoin, or its cluster member stopped under it):
// the kubelet then restarts the container, and the restarted process joins
// as a new cluster member.
//
// The readiness is the same check, not shard's CheckSynced (every owned
// range delivered): protoactor's k8s provider counts a pod as a member only
// while all its containers are ready, so a readiness that waited for
// ranges (which a member gets once it is a member) would never come, and
// one that failed during a graceful leave would drop the leaving member
// from the group before it handed its ranges over. For the same reason it
// passes while the member waits for replicas with another range count to
// leave (a rollout that changes -ranges): the rollout must go on.
//
// Outside a pod, with the etcd provider, no probe decides membership, and
// ready is CheckSynced.
func probeHandler(inf *shard.Informer, ready shard.Check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/healthz", shard.Check(inf.CheckLive))
	mux.Handle("/readyz", ready)
	return mux
}
