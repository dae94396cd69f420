package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// The sharded demo (--members N, N ≥ 2): N members of one sharded informer
// group (package shard) in this process. Each member is a protoactor
// cluster member of its own (actor system, remote on loopback) and the
// members find each other through protoactor's in-memory test provider,
// the provider meant for one machine. Each has the demo's handlers,
// the controller with its traced workqueue included, on its own ranges.

const (
	// shardGroup is the group's name.
	shardGroup = "pods"
	// maxMembers bounds the members alive at once (add member).
	maxMembers = 8
	// maxGone bounds the stopped members kept for the page and the totals;
	// older ones are folded into the fleet's retired counters.
	maxGone = 16
	// providerRefresh is how often a member refreshes its entry in the
	// in-memory provider.
	providerRefresh = 200 * time.Millisecond
	// maxPartition bounds a partition.
	maxPartition = time.Minute
)

// memberState is where a member is in its life.
type memberState string

const (
	memberLive    memberState = "live"
	memberLeaving memberState = "leaving"
	memberLeft    memberState = "left"
	memberKilled  memberState = "killed"
)

// member is one member of the group: its cluster member, its sharded
// informer, its handlers and controller.
type member struct {
	name     string // m1, m2, ... in the order they were added
	seq      int    // the number in the name
	c        *cluster.Cluster
	prov     *test.Provider
	part     *partition
	inf      *shard.Informer
	handlers []*demoHandler
	ctl      *controller // nil: --workers 0
	cancel   context.CancelFunc
	done     chan struct{} // closed when Run has returned
	started  time.Time

	mu    sync.Mutex
	state memberState
	ended time.Time
	// dropped: the provider has dropped the member (a killed member, after
	// the TTL; a member that left, at once).
	dropped bool
	final   *shard.Status // the status once Run has returned
	// closed: its cluster member is shut down.
	closed bool
}

// endedAt is when the member was killed or stopped, zero while it runs.
func (m *member) endedAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended
}

// hasStopped reports whether the member's Run has returned.
func (m *member) hasStopped() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *member) getState() (memberState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.dropped
}

// status is the member's status, its last one once it has stopped.
func (m *member) status() shard.Status {
	m.mu.Lock()
	final := m.final
	m.mu.Unlock()
	if final != nil {
		return *final
	}
	return m.inf.Status()
}

// fleet is the members of the group, those alive and those that stopped.
// Its methods may be called by multiple goroutines simultaneously.
type fleet struct {
	client  kubernetes.Interface
	sim     *simCluster // nil: a real cluster
	cfg     config
	tel     *otelSetup
	logger  *slog.Logger
	agent   *test.InMemAgent
	stamps  *stampMap     // nil: no web page
	release chan struct{} // the injector's: handler faults end when closed
	ctx     context.Context
	owners  *ownerLog

	mu      sync.Mutex
	members []*member // every member kept, in the order added
	seq     int
	// retired are the counters of the members folded away (maxGone).
	retired actors.Stats
	drops   map[*member]*time.Timer // killed members the provider drops after the TTL
	stopped bool
	wg      sync.WaitGroup // members' Run goroutines, leaves, shutdowns
}

func newFleet(ctx context.Context, cfg config, client kubernetes.Interface, sim *simCluster, tel *otelSetup, logger *slog.Logger, stamps *stampMap, release chan struct{}) *fleet {
	return &fleet{
		client: client, sim: sim, cfg: cfg, tel: tel, logger: logger, stamps: stamps, release: release, ctx: ctx,
		agent: test.NewInMemAgent(), drops: map[*member]*time.Timer{}, owners: newOwnerLog(cfg.ranges),
	}
}

// errConflict is a member fault that the fleet's state refuses now:
// killing the last member, partitioning one twice, too many members.
var errConflict = errors.New("conflict")

