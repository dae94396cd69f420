package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
)

var _ cache.SharedIndexInformer = (*Informer)(nil)

// Informer is one member's part of a sharded informer group: a
// cache.SharedIndexInformer whose handlers, cache and listers see only the
// objects of the ranges this member owns. Each owned range is listed and
// watched by an informer of its own (actors.SharedIndexInformer) with the
// range's shard selector; the group's members agree on who owns what
// through package handover's protocol, over the protoactor cluster.
//
// All methods may be called by multiple goroutines simultaneously. A
// handler's calls never overlap, whatever range they come from.
type Informer struct {
	c       *cluster.Cluster
	group   string
	lw      cache.ListerWatcher
	example runtime.Object
	o       options
	// selfID is this member's id in the cluster's topology (the provider's:
	// the etcd provider's is not the actor system's id), found by address
	// in the first topology that holds this member.
	selfID atomic.Pointer[handover.MemberID]
	log    *slog.Logger
	filter *filter
	tel    *shardTelemetry
	core   *handover.Core // used by the group actor only
	key    string         // in the process's registry of groups
	joined time.Time

	mu                sync.Mutex
	started, stopped  bool
	regs              map[*registration]struct{}
	regSeq            int
	retired           actors.Stats           // counters of the range informers that stopped
	ranges            map[int]*rangeInformer // running, by range
	transform         cache.TransformFunc
	watchErrorHandler cache.WatchErrorHandlerWithContext
	indexers          cache.Indexers
	released          map[string]time.Time // keys of released ranges
	handovers         []Handover           // the last maxHandovers
	runCtx            context.Context
	pid               *actor.PID

	active    atomic.Pointer[[]*rangeInformer] // delivered ranges, by index
	protocol  atomic.Pointer[handover.Status]
	synced    atomic.Bool
	abandoned atomic.Bool
	failed    atomic.Pointer[string]
	left      chan struct{}
	leftOnce  sync.Once
	stoppedCh chan struct{}
	signals   signals
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
// registered in its config. New checks the group's settings with the
// members already in it: a different range count or hash field is an
// error, and changes nothing on them. One informer per group runs on a
// member: New reserves the group's name on c until Run returns.
func New(c *cluster.Cluster, group string, lw cache.ListerWatcher, exampleObject runtime.Object, opts ...Option) (*Informer, error) {
	if c == nil || c.ActorSystem == nil {
		return nil, errors.New("shard: nil cluster")
	}
	if strings.TrimSpace(group) == "" {
		return nil, errors.New("shard: empty group name")
	}
	if strings.ContainsAny(group, " \t\n") {
		return nil, fmt.Errorf("shard: group name %q contains spaces", group)
	}
	if lw == nil {
		return nil, errors.New("shard: nil ListerWatcher")
	}
	o := buildOptions(opts)
	if o.ranges < 1 || o.ranges > MaxRanges {
		return nil, fmt.Errorf("shard: %d ranges; want 1 to %d", o.ranges, MaxRanges)
	}
	if o.field != UID && o.field != Namespace {
		return nil, fmt.Errorf("shard: unknown hash field %q; want %q or %q", o.field, UID, Namespace)
	}
	if o.tick <= 0 {
		return nil, fmt.Errorf("shard: tick interval %v; want more than 0", o.tick)
	}
	key := c.ActorSystem.ID + "/" + group
	if _, dup := groups.LoadOrStore(key, struct{}{}); dup {
		return nil, fmt.Errorf("shard: group %q already has an informer on this member", group)
	}
	_, _, log := actors.TelemetryOf(o.actorOpts...)
	if log == nil {
		log = slog.New(logr.ToSlogHandler(klog.Background()))
	}
	log = log.With("group", group, "address", c.ActorSystem.Address())
	if err := probe(c, group, o); err != nil {
		groups.Delete(key)
		return nil, err
	}
	s := &Informer{
		c: c, group: group, lw: lw, example: exampleObject, o: o, log: log, key: key,
		filter:    &filter{field: o.field, log: log},
		regs:      map[*registration]struct{}{},
		ranges:    map[int]*rangeInformer{},
		indexers:  cache.Indexers{},
		released:  map[string]time.Time{},
		left:      make(chan struct{}),
		stoppedCh: make(chan struct{}),
	}
	for k, v := range o.indexers {
		s.indexers[k] = v
	}
	s.tel = newShardTelemetry(s)
	empty := []*rangeInformer{}
	s.active.Store(&empty)
	return s, nil
}

// probe asks the members of c that run group for their settings.
func probe(c *cluster.Cluster, group string, o options) error {
	timeout := c.Config.RequestTimeoutTime
	if timeout <= 0 || timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	type answer struct {
		member string
		hello  *shardpb.Hello
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers []answer
	)
	for _, m := range c.MemberList.Members().Members() {
		if m.Id == c.ActorSystem.ID {
			continue
		}
		wg.Add(1)
		go func(m *cluster.Member) {
			defer wg.Done()
			res, err := c.ActorSystem.Root.RequestFuture(actor.NewPID(m.Address(), actorName(group)), &shardpb.Probe{Group: group}, timeout).Result()
			if h, ok := res.(*shardpb.Hello); ok && err == nil {
				mu.Lock()
				answers = append(answers, answer{m.Id, h})
				mu.Unlock()
			}
		}(m)
	}
	wg.Wait()
	for _, a := range answers {
		if int(a.hello.Ranges) != o.ranges || a.hello.HashField != string(o.field) {
			return fmt.Errorf("shard: group %q: member %s has %d ranges hashed on %s, this one %d on %s: every member of a group needs the same settings",
				group, a.member, a.hello.Ranges, a.hello.HashField, o.ranges, o.field)
		}
	}
	return nil
}

// Group returns the group's name; Member this member's id.
func (s *Informer) Group() string  { return s.group }
func (s *Informer) Member() string { return string(s.self()) }

// self is this member's id, "" until the group actor has seen it in a
// topology.
func (s *Informer) self() handover.MemberID {
	if p := s.selfID.Load(); p != nil {
		return *p
	}
	return ""
}

// Run joins the group and serves this member's ranges until stopCh is
// closed, then leaves the group gracefully.
func (s *Informer) Run(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.RunWithContext(ctx)
}

// RunWithContext joins the group and serves this member's ranges until ctx
// is cancelled. Then it leaves gracefully: the members that take its ranges
// over list them first, and it delivers them until they ask, for at most
// the leave timeout (WithLeaveTimeout). It returns once it has left and
// every range informer has stopped.
func (s *Informer) RunWithContext(ctx context.Context) {
	s.mu.Lock()
	if s.started || s.stopped {
		s.mu.Unlock()
		return
	}
	s.started = true
	s.runCtx = ctx
	s.joined = time.Now()
	pid, err := s.c.ActorSystem.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &groupActor{s: s} }), actorName(s.group))
	if err != nil {
		s.stopped = true
		s.mu.Unlock()
		s.log.Error("cannot start the group's actor", "err", err)
		s.finishStop()
		return
	}
	s.pid = pid
	s.mu.Unlock()
	s.log.Info("joining sharded informer group", "ranges", s.o.ranges, "hashField", string(s.o.field))

	select {
	case <-ctx.Done():
		s.c.ActorSystem.Root.Send(pid, &handover.Leave{})
		select {
		case <-s.left:
		case <-time.After(s.o.leaveTimeout + 10*s.o.tick + 5*time.Second):
			s.log.Error("the graceful leave did not end in time; stopping", "timeout", s.o.leaveTimeout)
		}
	case <-s.left: // failed
	}
	if !s.abandoned.Load() {
		_ = s.c.ActorSystem.Root.PoisonFuture(pid).Wait()
	}
	s.mu.Lock()
	s.stopped = true
	running := make([]*rangeInformer, 0, len(s.ranges))
	for _, ri := range s.ranges {
		running = append(running, ri)
	}
	s.mu.Unlock()
	for _, ri := range running {
		ri.cancel()
		<-ri.done
	}
	s.setActive()
	s.finishStop()
}

