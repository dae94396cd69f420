// Command shardmember is one informer process for the real-cluster tests
// and benchmarks of package shard: a member of a sharded group joined
// through protoactor's etcd provider (-mode sharded; with -provider k8s,
// through its Kubernetes provider, in a pod: the in-cluster configuration
// for the provider and, without -host, for the informer too), one unsharded
// informer (-mode unsharded), or one of N informers that keep the objects
// whose UID hash falls in their N-th, filtering on the client as
// kube-state-metrics does (-mode client).
//
// It prints "listening http://ADDR" once its state page serves, and leaves
// gracefully on SIGTERM. GET /state answers JSON: whether it synced, the
// ranges it delivers, the bytes of the objects received from the API
// server (and apart those of the members' leases), the heap after sync and
// the CPU time used, and apart the lists (requests and bytes) and the
// watches' bytes; with ?gc=1 the heap now, after a
// collection; with ?stopprofile=1 the CPU profile -cpuprofile started is
// written; with ?objects=1 also its cache and its handler's view
// (key → resource version). In sharded mode, every handler
// call is appended to -calls once it has returned, in internal/calllog's
// format: "START_NS END_NS RANGE OP KEY UID RV MEMBER TOKEN [KIND]". With
// -owned secrets the group, hashed by namespace, carries Secrets beside
// the -resource kind (shard's AddKind): their calls are logged with KIND
// "secrets", and their keys in the state page read secrets:namespace/name.
//
// For fault tests, the member's protoactor remote can listen on a chosen
// port (-remote-port) and advertise another address (-advertise: a proxy in
// front of it, which a test can cut), and its connections to the other
// members can leave from a chosen local address (-dial-source, e.g.
// 127.0.1.N), so that such a proxy knows which member is calling. All of
// them are optional; -etcd may name a proxy in front of etcd too.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path"
	"runtime"
	"runtime/metrics"
	rpprof "runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/calllog"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/etcdcheck"
)

var (
	host         = flag.String("host", "", "API server URL")
	token        = flag.String("token", "", "bearer token")
	resource     = flag.String("resource", "configmaps", "configmaps, pods or secrets")
	namespace    = flag.String("namespace", "", "namespace (\"\": all)")
	mode         = flag.String("mode", "sharded", "sharded, unsharded or client")
	index        = flag.Int("shard", 0, "client mode: this informer's shard")
	total        = flag.Int("total", 1, "client mode: the number of shards")
	providerName = flag.String("provider", "etcd", "sharded mode: the cluster provider, etcd or k8s (protoactor's Kubernetes provider, in a pod)")
	etcdURL      = flag.String("etcd", "", "sharded mode: etcd endpoint of the cluster provider")
	prefix       = flag.String("etcd-prefix", "/actorinformer-shard", "sharded mode: the provider's key prefix")
	ttl          = flag.Duration("etcd-ttl", 3*time.Second, "sharded mode: the provider's keep-alive TTL")
	group        = flag.String("group", "objects", "sharded mode: the group")
	ranges       = flag.Int("ranges", shard.DefaultRanges, "sharded mode: the number of ranges")
	calls        = flag.String("calls", "", "sharded mode: the file handler calls are logged to (internal/calllog)")
	addr         = flag.String("http", "127.0.0.1:0", "state page address")
	watchList    = flag.Bool("watchlist", false, "use WatchList streaming")
	leaseNS      = flag.String("lease-namespace", "default", "sharded mode: the namespace of the members' leases")
	leaseDur     = flag.Duration("lease-duration", shard.DefaultLeaseDuration, "sharded mode: the leases' duration")
	renewDL      = flag.Duration("renew-deadline", shard.DefaultRenewDeadline, "sharded mode: the leases' renew deadline")
	retryP       = flag.Duration("retry-period", shard.DefaultRetryPeriod, "sharded mode: the leases' retry period")
	gossip       = flag.Duration("gossip-interval", 0, "sharded mode: protoactor's gossip interval, with a heartbeat expiration of 10 intervals (0: shard.ClusterOptions' settings)")
	leaseProto   = flag.Bool("lease-protobuf", false, "sharded mode: the lease client speaks protobuf rather than JSON")
	tick         = flag.Duration("tick", 0, "sharded mode: the protocol's clock (shard.WithTickInterval; 0: its default)")
	owned        = flag.String("owned", "", "sharded mode: a second kind the group carries, \"secrets\" (\"\": none); the group is then hashed by namespace, and the second kind's keys in the state page read secrets:namespace/name")
	selector     = flag.String("selector", "", "a label selector for the lists and watches of every kind")

	clusterShutdown = flag.String("cluster-shutdown", "provider-first", "sharded mode, once the informer left: graceful (cluster.Shutdown(true)), provider-first (the provider's Shutdown, then cluster.Shutdown(false)) or fast (cluster.Shutdown(false) alone)")

	handlerDelay = flag.Duration("handler-delay", 0, "how long each handler call takes (a slow handler's queue)")
	cpuProfile   = flag.String("cpuprofile", "", "a CPU profile of the whole process is written there, when the state page is asked ?stopprofile=1 or at exit")
	memRate      = flag.Int("memprofilerate", 0, "runtime.MemProfileRate, set at the start: the heap profile samples an allocation every that many bytes (0: the runtime's default, 512 KiB)")

	// The member's network, for fault tests (sharded mode).
	remotePort = flag.Int("remote-port", 0, "sharded mode: the port protoactor's remote listens on (0: any free port)")
	remoteHost = flag.String("remote-host", "127.0.0.1", "sharded mode: the address protoactor's remote listens on (a pod's IP)")
	advertise  = flag.String("advertise", "", "sharded mode: the host:port the other members reach this one at (a proxy in front of -remote-port); \"\": the one it listens on")
	dialSource = flag.String("dial-source", "", "sharded mode: the local IP address this member's connections to the other members leave from (\"\": any)")
)

