package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/etcdcheck"
)

// The cluster member's flags, parsed by main.
var member = struct {
	provider, etcd, group, name, podIP, remoteBind *string
	ranges, remotePort                             *int
}{
	provider:   flag.String("provider", "k8s", "how the members find each other: k8s (protoactor's Kubernetes provider, in pods) or etcd"),
	etcd:       flag.String("etcd", "http://127.0.0.1:2379", "with -provider etcd: the etcd the members find each other in"),
	group:      flag.String("group", "bundles", "the shard group: every replica of the controller gives the same"),
	name:       flag.String("member-name", "", "the member's name, in its ids, logs and metrics (default: the host's, in a pod the pod's)"),
	ranges:     flag.Int("ranges", 24, "ranges the namespaces' hash is split into: the same on every replica"),
	podIP:      flag.String("pod-ip", os.Getenv("POD_IP"), "the pod's IP, where the other replicas reach this one (default $POD_IP; \"\": -remote-bind's)"),
	remoteBind: flag.String("remote-bind", "0.0.0.0", "the address protoactor's remote listens on"),
	remotePort: flag.Int("remote-port", 8090, "the port protoactor's remote listens on"),
}

// sharded is what a one-process controller does not have: the replica's
// protoactor cluster member and ctrlruntime.Sharded, the manager's cache,
// reconciler and checks sharded over the group's members. The member is
// made by NewCache (the manager's), so that its errors are the manager's.
type sharded struct {
	*ctrlruntime.Sharded // nil until NewCache
	ctx                  context.Context
	cfg                  config
	meters               metric.MeterProvider
	c                    *cluster.Cluster
}

func newSharded(ctx context.Context, cfg config, meters metric.MeterProvider) *sharded {
	return &sharded{ctx: ctx, cfg: cfg, meters: meters}
}

// NewCache starts the cluster member, then makes the manager's cache: its
// informers of Bundles and ConfigMaps are one shard group hashed by
// namespace.
func (s *sharded) NewCache(restConfig *rest.Config, opts cache.Options) (cache.Cache, error) {
	// Each range has an informer of each kind: at a start, one list and
	// one watch each. client-go's default, 5 requests a second, would
	// hold a replica's start up by seconds.
	restConfig = rest.CopyConfig(restConfig)
	restConfig.QPS, restConfig.Burst = 50, 100
	c, shardOptions, err := newMember(s.ctx, s.cfg, restConfig, s.meters)
	if err != nil {
		return nil, err
	}
	s.c = c
	s.Sharded = ctrlruntime.NewSharded(c, *member.group, []client.Object{&Bundle{}, &corev1.ConfigMap{}}, shardOptions...)
	klog.InfoS("cluster member started", "group", *member.group, "ranges", *member.ranges, "address", c.ActorSystem.Address())
	inner, err := s.Sharded.NewCache(restConfig, opts)
	if err != nil {
		shutdown(c)
		return nil, err
	}
	return &memberCache{Cache: inner, s: s}, nil
}

// memberCache is the manager's cache, whose Start, once the group has
// left (the manager stopped), shuts the cluster member down.
type memberCache struct {
	cache.Cache
	s *sharded
}

func (m *memberCache) Start(ctx context.Context) error {
	err := m.Cache.Start(ctx)
	m.s.stop()
	return err
}

// status serves the member's Status as JSON: the manager's metrics
// server's extra handler, /status.
func (s *sharded) status() map[string]http.Handler {
	return map[string]http.Handler{"/status": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s.Sharded == nil || s.Informer() == nil {
			http.Error(w, "the sharded cache is not made yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Informer().Status())
	})}
}

// ready is the readiness check. With protoactor's k8s provider it is the
// liveness check, CheckLive (it fails once the member gave up on its
// group: it was dropped and could not rejoin, or its cluster member
// stopped under it; the kubelet then restarts the container, and the
// restarted process joins as a new cluster member), not CheckSynced
// (every owned range delivered): the provider counts a pod as a member
// only while all its containers are ready, so a readiness that waited for
// ranges (which a member gets once it is a member) would never come, and
// one that failed during a graceful leave would drop the leaving member
// from the group before it handed its ranges over. For the same reason it
// passes while the member waits for replicas with another range count to
// leave (a rollout that changes -ranges): the rollout must go on. Outside
// a pod, with the etcd provider, no probe decides membership, and the
// readiness is CheckSynced, which says why the member does not deliver.
func (s *sharded) ready(r *http.Request) error {
	if *member.provider == "etcd" {
		return s.CheckSynced(r)
	}
	return s.CheckLive(r)
}