// add starts a member: its cluster member joins the others through the
// in-memory provider, then its informer joins the group and takes its
// share of the ranges (listing them before asking their owners for them).
func (f *fleet) add() (*member, error) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, errors.New("the demo is stopping")
	}
	if n := len(f.liveLocked()); n >= maxMembers {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: %d members run already, the most this demo starts", errConflict, n)
	}
	f.seq++
	seq := f.seq
	name := fmt.Sprintf("m%d", seq)
	f.mu.Unlock()

	m := &member{name: name, seq: seq, part: &partition{}, done: make(chan struct{}), state: memberLive, started: time.Now()}
	m.prov = test.NewTestProvider(f.agent, test.WithTestProviderRefreshTTL(providerRefresh))
	// protoactor's logs go to the demo's logger, as the informer's, at
	// actors.SystemLogger's levels: its life at debug, a peer's departure
	// below warn (the default --log-level).
	sys := actors.NewActorSystem(actors.SystemLogger(f.logger.With("member", name)))
	// A group sends a few messages a second: queues of 4096 instead of
	// protoactor's 1,000,000 (16 MB per peer, allocated at once).
	// shard.RemoteOption adds to the partition's dial and server options:
	// after them.
	remoteOpts := append([]remote.ConfigOption{remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096)},
		m.part.remoteOptions()...)
	remoteOpts = append(remoteOpts, shard.RemoteOption())
	m.c = cluster.New(sys, cluster.Configure("actorinformer-demo", m.prov, disthash.New(),
		remote.Configure("127.0.0.1", 0, remoteOpts...), shard.ClusterOptions()...))
	m.c.StartMember()

	opts := []actors.Option{actors.WithTracerProvider(f.tel.tracerProvider), actors.WithLogger(f.logger.With("member", name))}
	if f.tel.meterProvider != nil {
		opts = append(opts, actors.WithMeterProvider(f.tel.meterProvider))
	}
	if f.tel.deltaSampler != nil {
		opts = append(opts, actors.WithDeltaSampler(f.tel.deltaSampler))
	}
	inf, err := shard.New(m.c, shardGroup, podsListWatch(f.client, f.cfg.namespace), &corev1.Pod{},
		shard.WithLeases(f.client.CoordinationV1(), leaseNamespace(f.cfg.namespace)),
		shard.WithLeaseTimings(demoLeaseDuration, demoRenewDeadline, demoRetryPeriod),
		shard.WithRanges(f.cfg.ranges),
		shard.WithResyncPeriod(f.cfg.resync),
		shard.WithIndexers(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		// The members share the demo's MeterProvider: their metrics carry
		// the member's name, which must differ (the host's is one).
		shard.WithMemberName(name),
		shard.WithInformerOptions(opts...))
	if err != nil {
		m.shutdownCluster()
		return nil, err
	}
	m.inf = inf
	if f.cfg.workers > 0 {
		// A queue of its own name per member, so that their metrics differ.
		m.ctl = newController(queueName+"-"+name, inf.GetIndexer(), f.cfg.workers, f.tel.tracerProvider, f.tel.meterProvider)
		m.ctl.released = inf.Released
	}
	m.handlers = newHandlers(handlerCount(f.cfg), f.cfg.slowHandler, f.cfg.panicEvery, f.tel.tracerProvider, m.ctl)
	for _, h := range m.handlers {
		h.fault.release = f.release
		h.stamps = f.stamps
		if err := h.register(inf); err != nil {
			m.shutdownCluster()
			return nil, err
		}
	}
	if f.stamps != nil {
		if err := inf.SetTransform(stampTransform(f.stamps, len(m.handlers))); err != nil {
			m.shutdownCluster()
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(f.ctx)
	m.cancel = cancel

	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		cancel()
		m.shutdownCluster()
		return nil, errors.New("the demo is stopping")
	}
	f.members = append(f.members, m)
	slices.SortFunc(f.members, func(a, b *member) int { return a.seq - b.seq })
	f.foldLocked()
	f.wg.Add(1)
	f.mu.Unlock()
	if m.ctl != nil {
		m.ctl.start()
	}
	go func() {
		defer f.wg.Done()
		defer close(m.done)
		inf.RunWithContext(ctx)
		st := inf.Status()
		m.mu.Lock()
		m.final = &st
		if m.ended.IsZero() {
			m.ended = time.Now()
		}
		m.mu.Unlock()
	}()
	return m, nil
}

// addMany starts n members at once (a cluster member takes a second to
// start).
func (f *fleet) addMany(n int) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = f.add() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// podsListWatch lists and watches pods (in ns, "" for all) through client;
// shard adds each range's selector to the options.
func podsListWatch(client kubernetes.Interface, ns string) cache.ListerWatcher {
	return podsLW{ListWatch: &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}, client: client}
}