// remoteConfig is protoactor's remote configuration of a sharded member.
func remoteConfig() (*remote.Config, error) {
	opts := []remote.ConfigOption{
		// protoactor's default endpoint queues (1,000,000 entries, 16 MB
		// per peer) dwarf a member's cache; a group sends a few messages
		// a second.
		remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096),
	}
	if *advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(*advertise))
	}
	if *dialSource != "" {
		ip := net.ParseIP(*dialSource)
		if ip == nil {
			return nil, fmt.Errorf("-dial-source %q: not an IP address", *dialSource)
		}
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		// WithDialOptions replaces protoactor's defaults, insecure
		// credentials among them.
		opts = append(opts, remote.WithDialOptions(
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr)
			})))
	}
	// After the dial options, which it adds to.
	opts = append(opts, shard.RemoteOption())
	return remote.Configure(*remoteHost, *remotePort, opts...), nil
}

func main() {
	// Logs at the library's defaults: klog for the informers and for
	// protoactor (actors.NewActorSystem's logger factory); -v raises
	// klog's verbosity.
	klog.InitFlags(nil)
	flag.Parse()
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate
	}
	if err := run(); err != nil {
		klog.ErrorS(err, "shardmember")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

type state struct {
	Mode          string `json:"mode"`
	Member        string `json:"member,omitempty"`
	Synced        bool   `json:"synced"`
	SyncedAfterMS int64  `json:"syncedAfterMs,omitempty"`
	Ranges        []int  `json:"ranges"`
	Objects       int    `json:"objects"`
	Bytes         int64  `json:"bytes"`
	LeaseBytes    int64  `json:"leaseBytes,omitempty"`
	// LeaseRequests counts the requests of the lease client by kind: get
	// (reads and lists), watch, create, update, delete.
	LeaseRequests map[string]int64 `json:"leaseRequests,omitempty"`
	ListRequests  int64            `json:"listRequests"`
	// ResourceBytes are Bytes by the resource the requests named (the
	// URL path's last element: configmaps, pods, secrets).
	ResourceBytes map[string]int64 `json:"resourceBytes,omitempty"`
	ListBytes     int64            `json:"listBytes"`
	WatchBytes    int64            `json:"watchBytes"`
	WarmStarts    int64            `json:"warmStarts,omitempty"`
	WarmFallbacks int64            `json:"warmFallbacks,omitempty"`
	HeapAfterSync uint64           `json:"heapAfterSync"`
	HeapNow       uint64           `json:"heapNow,omitempty"`
	CPUSeconds    float64          `json:"cpuSeconds"`
	// From runtime/metrics: the runtime's estimate of the CPU its
	// collector used (its marking in idle time apart), its cycles, and the
	// bytes allocated.
	GCCPUSeconds  float64           `json:"gcCPUSeconds"`
	GCIdleSeconds float64           `json:"gcIdleSeconds"`
	GCCycles      uint64            `json:"gcCycles"`
	AllocBytes    uint64            `json:"allocBytes"`
	FilterMode    string            `json:"filterMode,omitempty"`
	View          []string          `json:"view,omitempty"`
	Handovers     []shard.Handover  `json:"handovers,omitempty"`
	Failed        string            `json:"failed,omitempty"`
	Discovering   bool              `json:"discovering,omitempty"`
	RangeStates   []string          `json:"rangeStates,omitempty"`
	Cache         map[string]string `json:"cache,omitempty"`
	Handler       map[string]string `json:"handler,omitempty"`
	HandlerErrors []string          `json:"handlerErrors,omitempty"`
}

func run() error {
	// received counts the bytes of the watched objects' lists and watches;
	// leaseBytes those of the members' leases (their writes and watch),
	// apart, so that the objects' bytes compare with an unsharded
	// informer's.
	var received, leaseBytes atomic.Int64
	var byResource resourceBytes
	// The objects' requests apart: lists (their count and bytes) and
	// watches (their bytes).
	var lists, listBytes, watchBytes atomic.Int64
	var leaseCalls requestCounts
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	cfg := &rest.Config{Host: *host, BearerToken: *token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	if *host == "" {
		// In a pod: its service account, as the k8s provider's.
		in, err := rest.InClusterConfig()
		if err != nil {
			return err
		}
		cfg = in
		cfg.QPS = -1
	}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return countingTransport{rt: rt, n: &received, lists: &lists, listBytes: &listBytes, watchBytes: &watchBytes, byResource: &byResource}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return countingTransport{rt: rt, n: &leaseBytes, requests: &leaseCalls}
	}
	if *leaseProto {
		leaseCfg.ContentType = "application/vnd.kubernetes.protobuf"
	}
	leaseClient, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return err
	}
	lw, example := listWatch(client)
	if *owned != "" && (*mode != "sharded" || *owned != "secrets") {
		return fmt.Errorf("-owned %q: only secrets, in sharded mode", *owned)
	}
	if *mode == "client" {
		lw = &modFilter{inner: lw, index: *index, total: *total}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	var leaving atomic.Int64 // UnixNano of the signal
	context.AfterFunc(ctx, func() {
		leaving.Store(time.Now().UnixNano())
		klog.InfoS("leaving the group")
	})
	start := time.Now()
	// ownedView is the second kind's handler (-owned), nil without one.
	var (
		ownedView *view
		ownedInf  *shard.Informer
	)
	view := newView()
	informerOpts := []actors.Option{actors.WithWatchList(*watchList)}

	var (
		inf     cache.SharedIndexInformer
		sharded *shard.Informer
		c       *cluster.Cluster
	)
	switch *mode {
	case "sharded":
		newCluster := func(context.Context) (*cluster.Cluster, error) {
			var provider cluster.ClusterProvider
			var err error
			switch *providerName {
			case "etcd":
				provider, err = etcd.NewWithConfig(*prefix, clientv3.Config{Endpoints: []string{*etcdURL}, DialTimeout: 5 * time.Second, DialOptions: shard.WindowDialOptions(), Logger: etcdcheck.EtcdLogger(nil)}, etcd.WithKeepAliveTTL(*ttl))
			case "k8s":
				// Its pod's name from the hostname, its namespace and client
				// configuration from the mounted service account.
				provider, err = k8s.New()
			default:
				err = fmt.Errorf("unknown provider %q", *providerName)
			}
			if err != nil {
				return nil, err
			}
			rc, err := remoteConfig()
			if err != nil {
				return nil, err
			}
			c := cluster.New(actors.NewActorSystem(), cluster.Configure("actorinformer", provider, disthash.New(), rc, append(shard.ClusterOptions(), func(cc *cluster.Config) {
				if *gossip > 0 {
					cc.GossipInterval = *gossip
					cc.HeartbeatExpiration = 10 * *gossip
				}
			})...))
			c.StartMember()
			return c, nil
		}
		if c, err = newCluster(ctx); err != nil {
			return err
		}
		opts := []shard.Option{shard.WithRanges(*ranges), shard.WithInformerOptions(informerOpts...),
			shard.WithLeases(leaseClient.CoordinationV1(), *leaseNS), shard.WithLeaseTimings(*leaseDur, *renewDL, *retryP),
			shard.WithRejoin(newCluster)}
		if *tick > 0 {
			opts = append(opts, shard.WithTickInterval(*tick))
		}
		if *owned != "" {
			opts = append(opts, shard.WithHashField(shard.Namespace))
		}
		sharded, err = shard.New(c, *group, lw, example, opts...)
		if err != nil {
			return err
		}
		view.inf = sharded
		inf = sharded
		if *owned != "" {
			olw, oexample := secretsListWatch(client)
			if ownedInf, err = sharded.AddKind(schema.GroupResource{Resource: *owned}, olw, oexample); err != nil {
				return err
			}
			ownedView = newView()
			ownedView.inf, ownedView.kind = ownedInf, *owned
		}
		if *calls != "" {
			w, err := calllog.Create(*calls)
			if err != nil {
				return err
			}
			defer w.Close()
			view.calls = w
			if ownedView != nil {
				ownedView.calls = w
			}
		}
	case "unsharded", "client":
		inf = actors.NewSharedIndexInformer(lw, example, 0, cache.Indexers{}, informerOpts...)
	default:
		return fmt.Errorf("unknown mode %q", *mode)
	}
	if _, err := inf.AddEventHandler(view); err != nil {
		return err
	}
	if ownedInf != nil {
		if _, err := ownedInf.AddEventHandler(ownedView); err != nil {
			return err
		}
	}
	synced := inf.HasSynced
	if ownedInf != nil {
		synced = func() bool { return inf.HasSynced() && ownedInf.HasSynced() }
	}

	var (
		mu       sync.Mutex
		syncedAt time.Duration
		heap     uint64
	)
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			return
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		syncedAt, heap = time.Since(start), ms.HeapAlloc
		mu.Unlock()
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/state", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stopprofile") == "1" {
			stopProfile()
		}
		st := state{Mode: *mode, Synced: synced(), Bytes: received.Load(), LeaseBytes: leaseBytes.Load(), CPUSeconds: cpuSeconds(), Objects: cachedLen(inf.GetStore()),
			ListRequests: lists.Load(), ListBytes: listBytes.Load(), WatchBytes: watchBytes.Load(), LeaseRequests: leaseCalls.snapshot(),
			ResourceBytes: byResource.snapshot()}
		st.GCCPUSeconds, st.GCIdleSeconds, st.GCCycles, st.AllocBytes = gcStats()
		mu.Lock()
		st.SyncedAfterMS, st.HeapAfterSync = syncedAt.Milliseconds(), heap
		mu.Unlock()
		if sharded != nil {
			s := sharded.Status()
			st.Member, st.FilterMode, st.View, st.Handovers, st.Failed = s.Member, s.Mode.String(), s.View, s.Handovers, s.Failed
			st.Discovering = s.Discovering
			st.WarmStarts, st.WarmFallbacks = s.WarmStarts, s.WarmFallbacks
			for _, rs := range s.Ranges {
				st.RangeStates = append(st.RangeStates, rs.State+"@"+rs.Owner)
			}
			for _, rg := range s.Delivered {
				st.Ranges = append(st.Ranges, rg.Index)
			}
		}
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			st.HeapNow = ms.HeapAlloc
		}
		if r.URL.Query().Get("objects") == "1" {
			st.Cache = map[string]string{}
			for _, obj := range inf.GetStore().List() {
				m, _ := meta.Accessor(obj)
				st.Cache[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
			}
			st.Handler, st.HandlerErrors = view.snapshot()
			if ownedInf != nil {
				for _, obj := range ownedInf.GetStore().List() {
					m, _ := meta.Accessor(obj)
					st.Cache[ownedView.key(m)] = m.GetResourceVersion()
				}
				h, errs := ownedView.snapshot()
				for k, rv := range h {
					st.Handler[k] = rv
				}
				st.HandlerErrors = append(st.HandlerErrors, errs...)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening http://%s\n", ln.Addr())

	inf.RunWithContext(ctx)
	stopped := time.Now()
	klog.InfoS("informer stopped", "sinceSignal", stopped.Sub(time.Unix(0, leaving.Load())))
	_ = srv.Close()
	if sharded != nil {
		c = sharded.Cluster() // after a rejoin, the last cluster member made
	}
	if c != nil {
		switch *clusterShutdown {
		case "graceful":
			c.Shutdown(true)
		case "provider-first":
			_ = c.Config.ClusterProvider.Shutdown(true)
			c.Shutdown(false)
		case "fast":
			c.Shutdown(false) // the provider keeps this member until its TTL

		default:
			return fmt.Errorf("unknown -cluster-shutdown %q", *clusterShutdown)
		}
		klog.InfoS("cluster member shut down", "how", *clusterShutdown, "took", time.Since(stopped))
	}
	return nil
}

// listWatch lists and watches the -resource objects of -namespace.
func listWatch(client kubernetes.Interface) (cache.ListerWatcher, kruntime.Object) {
	switch ns := *namespace; *resource {
	case "pods":
		return selectedLW(client.CoreV1().Pods(ns)), &corev1.Pod{}
	case "secrets":
		return secretsListWatch(client)
	default:
		return selectedLW(client.CoreV1().ConfigMaps(ns)), &corev1.ConfigMap{}
	}
}

// secretsListWatch lists and watches the Secrets of -namespace (-owned).
func secretsListWatch(client kubernetes.Interface) (cache.ListerWatcher, kruntime.Object) {
	return selectedLW(client.CoreV1().Secrets(*namespace)), &corev1.Secret{}
}

// selectedLW lists and watches a typed client's objects with -selector.
func selectedLW[L kruntime.Object](c actors.ListWatchable[L]) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			return c.List(ctx, selected(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, selected(o))
		},
	}
}

