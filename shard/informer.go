package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"go.opentelemetry.io/otel/attribute"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/donesignal"
	"github.com/actorinformer/actorinformer/internal/pulse"
	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
	"github.com/actorinformer/actorinformer/telemetry"
)

var _ cache.SharedIndexInformer = (*Informer)(nil)

// Informer is one member's part of a sharded informer group: a
// cache.SharedIndexInformer whose handlers, cache and listers see only the
// objects of the ranges this member delivers. Each owned range is listed
// and watched by an informer of its own (actors.SharedIndexInformer) with
// the range's shard selector; the group's members agree on who delivers
// what through package handover's protocol, over the protoactor cluster,
// fenced by a Lease per member on the API server.
//
// All methods may be called by multiple goroutines simultaneously. A
// handler's calls never overlap, whatever range they come from.
type Informer struct {
	// shared is what the group's kinds share: the member, its ranges and
	// their deliveries (one shared per group on a member).
	*shared
	// Set by New or AddKind, then read-only.
	lw      cache.ListerWatcher
	example runtime.Object
	// kind is this informer's index in the group's kinds and its ranges'
	// (0: New's); kindKey names it among the members ("" for New's).
	kind    int
	kindKey string
	filter  *filter
	// finals: the final positions of the ranges this member released, of
	// this kind (guarded by finalMu), which its lease keeps carrying: a
	// range whose record lacks its release (its write failed) resumes from
	// there.
	finals map[int]position

	// Guarded by mu.
	regs              map[*registration]struct{}
	regSeq            int
	transform         cache.TransformFunc
	watchErrorHandler cache.WatchErrorHandlerWithContext
	indexers          cache.Indexers
	released          map[string]time.Time // keys of released ranges
	retired           actors.Stats         // counters of the range informers that stopped
	live              map[*kindRange]struct{}
}

// shared is a group's member, which every kind of the group on it shares.
type shared struct {
	// Set by New, then read-only.
	group string
	o     options
	log   *slog.Logger
	tel   *shardTelemetry
	// clock0 starts the member's monotonic clock: the protocol's and the
	// handler calls' gate's.
	clock0 time.Time
	first  *cluster.Cluster
	// current is the cluster member the running incarnation uses: first,
	// or the last one WithRejoin made.
	current atomic.Pointer[cluster.Cluster]

	// validUntil: handler calls are allowed while the clock is before it
	// (nanoseconds of the clock; 0: none). The running incarnation's core
	// sets it.
	validUntil atomic.Int64
	// validity fires as validUntil is set (a call waiting in the gate
	// looks again).
	validity pulse.Pulse
	// delivered is what the public methods read: the delivered ranges,
	// published by the running incarnation's actor.
	delivered atomic.Pointer[[]*rangeInformer]
	protocol  atomic.Pointer[handover.Status]
	self      atomic.Pointer[handover.MemberID]
	synced    atomic.Bool
	failed    atomic.Pointer[string]
	rejoins   atomic.Int64
	warm      warmStats
	finalMu   sync.Mutex // guards every kind's finals
	stoppedCh chan struct{}
	signals   donesignal.Set

	mu               sync.Mutex
	started, stopped bool
	// kinds are the group's informers on this member, by kind index
	// (guarded by mu until Run, then read-only).
	kinds     []*Informer
	handovers []Handover   // the last maxHandovers
	inc       *incarnation // the running one
	key       string       // in the process's registry of groups

	// peerRanges are the ranges the peers said they deliver (Undelivered).
	peerRanges peerRanges
	// causes are what keeps the member from delivering, as far as it knows
	// (CheckSynced, Status().Causes).
	causes *causes
	// pubMu serialises the publications of the delivered ranges.
	pubMu sync.Mutex
	// waiting says why the member stays out of its group for now (Waiting).
	waiting atomic.Pointer[string]
	// name is carried by the member's ids (WithMemberName); firstID is the
	// id New chose for the first incarnation, once its node was known.
	name    string
	firstID handover.MemberID
}

const maxHandovers = 64

// groups are the groups this process runs, per actor system: one member of
// a group per cluster member.
var groups sync.Map

func actorName(group string) string { return "actorinformer-shard/" + group }