// stop shuts the cluster member down once the group has left: after a
// rejoin, the one the rejoin made last.
func (s *sharded) stop() {
	c := s.c
	if inf := s.Informer(); inf != nil {
		c = inf.Cluster()
	}
	stopping := time.Now()
	shutdown(c)
	klog.InfoS("sharded-controller stopped", "clusterShutdown", time.Since(stopping), "dropped", s.Dropped())
}

// newMember starts the replica's protoactor cluster member and returns it
// with the shard group's options. protoactor's k8s provider finds the
// other replicas by the labels it puts on their pods, the etcd provider
// by their keys. A member fenced after the provider dropped it rejoins on
// a new one (shard.WithRejoin).
func newMember(ctx context.Context, cfg config, restConfig *rest.Config, meters metric.MeterProvider) (*cluster.Cluster, []shard.Option, error) {
	client, leaseClient, err := clients(restConfig)
	if err != nil {
		return nil, nil, err
	}
	newCluster := func(ctx context.Context) (*cluster.Cluster, error) {
		var provider cluster.ClusterProvider
		var err error
		switch *member.provider {
		case "k8s":
			if provider, err = k8s.NewWithConfig(restConfig); err != nil {
				return nil, err
			}
		case "etcd":
			etcdCfg := clientv3.Config{Endpoints: []string{*member.etcd}, DialTimeout: 5 * time.Second,
				DialOptions: shard.WindowDialOptions(), Logger: etcdcheck.EtcdLogger(nil)}
			// The provider waits for ever, silently, for an etcd it
			// cannot reach.
			if err := etcdcheck.Check(ctx, etcdCfg); err != nil {
				return nil, err
			}
			if provider, err = etcd.NewWithConfig("/sharded-controller", etcdCfg, etcd.WithKeepAliveTTL(3*time.Second)); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("-provider %q: want k8s or etcd", *member.provider)
		}
		opts := []remote.ConfigOption{remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096)}
		if *member.podIP != "" {
			// The address in this member's actor addresses, which the
			// provider gives the others (the pod's IP).
			opts = append(opts, remote.WithAdvertisedHost(net.JoinHostPort(*member.podIP, strconv.Itoa(*member.remotePort))))
		}
		c := cluster.New(actors.NewActorSystem(), cluster.Configure("sharded-controller", provider, disthash.New(),
			remote.Configure(*member.remoteBind, *member.remotePort, append(opts, shard.RemoteOption())...),
			shard.ClusterOptions()...))
		if err := shard.StartMember(ctx, c); err != nil {
			return nil, err
		}
		return c, nil
	}
	c, err := newCluster(ctx)
	if err != nil {
		return nil, nil, err
	}
	opts := []shard.Option{shard.WithRanges(*member.ranges),
		// Each replica's Lease in its namespace fences it.
		shard.WithLeases(leaseClient.CoordinationV1(), cfg.namespace),
		// What of that, and of the Bundles' and ConfigMaps' list and
		// watch, RBAC refuses:
		// logged, and said by CheckSynced and /status.
		shard.WithAccessCheck(client.AuthorizationV1(), accessChecked, ""),
		shard.WithInformerOptions(actors.WithMeterProvider(meters)),
		shard.WithRejoin(newCluster)}
	if *member.name != "" {
		opts = append(opts, shard.WithMemberName(*member.name))
	}
	return c, opts, nil
}

// shutdown stops a cluster member: the provider first (it takes the
// member's labels off its pod: the others stop counting it at once), then
// the rest, without the 2 s that cluster.Shutdown(true) waits for grains
// (a shard member has none) and its graceful remote stop (which waits for
// connection retries to a peer that died).
func shutdown(c *cluster.Cluster) {
	_ = c.Config.ClusterProvider.Shutdown(true)
	c.Shutdown(false)
}

// accessChecked is the first kind shard.WithAccessCheck reviews besides
// the leases: list and watch of Bundles in every namespace (and of the
// kinds the group added, ConfigMaps).
var accessChecked = schema.GroupResource{Group: GroupVersion.Group, Resource: "bundles"}

// clients are the member's API clients: one for the access check, one of
// its own (its own rate limiter) for the leases and range records, so
// that no burst of the ranges' lists holds a renewal up.
func clients(restConfig *rest.Config) (*kubernetes.Clientset, *kubernetes.Clientset, error) {
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, nil, err
	}
	leaseClient, err := kubernetes.NewForConfig(rest.CopyConfig(restConfig))
	return client, leaseClient, err
}