// selected adds -selector to a list's or a watch's options.
func selected(o metav1.ListOptions) metav1.ListOptions {
	if *selector != "" {
		o.LabelSelector = *selector
	}
	return o
}

// countingTransport counts the bytes of the responses' bodies in n; when
// set, also the lists (GETs without watch=true: requests and bytes) and
// the watches' bytes apart, and every request by kind (requests).
type countingTransport struct {
	rt                           http.RoundTripper
	n                            *atomic.Int64
	lists, listBytes, watchBytes *atomic.Int64
	requests                     *requestCounts
	byResource                   *resourceBytes
}

// resourceBytes counts bytes by the resource a request named.
type resourceBytes struct {
	mu sync.Mutex
	n  map[string]*atomic.Int64
}

func (b *resourceBytes) counter(r *http.Request) *atomic.Int64 {
	res := path.Base(r.URL.Path)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[string]*atomic.Int64{}
	}
	if b.n[res] == nil {
		b.n[res] = &atomic.Int64{}
	}
	return b.n[res]
}

func (b *resourceBytes) snapshot() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int64{}
	for k, n := range b.n {
		out[k] = n.Load()
	}
	return out
}

// requestCounts counts requests by kind.
type requestCounts struct{ get, watch, create, update, del atomic.Int64 }