// podsLW says, as the factory's list-watches do, that client-go's fake
// clientset cannot stream a WatchList.
type podsLW struct {
	*cache.ListWatch
	client kubernetes.Interface
}

func (lw podsLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(lw.client)
}

// shutdownCluster stops the member's cluster member: the provider first,
// so that the others see it go, then the rest. Idempotent.
func (m *member) shutdownCluster() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed, m.dropped = true, true
	m.mu.Unlock()
	_ = m.prov.Shutdown(false)
	// cluster.Shutdown(false) leaves the gossip loop running until its next
	// tick, up to shard.DefaultGossipInterval (2 s) later; stopping the
	// gossip first ends it now.
	m.c.Gossip.Shutdown()
	m.c.Shutdown(false)
}

// live returns the members alive (not killed, not left or leaving), in
// the order added.
func (f *fleet) live() []*member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.liveLocked()
}

func (f *fleet) liveLocked() []*member {
	var out []*member
	for _, m := range f.members {
		if st, _ := m.getState(); st == memberLive {
			out = append(out, m)
		}
	}
	return out
}

// all returns every member kept, in the order added.
func (f *fleet) all() []*member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members)
}

// byName finds a member: an error wrapping errBadFault if none has that
// name.
func (f *fleet) byName(name string) (*member, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, m := range f.members {
		if m.name == name {
			return m, nil
		}
		names = append(names, m.name)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: no member named (members: %s)", errBadFault, joinNames(names))
	}
	return nil, fmt.Errorf("%w: unknown member %q (members: %s)", errBadFault, name, joinNames(names))
}

// liveMember finds a live member that is not the only one, for a kill or a
// leave.
func (f *fleet) liveMember(name, what string) (*member, error) {
	m, err := f.byName(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, _ := m.getState(); st != memberLive {
		return nil, fmt.Errorf("%w: member %s is %s already", errConflict, name, st)
	}
	if len(f.liveLocked()) == 1 {
		return nil, fmt.Errorf("%w: member %s is the last one: %s it and nothing serves the ranges (add a member first)", errConflict, name, what)
	}
	return m, nil
}

// kill stops member name as a crash would: its informer stops at once and
// says no goodbye, and its cluster member's server stops. The provider
// drops it ttl later, as a real provider does once the member's lease or
// heartbeat expires; only then do the others take its ranges over.
func (f *fleet) kill(name string) (*member, error) {
	m, err := f.liveMember(name, "kill")
	if err != nil {
		return nil, err
	}
	// The owner log may not have looked since the member got its ranges:
	// it must know them to name the member in the takeovers.
	f.owners.observe(time.Now(), f.delivering())
	m.mu.Lock()
	m.state, m.ended = memberKilled, time.Now()
	m.mu.Unlock()
	// A crashed process sends and receives nothing more: its messages are
	// dropped from now on, and its server stops below.
	m.part.start(time.Now(), 100*365*24*time.Hour)
	// A crashed process's handlers do not finish their calls: end the
	// member's injected stops and delays, which would hold Abandon up.
	for _, h := range m.handlers {
		h.fault.resume()
	}
	m.inf.Abandon()
	m.c.Remote.Shutdown(false) // its server is gone: messages to it fail
	if m.ctl != nil {
		m.ctl.stop()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return m, nil // stop shuts it down
	}
	f.drops[m] = time.AfterFunc(f.cfg.memberTTL, func() { f.drop(m) })
	return m, nil
}

// drop has the provider drop a killed member.
func (f *fleet) drop(m *member) {
	f.mu.Lock()
	if _, ok := f.drops[m]; !ok {
		f.mu.Unlock()
		return
	}
	delete(f.drops, m)
	f.wg.Add(1)
	f.mu.Unlock()
	defer f.wg.Done()
	m.shutdownCluster()
}

// leave has member name leave the group gracefully: the members that take
// its ranges list them first, and it delivers them until they ask. It
// returns at once; the member is "leaving" until it has left.
func (f *fleet) leave(name string) (*member, error) {
	m, err := f.liveMember(name, "leave")
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.state = memberLeaving
	m.mu.Unlock()
	f.mu.Lock()
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		f.stopMember(m)
	}()
	return m, nil
}