func (s *Informer) finishStop() {
	groups.Delete(s.key)
	s.tel.close()
	close(s.stoppedCh)
	s.signals.poke(s)
}

// Abandon stops this member at once, as a crash would, for fault drills
// and tests: its group actor stops (it answers nothing and says no
// goodbye), its handlers get no further call (calls in flight finish
// first), and Run returns. The other members take its ranges over once the
// cluster's provider drops the member from the topology.
func (s *Informer) Abandon() {
	s.mu.Lock()
	if !s.started || s.stopped || s.pid == nil {
		s.mu.Unlock()
		return
	}
	pid := s.pid
	s.mu.Unlock()
	if !s.abandoned.CompareAndSwap(false, true) {
		return
	}
	_ = s.c.ActorSystem.Root.StopFuture(pid).Wait()
	s.mu.Lock()
	var waits []<-chan struct{}
	for _, ri := range s.ranges {
		ri.delivering = false
		for _, rreg := range ri.regs {
			_ = ri.inf.RemoveEventHandler(rreg)
			if sc, ok := rreg.(actors.Registration); ok {
				waits = append(waits, sc.ShutdownChan())
			}
		}
		clear(ri.regs)
	}
	s.setActiveLocked()
	s.mu.Unlock()
	for _, w := range waits {
		<-w
	}
	s.log.Info("abandoned the group")
	s.leftOnce.Do(func() { close(s.left) })
}

// HasSynced is true once this member delivers every range it owns (each
// range's informer synced and its handlers given the range's objects). As
// client-go's, it stays true once it is.
func (s *Informer) HasSynced() bool {
	if s.synced.Load() {
		return true
	}
	st := s.protocol.Load()
	if st != nil && st.Settled && len(st.View) > 0 {
		s.synced.Store(true)
		return true
	}
	return false
}