// New creates this member's part of group: objects of exampleObject's type
// that lw lists and watches, split into ranges among the members of the
// cluster c that run the same group. c is a protoactor cluster member the
// caller configured and started, with any provider; nothing needs to be
// registered in its config. WithLeases is required: each member keeps a
// Lease on the API server, which fences it. New asks the members already
// in the group for their settings: a member whose range count or hash
// field differ from the group's stays out of it, changing nothing on the
// others, until those with other settings have left (a rollout that
// changes the range count), and says so (Waiting, CheckSynced, a log
// line). One informer per group runs on a member: New reserves the group's
// name on c until Run returns. The group's name must be a label value (at
// most 63 characters): its leases carry it in the LabelGroup label, by
// which an operator selects them.
func New(c *cluster.Cluster, group string, lw cache.ListerWatcher, exampleObject runtime.Object, opts ...Option) (*Informer, error) {
	o := buildOptions(opts)
	if err := validate(c, group, lw, o); err != nil {
		return nil, err
	}
	key := c.ActorSystem.ID + "/" + group
	if _, dup := groups.LoadOrStore(key, struct{}{}); dup {
		return nil, fmt.Errorf("shard: group %q already has an informer on this member", group)
	}
	_, _, log := actors.TelemetryOf(o.actorOpts...)
	if log == nil {
		log = telemetry.KlogLogger() // keeps With's group and member
	}
	log = log.With("group", group)
	name := ""
	if o.name != nil {
		name = *o.name
	} else if h, err := os.Hostname(); err == nil {
		name = h
	}
	sh := &shared{
		group: group, o: o, log: log, key: key, first: c,
		causes:    &causes{},
		stoppedCh: make(chan struct{}),
		clock0:    time.Now(),
		name:      memberName(name),
	}
	s := sh.newKind(lw, exampleObject, "")
	maps.Copy(s.indexers, o.indexers)
	s.current.Store(c)
	if node, ok := findSelfNode(c); ok {
		// Known now when the provider lists the member as it starts (not
		// protoactor's k8s provider: a pod only once it is ready).
		id := handover.NewMemberID(node, s.newIncarnationID())
		s.firstID = id
		s.self.Store(&id)
	}
	if conflict := sh.probe(c); conflict != "" {
		s.waiting.Store(&conflict) // logged by Run, once the kinds are known
	}
	s.tel = newShardTelemetry(s)
	empty := []*rangeInformer{}
	s.delivered.Store(&empty)
	return s, nil
}

// newKind adds an informer of a kind to the group's, as the next kind.
func (sh *shared) newKind(lw cache.ListerWatcher, example runtime.Object, key string) *Informer {
	s := &Informer{shared: sh, lw: lw, example: example, kind: len(sh.kinds), kindKey: key,
		filter:   &filter{field: sh.o.field, log: sh.log, causes: sh.causes},
		regs:     map[*registration]struct{}{},
		indexers: cache.Indexers{},
		released: map[string]time.Time{},
		live:     map[*kindRange]struct{}{},
	}
	sh.kinds = append(sh.kinds, s)
	return s
}

// MaxKinds bounds the kinds of a group (AddKind): each range of each kind
// has an informer with a watch of its own.
const MaxKinds = 8

