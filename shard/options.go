package shard

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// Option configures a sharded informer.
type Option func(*options)

type options struct {
	ranges       int
	field        HashField
	resync       time.Duration
	indexers     cache.Indexers
	actorOpts    []actors.Option
	tick         time.Duration
	leaveTimeout time.Duration
	releasedTTL  time.Duration
	leases       coordinationv1client.LeasesGetter
	namespace    string
	leaseDur     time.Duration
	renewDL      time.Duration
	retry        time.Duration
	rejoin       func(context.Context) (*cluster.Cluster, error)
	drainTimeout time.Duration
	catchUp      time.Duration
	maxMoves     int
	noWarm       bool
	// name is carried by the member's ids; nil: the host's name.
	name *string
	// access: what to check the member may do at Run (WithAccessCheck).
	access *access
}

// Defaults.
const (
	DefaultRanges       = 16
	DefaultTick         = 200 * time.Millisecond
	DefaultLeaveTimeout = 30 * time.Second
	DefaultReleasedTTL  = 5 * time.Minute
	// The lease timings: a lost member's ranges move about
	// DefaultLeaseDuration after its last renewal; a member that cannot
	// renew stops calling handlers DefaultRenewDeadline after the start of
	// its last successful renewal.
	DefaultLeaseDuration = 5 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = time.Second
	// DefaultDrainTimeout bounds how long a released range waits for its
	// handlers to be given what its informer had (the core ends the wait:
	// DrainTimeUp). An acquired range waits for its informer to reach what
	// the previous deliverer had given as long as that takes, and logs it
	// every DefaultCatchUpTimeout.
	DefaultDrainTimeout   = 10 * time.Second
	DefaultCatchUpTimeout = 30 * time.Second
	// MaxRanges bounds WithRanges: each range a member owns is an informer.
	MaxRanges = 1024
)