func (c *requestCounts) add(r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		if r.URL.Query().Get("watch") == "true" {
			c.watch.Add(1)
		} else {
			c.get.Add(1)
		}
	case http.MethodPost:
		c.create.Add(1)
	case http.MethodPut, http.MethodPatch:
		c.update.Add(1)
	case http.MethodDelete:
		c.del.Add(1)
	}
}

func (c *requestCounts) snapshot() map[string]int64 {
	return map[string]int64{"get": c.get.Load(), "watch": c.watch.Load(), "create": c.create.Load(),
		"update": c.update.Load(), "delete": c.del.Load()}
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.requests != nil {
		t.requests.add(r)
	}
	var kind *atomic.Int64
	if t.lists != nil && r.Method == http.MethodGet {
		if r.URL.Query().Get("watch") == "true" {
			kind = t.watchBytes
		} else {
			t.lists.Add(1)
			kind = t.listBytes
			klog.V(1).InfoS("list request", "query", r.URL.RawQuery)
		}
	}
	var res *atomic.Int64
	if t.byResource != nil {
		res = t.byResource.counter(r)
	}
	resp, err := t.rt.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{resp.Body, t.n, kind, res}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n, kind, res *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if b.kind != nil {
		b.kind.Add(int64(n))
	}
	if b.res != nil {
		b.res.Add(int64(n))
	}
	return n, err
}