// AddKind adds to the group the informer of another kind: objects of
// exampleObject's type that lw lists and watches, placed in the group's
// ranges by namespace. The member that delivers a range delivers every
// kind of it: a move stops delivering all of them before the new owner's
// first call, and each kind resumes from its own position. Handlers,
// listers and HasSynced work per kind; Run of any of the group's
// informers runs the whole group (the others' Run return at once, as a
// second Run does). resource names the kind among the group's members,
// which must all have the same first kind (New's, which the members cannot
// compare) and add the same others, in any order (a member whose added
// kinds differ waits, as for other settings). Call it before Run. A group
// hashed by uid carries one kind: an owner and what it owns share a
// namespace, not a uid.
func (s *Informer) AddKind(resource schema.GroupResource, lw cache.ListerWatcher, exampleObject runtime.Object) (*Informer, error) {
	key := resource.String()
	switch {
	case lw == nil:
		return nil, errors.New("shard: AddKind: nil ListerWatcher")
	case s.o.field != Namespace:
		return nil, fmt.Errorf("shard: AddKind(%s): the group hashes by %s; only a group hashed by namespace carries several kinds (an owner and what it owns share a namespace)", key, s.o.field)
	case resource.Resource == "" || strings.ContainsAny(key, " ,;=:/+"):
		return nil, fmt.Errorf("shard: AddKind: resource %q; want a resource name and group, such as configmaps or replicasets.apps", key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.started:
		return nil, fmt.Errorf("shard: AddKind(%s): the group has started", key)
	case len(s.kinds) >= MaxKinds:
		return nil, fmt.Errorf("shard: AddKind(%s): a group carries at most %d kinds", key, MaxKinds)
	}
	for _, k := range s.kinds[1:] {
		if k.kindKey == key {
			return nil, fmt.Errorf("shard: AddKind(%s): the group has that kind", key)
		}
	}
	k := s.newKind(lw, exampleObject, key)
	maps.Copy(k.indexers, s.o.indexers)
	return k, nil
}

// Kind returns the key of the informer's kind in its group: AddKind's
// resource, or "" for New's.
func (s *Informer) Kind() string { return s.kindKey }

// allKinds are the group's informers, New's first (a copy: AddKind may
// add one meanwhile, before Run).
func (sh *shared) allKinds() []*Informer {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return slices.Clone(sh.kinds)
}

// kindOf is the group's informer of kind key (nil for none).
func (sh *shared) kindOf(key string) *Informer {
	for _, k := range sh.kinds {
		if k.kindKey == key {
			return k
		}
	}
	return nil
}

// validate refuses a group New could not run.
func validate(c *cluster.Cluster, group string, lw cache.ListerWatcher, o options) error {
	if err := checkCluster(c); err != nil {
		return err
	}
	if strings.TrimSpace(group) == "" {
		return errors.New("shard: empty group name")
	}
	if strings.ContainsAny(group, " \t\n") {
		return fmt.Errorf("shard: group name %q contains spaces", group)
	}
	if errs := validation.IsValidLabelValue(group); len(errs) > 0 {
		// The members find each other's leases by a label of the group's
		// name: an operator selects them with it too.
		return fmt.Errorf("shard: group name %q is not a label value (the group's leases carry it as %s): %s", group, LabelGroup, strings.Join(errs, "; "))
	}
	if lw == nil {
		return errors.New("shard: nil ListerWatcher")
	}
	if o.ranges < 1 || o.ranges > MaxRanges {
		return fmt.Errorf("shard: %d ranges; want 1 to %d", o.ranges, MaxRanges)
	}
	if o.field != UID && o.field != Namespace {
		return fmt.Errorf("shard: unknown hash field %q; want %q or %q", o.field, UID, Namespace)
	}
	if o.tick <= 0 {
		return fmt.Errorf("shard: tick interval %v; want more than 0", o.tick)
	}
	if o.leases == nil || o.namespace == "" {
		return errors.New("shard: no leases: pass shard.WithLeases(clientset.CoordinationV1(), namespace); members fence each other with them")
	}
	if err := (handover.Config{Ranges: o.ranges, LeaseDuration: o.leaseDur, RenewDeadline: o.renewDL, RetryPeriod: o.retry}).Validate(); err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	if o.retry < o.tick {
		return fmt.Errorf("shard: the lease's retry period %v is below the tick interval %v", o.retry, o.tick)
	}
	return nil
}

// checkCluster refuses a cluster member that could not take part in a
// group: not started, shut down, or at an address nobody can reach.
func checkCluster(c *cluster.Cluster) error {
	switch {
	case c == nil || c.ActorSystem == nil:
		return errors.New("shard: nil cluster")
	case c.Remote == nil:
		return errors.New("shard: the cluster member is not started: call c.StartMember() before shard.New")
	case c.ActorSystem.IsStopped():
		return errors.New("shard: the cluster member was shut down")
	}
	addr := c.ActorSystem.Address()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("shard: the cluster member's address is %s, which the other members cannot reach and which the provider's topology never shows: give remote.Configure a reachable host, or remote.WithAdvertisedHost the address the others reach it at (on Kubernetes, the pod's IP)", addr)
		}
	}
	return nil
}

