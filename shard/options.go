package shard

import (
	"time"

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
}

// Defaults.
const (
	DefaultRanges       = 16
	DefaultTick         = 200 * time.Millisecond
	DefaultLeaveTimeout = 30 * time.Second
	DefaultReleasedTTL  = 5 * time.Minute
	// MaxRanges bounds WithRanges: each range a member owns is an informer.
	MaxRanges = 1024
)

func buildOptions(opts []Option) options {
	o := options{ranges: DefaultRanges, field: UID, tick: DefaultTick, leaveTimeout: DefaultLeaveTimeout, releasedTTL: DefaultReleasedTTL}
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
// member waits at most 4 ticks for the others' answers, heartbeats go every
// 5 ticks, unanswered asks are repeated every tick.
func WithTickInterval(d time.Duration) Option { return func(o *options) { o.tick = d } }

// WithLeaveTimeout bounds a graceful leave (default 30s): ranges that no
// new owner has asked for by then stop being delivered anyway.
func WithLeaveTimeout(d time.Duration) Option { return func(o *options) { o.leaveTimeout = d } }

// WithReleasedKeyTTL sets how long Released remembers the keys of a range
// this member released (default 5 minutes).
func WithReleasedKeyTTL(d time.Duration) Option { return func(o *options) { o.releasedTTL = d } }