// startCPUProfile starts a CPU profile written to path ("": none) when the
// returned function is first called.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := rpprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			rpprof.StopCPUProfile()
			_ = f.Close()
		})
	}, nil
}

// gcStats returns the runtime's estimate of its collector's CPU seconds
// (all of it, then its idle-time marking apart), its completed cycles and
// the bytes allocated so far.
func gcStats() (cpu, idle float64, cycles, allocs uint64) {
	ss := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(ss)
	f := func(i int) float64 {
		if ss[i].Value.Kind() == metrics.KindFloat64 {
			return ss[i].Value.Float64()
		}
		return 0
	}
	u := func(i int) uint64 {
		if ss[i].Value.Kind() == metrics.KindUint64 {
			return ss[i].Value.Uint64()
		}
		return 0
	}
	return f(0), f(1), u(2), u(3)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// modFilter keeps the objects whose UID hash modulo total is index: every
// such informer receives every object and drops the others
// (kube-state-metrics' --shard / --total-shards).
type modFilter struct {
	inner        cache.ListerWatcher
	index, total int
}

func (f *modFilter) keep(obj kruntime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return true
	}
	return int(shard.Hash(string(m.GetUID()))%uint64(f.total)) == f.index
}

func (f *modFilter) List(o metav1.ListOptions) (kruntime.Object, error) {
	list, err := f.inner.List(o)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	kept := items[:0]
	for _, it := range items {
		if f.keep(it) {
			kept = append(kept, it)
		}
	}
	return list, meta.SetList(list, kept)
}