// now is the member's monotonic clock.
func (s *Informer) now() time.Duration { return time.Since(s.clock0) }

// callable reports whether handler calls are allowed now: the member's
// claim is valid.
func (s *Informer) callable() bool { return int64(s.now()) < s.validUntil.Load() }

// protocolVersion is the handover protocol's version: members of other
// versions refuse each other.
const protocolVersion = 3

// hashSetting is the hash field, and the kinds after New's: what a
// member's hello names as its hash field.
func (sh *shared) hashSetting() string {
	if len(sh.kinds) < 2 {
		return string(sh.o.field)
	}
	keys := make([]string, 0, len(sh.kinds)-1)
	for _, k := range sh.kinds[1:] {
		keys = append(keys, k.kindKey)
	}
	slices.Sort(keys) // in any order: the kinds' data go by their keys
	return string(sh.o.field) + "+kinds=" + strings.Join(keys, ",")
}

// settings is what members of a group must agree on, as the core compares
// it.
func (sh *shared) settings() string {
	return fmt.Sprintf("%s;protocol=%d", sh.hashSetting(), protocolVersion)
}

// probe asks the members of c that run group for their settings, and
// returns how the first that differs from this member's differs ("" if
// none does).
func (sh *shared) probe(c *cluster.Cluster) string {
	group, o, field := sh.group, sh.o, sh.hashSetting()
	timeout := c.Config.RequestTimeoutTime
	if timeout <= 0 || timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	type answer struct {
		member string
		hello  *shardpb.Hello
	}
	// The asks go out together; their answers are read in turn.
	self := c.ActorSystem.Address()
	var asked []actor.Future
	for _, m := range c.MemberList.Members().Members() {
		if m.Address() == self {
			continue // this member (provider ids need not be the actor system's)
		}
		asked = append(asked, c.ActorSystem.Root.RequestFuture(actor.NewPID(m.Address(), actorName(group)), &shardpb.Probe{Group: group}, timeout))
	}
	var answers []answer
	for _, f := range asked {
		res, err := f.Result()
		if h, ok := res.(*shardpb.Hello); ok && err == nil {
			answers = append(answers, answer{h.From, h})
		}
	}
	slices.SortFunc(answers, func(a, b answer) int { return strings.Compare(a.member, b.member) })
	for _, a := range answers {
		if int(a.hello.Ranges) != o.ranges || a.hello.HashField != field || a.hello.Protocol != protocolVersion {
			return fmt.Sprintf("member %s has %d ranges hashed on %s (protocol %d), this one %d on %s (protocol %d)",
				a.member, a.hello.Ranges, a.hello.HashField, a.hello.Protocol, o.ranges, field, protocolVersion)
		}
	}
	return ""
}

// waitFor records why this member stays out of the group (its settings
// differ from the group's), and logs it when that is new.
func (s *Informer) waitFor(reason string) {
	if prev := s.waiting.Swap(&reason); prev == nil {
		s.log.Warn("this member's settings differ from the group's: it waits for the members with other settings to leave before it joins", "reason", reason)
	}
	s.signals.Poke()
}

// waitForSettings probes the group every retry period until no member
// with other settings is left; false when ctx ended first, or the cluster
// member was shut down.
func (s *Informer) waitForSettings(ctx context.Context, c *cluster.Cluster) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(s.o.retry):
		}
		if c.ActorSystem.IsStopped() {
			s.giveUp("the cluster member was shut down while the informer waited to join its group")
			return false
		}
		if reason := s.probe(c); reason != "" {
			s.waitFor(reason)
			continue
		}
		s.waiting.Store(nil)
		s.log.Info("no member with other settings is left in the group: joining it")
		return true
	}
}

// giveUp records why the member left its group for good (Err).
func (s *Informer) giveUp(reason string) {
	s.failed.CompareAndSwap(nil, &reason)
	s.log.Error("this member gives up on its group", "reason", reason)
	s.signals.Poke()
}

// Waiting returns why this member stays out of its group for now: its
// settings differ from those of members in the group ("" if they do not).
// It joins once those members have left.
func (s *Informer) Waiting() string { return loaded(&s.waiting) }