// stopMember ends a live or leaving member gracefully and shuts its
// cluster member down.
func (f *fleet) stopMember(m *member) {
	m.cancel()
	<-m.done
	if m.ctl != nil {
		m.ctl.stop() // after the informer: no handler adds a key any more
	}
	m.mu.Lock()
	m.state = memberLeft
	m.mu.Unlock()
	m.shutdownCluster()
}

// partitionMember drops the messages between member name and the others
// for d.
func (f *fleet) partitionMember(name string, d time.Duration) (*member, error) {
	m, err := f.byName(name)
	if err != nil {
		return nil, err
	}
	if st, _ := m.getState(); st != memberLive {
		return nil, fmt.Errorf("%w: member %s is %s", errConflict, name, st)
	}
	now := time.Now()
	if left := m.part.left(now); left > 0 {
		return nil, fmt.Errorf("%w: member %s is partitioned already, for %s more", errConflict, name, left.Round(100*time.Millisecond))
	}
	m.part.start(now, d)
	return m, nil
}

// stop ends every member: those alive leave at once (with nobody to hand
// their ranges to, they drop them), the killed ones are dropped, and it
// waits for all.
func (f *fleet) stop() {
	f.mu.Lock()
	f.stopped = true
	for m, t := range f.drops {
		t.Stop()
		delete(f.drops, m)
	}
	members := slices.Clone(f.members)
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range members {
		switch st, _ := m.getState(); st {
		case memberLive:
			wg.Go(func() { f.stopMember(m) })
		default:
			// Killed, left or leaving: leaving ones are waited for by f.wg.
			if st == memberKilled {
				wg.Go(m.shutdownCluster)
			}
		}
	}
	wg.Wait()
	f.wg.Wait()
}

// foldLocked keeps at most maxGone stopped members: the oldest ones'
// counters go into retired.
func (f *fleet) foldLocked() {
	var gone int
	for _, m := range f.members {
		if st, _ := m.getState(); st == memberLeft || st == memberKilled {
			gone++
		}
	}
	for i := 0; gone > maxGone && i < len(f.members); {
		m := f.members[i]
		st, dropped := m.getState()
		if (st == memberLeft || st == memberKilled) && dropped && m.hasStopped() {
			sumStats(&f.retired, m.inf.Stats())
			f.members = slices.Delete(f.members, i, i+1)
			gone--
			continue
		}
		i++
	}
}

// nameOf maps a member id (a group member incarnation's: its cluster
// node's id, '#', the incarnation) to the member's name, or returns the id
// when no member has it.
func (f *fleet) nameOf(id string) string {
	if id == "" {
		return ""
	}
	node := id
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		node = id[:i]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if sys := m.c.ActorSystem.ID; sys == node || strings.HasSuffix(node, "@"+sys) {
			return m.name
		}
	}
	return id
}

// Stats sums the members' pipelines: their counters, running or stopped,
// and the backlogs and caches of those alive. Handlers are summed by name.
func (f *fleet) Stats() actors.Stats {
	f.mu.Lock()
	st := f.retired
	members := slices.Clone(f.members)
	f.mu.Unlock()
	st.QueueBacklog, st.CacheSize = 0, 0
	st.Handlers = slices.Clone(st.Handlers)
	for _, m := range members {
		sumStats(&st, m.inf.Stats())
	}
	return st
}

// sumStats adds from to st: counters, gauges, and the handlers by name.
func sumStats(st *actors.Stats, from actors.Stats) {
	st.AddCounters(from)
	st.QueueBacklog += from.QueueBacklog
	st.CacheSize += from.CacheSize
	for _, h := range from.Handlers {
		i := slices.IndexFunc(st.Handlers, func(x actors.HandlerStats) bool { return x.Name == h.Name })
		if i < 0 {
			st.Handlers = append(st.Handlers, actors.HandlerStats{Name: h.Name})
			i = len(st.Handlers) - 1
		}
		st.Handlers[i].Delivered += h.Delivered
		st.Handlers[i].Backlog += h.Backlog
		st.Handlers[i].Panics += h.Panics
	}
}