func (f *modFilter) Watch(o metav1.ListOptions) (watch.Interface, error) {
	w, err := f.inner.Watch(o)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Bookmark || e.Type == watch.Error {
			return e, true
		}
		return e, f.keep(e.Object)
	}), nil
}

// view is the handler: what it was given, key → resource version; in
// sharded mode, every call is also logged (internal/calllog).
type view struct {
	inf *shard.Informer
	// kind is the informer's kind in the group: "" for the first,
	// AddKind's resource for another; its calls are logged with it, and
	// its keys read kind:namespace/name.
	kind  string
	calls *calllog.Writer
	mu    sync.Mutex
	objs  map[string]string
	rng   map[string]int
	errs  []string
	// epochs are the fencing tokens of the ranges, from OnAcquire.
	epochs map[int]uint64
}

func newView() *view {
	return &view{objs: map[string]string{}, rng: map[string]int{}, epochs: map[int]uint64{}}
}

// token is the fencing token of range r for the call log (v.mu is held).
func (v *view) token(r int) uint64 { return v.epochs[r] }

func (v *view) member() string {
	if v.inf == nil {
		return ""
	}
	return v.inf.Member()
}

func (v *view) call(op calllog.Op, obj any, f func(key, rv string)) {
	start := time.Now().UnixNano()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key := m.GetNamespace() + "/" + m.GetName()
	vkey := v.key(m)
	r := -1
	if v.inf != nil {
		if rg, err := v.inf.RangeOf(obj); err == nil {
			r = rg.Index
		}
	}
	if *handlerDelay > 0 {
		time.Sleep(*handlerDelay)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	f(vkey, m.GetResourceVersion())
	v.rng[vkey] = r
	if v.calls != nil {
		_ = v.calls.Write(calllog.Record{Start: start, End: time.Now().UnixNano(), Range: r, Op: op, Key: key,
			UID: string(m.GetUID()), RV: m.GetResourceVersion(), Member: v.member(), Token: v.token(r), Kind: v.kind})
	}
}

// key is the object's key in the view and the state page: namespace/name,
// prefixed with "kind:" for a kind other than the group's first.
func (v *view) key(m metav1.Object) string {
	key := m.GetNamespace() + "/" + m.GetName()
	if v.kind != "" {
		key = v.kind + ":" + key
	}
	return key
}

func (v *view) OnAdd(obj any, initial bool) {
	op := calllog.OpAdd
	if initial {
		op = calllog.OpInitial
	}
	v.call(op, obj, func(k, rv string) {
		if _, dup := v.objs[k]; dup {
			v.errs = append(v.errs, "add of "+k+" it holds")
		}
		v.objs[k] = rv
	})
}

func (v *view) OnUpdate(_, obj any) {
	v.call(calllog.OpUpdate, obj, func(k, rv string) {
		if _, ok := v.objs[k]; !ok {
			v.errs = append(v.errs, "update of "+k+" it does not hold")
		}
		v.objs[k] = rv
	})
}

func (v *view) OnDelete(obj any) {
	op := calllog.OpDelete
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		op = calllog.OpTombstone
	}
	v.call(op, obj, func(k, _ string) {
		// A tombstone for a key it does not hold is the previous deliverer's
		// object, gone before this member gave the range to its handlers.
		if _, ok := v.objs[k]; !ok && op != calllog.OpTombstone {
			v.errs = append(v.errs, "delete of "+k+" it does not hold")
		}
		delete(v.objs, k)
	})
}