// Group returns the group's name; Member this member's id: its current
// incarnation's, its node's id in the cluster's topology, '#', then its
// name (WithMemberName) and a part new at each start or rejoin. New knows
// it when the cluster's provider lists the member as soon as it started
// (the in-memory and etcd providers); else it is "" until Run has found
// the member in the topology (protoactor's k8s provider lists a pod only
// once it is ready).
func (s *Informer) Group() string  { return s.group }
func (s *Informer) Member() string { return string(s.member()) }

func (s *Informer) member() handover.MemberID { return loaded(&s.self) }

// loaded is the value p points to, the zero value while it points to none.
func loaded[T any](p *atomic.Pointer[T]) T {
	if v := p.Load(); v != nil {
		return *v
	}
	var zero T
	return zero
}

// Run joins the group and serves this member's ranges until stopCh is
// closed, then leaves the group gracefully.
func (s *Informer) Run(stopCh <-chan struct{}) {
	s.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext joins the group and serves this member's ranges until ctx
// is cancelled. Then it leaves gracefully: the members that take its ranges
// over list them first, and it delivers them until they ask, for at most
// the leave timeout (WithLeaveTimeout). A member that is fenced (its lease
// lapsed or was revoked, or the group left it out) stops every handler
// call at once, drops its ranges and rejoins as a new incarnation (on a
// new cluster member with WithRejoin). A member whose settings differ from
// the group's waits until the members with other settings have left, then
// joins. It returns once it has left and every range informer has
// stopped, or by itself when the member gives up (Err).
func (s *Informer) RunWithContext(ctx context.Context) {
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		return
	}
	s.started = true
	s.mu.Unlock()
	s.kinds[0].run(ctx)
}

// settingsAtRun records and logs whether this member waits for members
// of other settings: New's probe, or, when kinds were added, a probe now,
// as the settings name the kinds (New's probe knew none after its own).
func (s *Informer) settingsAtRun() {
	reason := s.Waiting()
	if len(s.kinds) > 1 {
		reason = s.probe(s.first)
	}
	s.waiting.Store(nil)
	if reason != "" {
		s.waitFor(reason)
	}
}

// run runs the group, on New's informer.
func (s *Informer) run(ctx context.Context) {
	defer s.finishStop()
	s.settingsAtRun()
	s.checkAccess(ctx)
	if why := s.checkScope(ctx); why != "" {
		s.giveUp(why)
		return
	}
	c := s.first
	for {
		if s.Waiting() != "" && !s.waitForSettings(ctx, c) {
			return
		}
		inc, err := s.startIncarnation(ctx, c)
		if err != nil {
			if ctx.Err() == nil {
				s.giveUp("cannot start the group's actors: " + err.Error())
			}
			return
		}
		leaving := s.runIncarnation(ctx, inc)
		end := inc.end.Load()
		if leaving || end == nil || ctx.Err() != nil {
			return
		}
		switch {
		case end.clusterStopped:
			s.giveUp("the cluster member was shut down while the informer ran (shut it down once Run has returned)")
			return
		case end.settings != "":
			// Lost a race with members of other settings: out of the group
			// until they have left.
			s.waitFor(end.settings)
			continue
		case end.fenced == "":
			return // abandoned
		case end.leftOut && s.o.rejoin == nil:
			s.giveUp("fenced: " + end.fenced + "; the cluster's provider dropped this member, which protoactor never shows again: without WithRejoin it cannot rejoin")
			return
		}
		// Fenced: rejoin as a new incarnation.
		s.rejoins.Add(1)
		s.log.Warn("fenced: rejoining as a new member", "member", string(inc.id), "reason", end.fenced)
		if s.o.rejoin != nil {
			next, ok := s.replaceCluster(ctx, c)
			if !ok {
				return
			}
			c = next
		}
	}
}