// HasSynced is true once every live member has synced.
func (f *fleet) HasSynced() bool {
	live := f.live()
	for _, m := range live {
		if !m.inf.HasSynced() {
			return false
		}
	}
	return len(live) > 0
}

// LastSyncResourceVersion is the highest among the live members'.
func (f *fleet) LastSyncResourceVersion() string {
	best, bestN := "", int64(-1)
	for _, m := range f.live() {
		rv := m.inf.LastSyncResourceVersion()
		var n int64
		if _, err := fmt.Sscan(rv, &n); err == nil && n > bestN {
			best, bestN = rv, n
		}
	}
	return best
}

// handlerHists merges the histograms of the members' handlers named name
// (of every member kept, so that the counts only grow); fault is that of
// the first live member's handler.
func (f *fleet) handlerHists(name string) (age, dur []int64, fault string, ok bool) {
	for _, m := range f.all() {
		st, _ := m.getState()
		for _, h := range m.handlers {
			if h.label != name {
				continue
			}
			age, dur = addCounts(age, h.age.counts()), addCounts(dur, h.dur.counts())
			ok = true
			if st == memberLive && fault == "" {
				fault = h.fault.String()
			}
		}
	}
	return age, dur, fault, ok
}

func addCounts(to, from []int64) []int64 {
	if to == nil {
		return from
	}
	for i := range from {
		to[i] += from[i]
	}
	return to
}

// controllerStats sums the members' controllers.
func (f *fleet) controllerStats() (ctlStats, bool) {
	if f.cfg.workers == 0 {
		return ctlStats{}, false
	}
	var s ctlStats
	for _, m := range f.all() {
		if m.ctl == nil {
			continue
		}
		c := m.ctl.stats()
		s.reconciles += c.reconciles
		s.found += c.found
		s.released += c.released
		s.workers += c.workers
		if st, _ := m.getState(); st == memberLive || st == memberLeaving {
			s.depth += c.depth
		}
	}
	return s, true
}

// waitForSync waits until every live member has synced and each range is
// delivered by exactly one of them.
func (f *fleet) waitForSync(ctx context.Context) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if f.HasSynced() && f.covered() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// covered reports whether the live members deliver every range once.
func (f *fleet) covered() bool {
	seen := make([]int, f.cfg.ranges)
	for _, m := range f.live() {
		for _, r := range m.inf.Ranges() {
			seen[r.Index]++
		}
	}
	return !slices.ContainsFunc(seen, func(n int) bool { return n != 1 })
}

// mode is the filter mode of the live members: server, client or pending,
// "mixed" when they differ.
func (f *fleet) mode() string {
	mode := ""
	for _, m := range f.live() {
		s := m.inf.Status().Mode.String()
		switch {
		case mode == "":
			mode = s
		case mode != s:
			return "mixed"
		}
	}
	return cmp.Or(mode, "pending")
}

// modeNote says what the filter mode means here.
func (f *fleet) modeNote(mode string) string {
	switch {
	case f.sim != nil:
		return "on the client: the simulated cluster (client-go's fake clientset) ignores shard selectors, so each range's informer receives every pod and keeps its range's own"
	case mode == "server":
		return "on the server: the API server applies the shard selectors (ShardedListAndWatch), so each member receives only its ranges' pods"
	case mode == "client":
		return "on the client: the API server ignores or rejects shard selectors (no ShardedListAndWatch feature gate), so each range's informer receives every pod and keeps its range's own"
	}
	return "not known until the first list answers"
}

func joinNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// The members' lease timings: shorter than the library's defaults, so that
// a killed member's ranges move about as soon as the provider drops it
// (--member-ttl).
const (
	demoLeaseDuration = 2 * time.Second
	demoRenewDeadline = 1500 * time.Millisecond
	demoRetryPeriod   = 500 * time.Millisecond
)

// leaseNamespace is where the members keep their leases: the watched
// namespace, or default when it watches every namespace.
func leaseNamespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