// ownership logs OnAcquire and OnRelease.
func (v *view) ownership(op calllog.Op, r shard.Range, f func()) {
	start := time.Now().UnixNano()
	v.mu.Lock()
	defer v.mu.Unlock()
	f()
	if v.calls != nil {
		_ = v.calls.Write(calllog.Record{Start: start, End: time.Now().UnixNano(), Range: r.Index, Op: op,
			Member: v.member(), Token: v.token(r.Index), Kind: v.kind})
	}
}

func (v *view) OnAcquire(r shard.Range, epoch uint64) {
	v.ownership(calllog.OpAcquire, r, func() { v.epochs[r.Index] = epoch })
}

// OnRelease forgets the range's objects: they are the new owner's now.
func (v *view) OnRelease(r shard.Range) {
	v.ownership(calllog.OpRelease, r, func() {
		for k, idx := range v.rng {
			if idx == r.Index {
				delete(v.objs, k)
				delete(v.rng, k)
			}
		}
	})
}

func (v *view) snapshot() (map[string]string, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.objs))
	for k, rv := range v.objs {
		out[k] = rv
	}
	return out, append([]string(nil), v.errs...)
}

// cachedLen counts the cached objects without listing them: the benchmarks
// poll the state often, and listing every key at each poll cost a member of
// 6,000 pods 7 of the 80 MB it allocated.
func cachedLen(s cache.Store) int {
	if l, ok := s.(actors.Store); ok {
		return l.Len()
	}
	return len(s.ListKeys())
}