// runIncarnation runs inc until it ends, or until ctx ends: then it
// leaves gracefully (leaving), for at most the leave timeout and a margin.
func (s *Informer) runIncarnation(ctx context.Context, inc *incarnation) (leaving bool) {
	select {
	case <-ctx.Done():
		leaving = true
		s.logLeave(inc)
		inc.leave()
		select {
		case <-inc.done:
		case <-time.After(s.o.leaveTimeout + 10*s.o.tick + 5*time.Second):
			s.log.Error("the graceful leave did not end in time; stopping", "timeout", s.o.leaveTimeout)
		}
	case <-inc.done:
	}
	inc.stop()
	return leaving
}

// replaceCluster shuts the fenced cluster member c down and makes the one
// a rejoin runs on (WithRejoin); false if it could not (Run gives up).
func (s *Informer) replaceCluster(ctx context.Context, c *cluster.Cluster) (*cluster.Cluster, bool) {
	// The old cluster member goes first: the new one may listen on its
	// address. Its provider first, while its actor system runs:
	// protoactor's k8s provider takes its member id off the pod then, and
	// a new provider on that pod would otherwise keep the old id, which the
	// others have blocked for good (and the etcd provider's keep-alive
	// would register the old node again).
	_ = c.Config.ClusterProvider.Shutdown(false)
	c.Shutdown(false)
	next, err := s.newCluster(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.giveUp("fenced, and the new cluster member to rejoin with failed: " + err.Error())
		}
		return nil, false
	}
	s.current.Store(next)
	return next, true
}

// newCluster makes the cluster member a rejoin runs on, tried as
// WithRejoin says: the provider may be out of reach a while (a member cut
// from etcd is fenced and rejoins while the cut lasts). protoactor panics
// when its provider cannot register a member: that is an error too.
func (s *Informer) newCluster(ctx context.Context) (c *cluster.Cluster, err error) {
	try := func(ctx context.Context) (done bool, _ error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("making the cluster member panicked: %v", p)
			}
			if err != nil {
				s.log.Error("cannot make a new cluster member to rejoin with", "err", err)
			}
		}()
		c, err = s.o.rejoin(ctx)
		return err == nil, nil
	}
	if werr := wait.ExponentialBackoffWithContext(ctx, rejoinBackoff, try); werr != nil && err == nil {
		err = werr
	}
	return c, err
}

// rejoinBackoff is how a rejoin tries to make its cluster member: 6
// times, about 31 s in all.
var rejoinBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6}

// Cluster returns the cluster member the informer uses now: the one given
// to New, or, after a rejoin with WithRejoin, the last one made. Shut it
// down once Run has returned.
func (s *Informer) Cluster() *cluster.Cluster { return s.current.Load() }

func (s *Informer) finishStop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.publish(nil)
	groups.Delete(s.key)
	s.tel.close()
	close(s.stoppedCh)
	s.signals.Poke()
}

// Abandon stops this member at once, as a crash would, for fault drills
// and tests: its actors stop (it answers nothing and says no goodbye), its
// handlers get no further call (calls in flight finish first), its lease
// stays until the others revoke it, and Run returns. The other members take
// its ranges over once its lease has lapsed.
func (s *Informer) Abandon() {
	s.mu.Lock()
	inc := s.inc
	s.mu.Unlock()
	if inc != nil {
		inc.abandon()
	}
}

// HasSynced is true once this member delivers every range it owns (each
// range's informer synced and its handlers given the range's objects). As
// client-go's, it stays true once it is.
func (s *Informer) HasSynced() bool {
	if s.synced.Load() {
		return true
	}
	st := s.protocol.Load()
	if st == nil || !st.Settled || len(st.View) == 0 {
		return false
	}
	// Settled in the protocol, and every active range's handlers have it.
	act := 0
	for _, r := range st.Ranges {
		if r.State == "active" {
			act++
		}
	}
	if len(*s.delivered.Load()) != act {
		return false
	}
	s.synced.Store(true)
	return true
}

// HasSyncedChecker returns a checker whose Done channel closes when
// HasSynced becomes true.
func (s *Informer) HasSyncedChecker() cache.DoneChecker {
	return s.signals.Add("shard "+s.group, s.HasSynced)
}

// IsStopped reports whether Run has returned.
func (s *Informer) IsStopped() bool { return closed(s.stoppedCh) }

// Stopped is closed once Run has returned.
func (s *Informer) Stopped() <-chan struct{} { return s.stoppedCh }