func buildOptions(opts []Option) options {
	o := options{ranges: DefaultRanges, maxMoves: -1, field: UID, tick: DefaultTick, leaveTimeout: DefaultLeaveTimeout, releasedTTL: DefaultReleasedTTL,
		leaseDur: DefaultLeaseDuration, renewDL: DefaultRenewDeadline, retry: DefaultRetryPeriod,
		drainTimeout: DefaultDrainTimeout, catchUp: DefaultCatchUpTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithRanges sets the number of virtual ranges the hash space is split
// into (default 16). It must be the same on every member of a group, and
// at least the number of members that should share the work.
func WithRanges(n int) Option { return func(o *options) { o.ranges = n } }

// WithHashField sets the field that places objects in ranges (UID by
// default, or Namespace). It must be the same on every member of a group.
func WithHashField(f HashField) Option { return func(o *options) { o.field = f } }

// WithResyncPeriod sets the handlers' default resync period (default 0: no
// resyncs), as NewSharedIndexInformer's defaultEventHandlerResyncPeriod.
func WithResyncPeriod(d time.Duration) Option { return func(o *options) { o.resync = d } }

// WithIndexers sets the cache's indexers.
func WithIndexers(ix cache.Indexers) Option { return func(o *options) { o.indexers = ix } }

// WithInformerOptions passes options to every range's informer: tracer and
// meter providers, delta sampler, logger, WatchList, page size, name. The
// sharded informer's own spans, metrics and logs use the same providers and
// logger. The actor system is always the cluster's.
func WithInformerOptions(opts ...actors.Option) Option {
	return func(o *options) { o.actorOpts = append(o.actorOpts, opts...) }
}

// WithTickInterval sets the protocol's clock (default 200ms): a starting
// member waits at most 5 ticks for the others' answers, heartbeats go every
// 5 ticks, unanswered asks are repeated every tick. A settled member with
// nothing moving gets its ticks in batches, those of a second (of a lease
// retry period, if shorter) at once: it counts the same ticks and wakes up
// once a second, and notices a lapsed peer lease up to that much later.
func WithTickInterval(d time.Duration) Option { return func(o *options) { o.tick = d } }

// WithLeaveTimeout bounds a graceful leave (default 30s): ranges that no
// new owner has asked for by then stop being delivered anyway.
func WithLeaveTimeout(d time.Duration) Option { return func(o *options) { o.leaveTimeout = d } }

// WithReleasedKeyTTL sets how long Released remembers the keys of a range
// this member released (default 5 minutes).
func WithReleasedKeyTTL(d time.Duration) Option { return func(o *options) { o.releasedTTL = d } }

// WithLeases gives the member the API server's coordination.k8s.io/v1
// Leases of namespace (for example clientset.CoordinationV1()), where
// each member keeps its lease: the fencing that keeps a range's handlers on
// one member at a time through pauses and partitions (docs/sharding.md).
// Required. The member needs get, list, watch, create, update and delete
// on leases there. A group is its name within namespace: every member that
// keeps its lease there under the group's name is taken for a peer, so two
// groups of one name, on two clusters, must not share a namespace.
func WithLeases(leases coordinationv1client.LeasesGetter, namespace string) Option {
	return func(o *options) { o.leases, o.namespace = leases, namespace }
}

// WithLeaseTimings sets the leases' timing, as client-go's leader election:
// a member writes its lease every retryPeriod, stops calling handlers
// renewDeadline after the start of its last successful write, and the
// others take its ranges over once they have seen its lease unchanged for
// duration. Defaults 5s, 3s, 1s; renewDeadline must be below duration, and
// retryPeriod below renewDeadline. duration − renewDeadline must cover the
// clocks' rate difference over duration and a handler call.
func WithLeaseTimings(duration, renewDeadline, retryPeriod time.Duration) Option {
	return func(o *options) { o.leaseDur, o.renewDL, o.retry = duration, renewDeadline, retryPeriod }
}

// WithMemberName sets the name this member's ids carry (Member, Status,
// logs, the leases' annotation, the telemetry's member attribute), so
// that they can be tied to a process or pod: the pod's name on
// Kubernetes. It defaults to the host's name (os.Hostname, a pod's name
// unless the pod sets spec.hostname); "" leaves it out. Characters other
// than letters, digits, '.', '_' and '-' become '-', and it is cut to 63.
func WithMemberName(name string) Option { return func(o *options) { o.name = &name } }

// WithRejoin gives the member a way to make a new cluster member when it
// was fenced. A member fenced because the cluster's provider dropped its
// node (its keep-alive lapsed in a pause, say) is never shown again to the
// others (protoactor blocks a node that left for good), so only a new
// cluster member, with a new id, can rejoin: newCluster configures and
// starts one as the first was; the old one is shut down, its provider
// first. An error (or a panic) from newCluster is tried again after 1, 2,
// 4, 8 and 16 s. Without it, the member rejoins on its cluster member,
// which works when the provider kept it (its lease lapsed, or it lost the
// API server). A member that cannot rejoin gives up (Err): CheckLive fails.
func WithRejoin(newCluster func(context.Context) (*cluster.Cluster, error)) Option {
	return func(o *options) { o.rejoin = newCluster }
}

// WithMaxMoves bounds the ranges taken from members that stay in the group
// at one placement (when the view changes): the others move at the next
// placements, once these have, so that a burst of joins does not make
// every new member list its share at once. Ranges of a member that left
// always move. Default: a quarter of the ranges (at least 1); 0: no bound.
func WithMaxMoves(n int) Option { return func(o *options) { o.maxMoves = n } }

// moves is the bound WithMaxMoves sets.
func (o options) moves() int {
	if o.maxMoves < 0 {
		return max(1, o.ranges/4)
	}
	return o.maxMoves
}

// WithoutWarmStarts makes every range's informer list its range, also when
// the member that delivers it could hand over a copy of its cache (a warm
// start, the default: the new owner watches from the copy's
// resourceVersion without a list).
func WithoutWarmStarts() Option { return func(o *options) { o.noWarm = true } }