// HasSyncedChecker returns a checker whose Done channel closes when
// HasSynced becomes true.
func (s *Informer) HasSyncedChecker() cache.DoneChecker {
	return s.signals.add("shard "+s.group, s.HasSynced)
}

// IsStopped reports whether Run has returned.
func (s *Informer) IsStopped() bool {
	select {
	case <-s.stoppedCh:
		return true
	default:
		return false
	}
}

// Stopped is closed once Run has returned.
func (s *Informer) Stopped() <-chan struct{} { return s.stoppedCh }

// LastSyncResourceVersion returns the highest resource version among the
// delivered ranges' informers ("" when none has synced).
func (s *Informer) LastSyncResourceVersion() string {
	best, bestN := "", int64(-1)
	for _, ri := range *s.active.Load() {
		rv := ri.inf.LastSyncResourceVersion()
		if n, err := strconv.ParseInt(rv, 10, 64); err == nil && n > bestN {
			best, bestN = rv, n
		} else if err != nil && best == "" {
			best = rv
		}
	}
	return best
}

// SetTransform sets the transform of every range's informer; before Run.
func (s *Informer) SetTransform(t cache.TransformFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("shard: the transform cannot change once the informer has started")
	}
	s.transform = t
	return nil
}

// SetWatchErrorHandler sets every range informer's watch error handler;
// before Run.
func (s *Informer) SetWatchErrorHandler(h cache.WatchErrorHandler) error {
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { h(r, err) })
}

// SetWatchErrorHandlerWithContext is SetWatchErrorHandler with a context.
func (s *Informer) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("shard: the watch error handler cannot change once the informer has started")
	}
	s.watchErrorHandler = h
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
	for _, ri := range s.ranges {
		if err := ri.inf.AddIndexers(ix); err != nil {
			return err
		}
	}
	for k, v := range ix {
		s.indexers[k] = v
	}
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
	act := *s.active.Load()
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
	r, err := s.RangeOf(obj)
	if err != nil {
		return false
	}
	for _, ri := range *s.active.Load() {
		if ri.r.Index == r.Index {
			return true
		}
	}
	return false
}

// Released reports whether key (namespace/name) was the key of an object in
// a range this member released, and is not in a range it delivers now. A
// worker drops such a key from its queue before reconciling it: the range's
// new owner has it, and its handlers get the object. Keys are remembered for
// WithReleasedKeyTTL.
func (s *Informer) Released(key string) bool {
	for _, ri := range *s.active.Load() {
		if _, ok, _ := ri.inf.GetIndexer().GetByKey(key); ok {
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

func (s *Informer) rememberReleased(keys []string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.released {
		if now.Sub(at) > s.o.releasedTTL {
			delete(s.released, k)
		}
	}
	for _, k := range keys {
		s.released[k] = now
	}
}

// setActive publishes the delivered ranges, sorted.
func (s *Informer) setActive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setActiveLocked()
}

func (s *Informer) setActiveLocked() {
	act := make([]*rangeInformer, 0, len(s.ranges))
	if !s.stopped {
		for _, ri := range s.ranges {
			if ri.delivering {
				act = append(act, ri)
			}
		}
	}
	slices.SortFunc(act, func(a, b *rangeInformer) int { return a.r.Index - b.r.Index })
	s.active.Store(&act)
}

// baseAttrs are the sharded informer's span and metric attributes.
func (s *Informer) baseAttrs() []attribute.KeyValue {
	return []attribute.KeyValue{AttrGroup.String(s.group), AttrMember.String(string(s.self()))}
}

// Err returns why the member left the group on its own (settings that
// differ from the group's), "" if it did not.
func (s *Informer) Err() string {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return ""
}

// signals are the DoneCheckers handed out by HasSyncedChecker and the
// registrations' ones, checked whenever the protocol's state changes.
type signals struct {
	mu sync.Mutex
	l  []*doneSignal
}

type doneSignal struct {
	name string
	ch   chan struct{}
	done func() bool
	once sync.Once
}

func (d *doneSignal) Name() string            { return d.name }
func (d *doneSignal) Done() <-chan struct{}   { return d.ch }
func (d *doneSignal) check()                  { d.once.Do(func() { close(d.ch) }) }
func (d *doneSignal) ready(stopped bool) bool { return d.done() || stopped }

func (g *signals) add(name string, done func() bool) cache.DoneChecker {
	d := &doneSignal{name: name, ch: make(chan struct{}), done: done}
	if done() {
		d.check()
		return d
	}
	g.mu.Lock()
	g.l = append(g.l, d)
	g.mu.Unlock()
	return d
}

// poke closes the channels whose condition holds.
func (g *signals) poke(s *Informer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	kept := g.l[:0]
	for _, d := range g.l {
		if d.done() {
			d.check()
		} else {
			kept = append(kept, d)
		}
	}
	clear(g.l[len(kept):])
	g.l = kept
}