// LastSyncResourceVersion returns the lowest resource version among the
// delivered ranges' informers: every delivered range has caught up with
// it ("" when none has synced).
func (s *Informer) LastSyncResourceVersion() string {
	low := ""
	for _, ri := range *s.delivered.Load() {
		rv := ri.of(s).inf.LastSyncResourceVersion()
		if rv == "" {
			return ""
		}
		if low == "" {
			low = rv
		} else if n, err := resourceversion.CompareResourceVersion(rv, low); err == nil && n < 0 {
			low = rv
		}
	}
	return low
}

// SetTransform sets the transform of every range's informer; before Run.
func (s *Informer) SetTransform(t cache.TransformFunc) error {
	return s.beforeRun("transform", func() { s.transform = t })
}

// SetWatchErrorHandler sets every range informer's watch error handler;
// before Run.
func (s *Informer) SetWatchErrorHandler(h cache.WatchErrorHandler) error {
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { h(r, err) })
}

// SetWatchErrorHandlerWithContext is SetWatchErrorHandler with a context.
func (s *Informer) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
	return s.beforeRun("watch error handler", func() { s.watchErrorHandler = h })
}

// beforeRun makes a setting of the range informers (set, under s.mu)
// unless the group has started.
func (s *Informer) beforeRun(what string, set func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("shard: the " + what + " cannot change once the informer has started")
	}
	set()
	return nil
}

// GetStore returns the cache of the delivered ranges.
func (s *Informer) GetStore() cache.Store { return indexerView{s} }

// GetIndexer returns the cache of the delivered ranges: a read-only
// cache.Indexer that generated listers accept. A range's objects appear when
// its handlers get them and go when it is released.
func (s *Informer) GetIndexer() cache.Indexer { return indexerView{s} }

// AddIndexers adds indexers to every range's cache.
func (s *Informer) AddIndexers(ix cache.Indexers) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range ix {
		if _, dup := s.indexers[name]; dup {
			return fmt.Errorf("shard: indexer %q already exists", name)
		}
	}
	for kr := range s.live {
		if err := kr.inf.AddIndexers(ix); err != nil {
			return err
		}
	}
	maps.Copy(s.indexers, ix)
	return nil
}

// GetController returns a cache.Controller view of the informer.
func (s *Informer) GetController() cache.Controller { return controllerView{s} }

type controllerView struct{ s *Informer }

func (c controllerView) RunWithContext(context.Context)      {}
func (c controllerView) Run(<-chan struct{})                 {}
func (c controllerView) HasSynced() bool                     { return c.s.HasSynced() }
func (c controllerView) HasSyncedChecker() cache.DoneChecker { return c.s.HasSyncedChecker() }
func (c controllerView) LastSyncResourceVersion() string     { return c.s.LastSyncResourceVersion() }

// Ranges returns the ranges this member delivers now.
func (s *Informer) Ranges() []Range {
	act := *s.delivered.Load()
	out := make([]Range, len(act))
	for i, ri := range act {
		out[i] = ri.r
	}
	return out
}

// RangeOf returns the range obj belongs to (an object or a
// cache.DeletedFinalStateUnknown).
func (s *Informer) RangeOf(obj any) (Range, error) {
	v, err := fieldValue(obj, s.o.field)
	if err != nil {
		return Range{}, err
	}
	return Range{Index: rangeOf(Hash(v), s.o.ranges), Count: s.o.ranges}, nil
}

// Owns reports whether obj belongs to a range this member delivers now.
func (s *Informer) Owns(obj any) bool {
	_, ok := s.Epoch(obj)
	return ok
}

// Epoch returns the fencing token of the range obj belongs to, if this
// member delivers it now: the resourceVersion of the lease write that
// claimed it, higher than that of every earlier deliverer of the range.
// Downstream writes made for obj can carry it, and a store that refuses a
// token below the highest it has seen for the range refuses the writes of
// a deliverer that lost the range (docs/sharding.md).
func (s *Informer) Epoch(obj any) (uint64, bool) {
	r, err := s.RangeOf(obj)
	if err != nil {
		return 0, false
	}
	for _, ri := range *s.delivered.Load() {
		if ri.r.Index == r.Index {
			return ri.token, true
		}
	}
	return 0, false
}

// Released reports whether key (namespace/name) was the key of an object in
// a range this member released, and is not in a range it delivers now. A
// worker drops such a key from its queue before reconciling it: the range's
// new owner has it, and its handlers get the object. Keys are remembered for
// WithReleasedKeyTTL.
func (s *Informer) Released(key string) bool {
	for _, ri := range *s.delivered.Load() {
		if _, ok, _ := ri.of(s).inf.GetIndexer().GetByKey(key); ok {
			return false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.released[key]
	if ok && time.Since(at) > s.o.releasedTTL {
		delete(s.released, key)
		return false
	}
	return ok
}

// rememberReleased remembers the keys of a released range for
// WithReleasedKeyTTL, then forgets them, whether or not another range is
// released or Released asked about them by then.
func (s *Informer) rememberReleased(keys []string) {
	s.forgetReleased()
	if len(keys) == 0 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	for _, k := range keys {
		s.released[k] = now
	}
	s.mu.Unlock()
	time.AfterFunc(s.o.releasedTTL+time.Millisecond, s.forgetReleased)
}

// reclaimed forgets the released keys of a range this member delivers
// again, whose cache is ix: they are this member's again (s.mu is held).
// While no key is remembered, it lists none.
func (s *Informer) reclaimed(ix cache.Indexer) {
	if len(s.released) == 0 {
		return
	}
	for _, k := range ix.ListKeys() {
		delete(s.released, k)
	}
}

// forgetReleased forgets the released keys remembered for longer than
// WithReleasedKeyTTL.
func (s *Informer) forgetReleased() {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.released {
		if now.Sub(at) > s.o.releasedTTL {
			delete(s.released, k)
		}
	}
	if len(s.released) == 0 {
		s.released = map[string]time.Time{} // a map keeps its table when emptied
	}
}

// publish makes those of ranges whose handlers may be called the delivered
// ones that the public methods read.
func (s *Informer) publish(ranges []*rangeInformer) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.storeDelivered(ranges)
}

// publishAdd adds a range to the delivered ones, from any goroutine, if its
// handlers may be called: before they are, so that a handler finds its
// object in GetIndexer, as client-go's handlers do. A range that stops
// being delivered is marked so before it is withdrawn (publish), so it
// cannot come back here.
func (s *Informer) publishAdd(ri *rangeInformer) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	cur := *s.delivered.Load()
	if slices.Contains(cur, ri) {
		return
	}
	s.storeDelivered(append(slices.Clone(cur), ri))
}

func (s *Informer) storeDelivered(ranges []*rangeInformer) {
	act := make([]*rangeInformer, 0, len(ranges))
	for _, ri := range ranges {
		if ri.delivering.Load() {
			act = append(act, ri)
		}
	}
	slices.SortFunc(act, func(a, b *rangeInformer) int { return a.r.Index - b.r.Index })
	s.delivered.Store(&act)
	s.signals.Poke()
}

// baseAttrs are the sharded informer's metric attributes: the group and
// the member's name, which outlives its incarnations.
func (s *Informer) baseAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{AttrGroup.String(s.group), AttrMemberName.String(s.name)}
}

// spanAttrs are its spans': those and the member's id.
func (s *Informer) spanAttrs() []attribute.KeyValue {
	return append(s.baseAttrs(), AttrMember.String(string(s.member())))
}

// Err returns why the member gave up on its group ("" if it did not):
// fenced after the cluster's provider dropped it, without WithRejoin, or
// with a WithRejoin that failed; its cluster member shut down under it; or
// its actors could not start. Run then returns by itself, and CheckLive
// fails.
func (s *Informer) Err() string { return loaded(&s.failed) }

// logLeave logs the start of a graceful leave: the ranges the member
// delivers then, which its peers take over.
func (s *Informer) logLeave(inc *incarnation) {
	ranges := s.Ranges()
	idx := make([]int, len(ranges))
	for i, r := range ranges {
		idx[i] = r.Index
	}
	inc.log.Info("leaving the group gracefully: handing its ranges over", "delivered", len(ranges), "ranges", idx, "leaveTimeout", s.o.leaveTimeout)
}
