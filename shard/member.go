package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
	"github.com/actorinformer/actorinformer/shell"
	"github.com/actorinformer/actorinformer/stage"
)

// An incarnation is one life of this informer in its group: a member id,
// a protocol core (package handover) in an actor of its own (package
// shell), and the member's I/O actor, named actorinformer-shard/<group> on
// the cluster member so that the others find it by address. The core
// decides; its effects go to the I/O actor, which sends the messages to
// other members, runs the range informers and the lease, and turns what
// happens (the cluster's topology, messages from other members, informers
// that synced or stopped, lease writes) into the core's inputs. A fenced
// incarnation ends; Run starts the next one.
type incarnation struct {
	s    *Informer
	c    *cluster.Cluster
	id   handover.MemberID
	node handover.NodeID
	core *handover.Core
	log  *slog.Logger

	corePID, ioPID *actor.PID
	leases         *leases
	ctx            context.Context
	cancel         context.CancelFunc

	// done is closed when the incarnation has ended: Left, Fenced, Failed
	// (and it holds nothing), or abandoned.
	done     chan struct{}
	doneOnce sync.Once
	end      atomic.Pointer[ending]
	stopOnce sync.Once
	// abandoned: the actors stopped as in a crash (Abandon).
	abandoned atomic.Bool
	// quiet: the core's last step left it settled with nothing moving
	// (quietStatus); the ticker then wakes once per batch of ticks. wake
	// tells the ticker that it is quiet no longer.
	quiet atomic.Bool
	wake  chan struct{}
	// status is the core's status after its last step, rebuilt in place
	// at each step (publishing): only the core's actor touches it.
	status handover.Status
	// copies: the warm starts' copies under way, by source.
	copies copyWaits
}

// ending is how an incarnation ended.
type ending struct {
	// fenced says why it was fenced ("" if it was not); leftOut: because
	// the cluster's provider dropped its node.
	fenced  string
	leftOut bool
	// settings says why its settings lost to the group's ("" if they did
	// not).
	settings string
	// clusterStopped: its cluster member was shut down under it.
	clusterStopped bool
}

// startIncarnation starts a new incarnation on cluster member c: it finds
// its node in c's topology, then spawns its actors.
func (s *Informer) startIncarnation(ctx context.Context, c *cluster.Cluster) (*incarnation, error) {
	node, err := selfNode(ctx, c, s.o.tick)
	if err != nil {
		return nil, err
	}
	id := handover.NewMemberID(node, s.newIncarnationID())
	if first := s.firstID; first != "" {
		s.firstID = "" // the first incarnation only
		if c == s.first && first.Node() == node {
			id = first // the one New chose
		}
	}
	inc := &incarnation{s: s, c: c, id: id, node: node, done: make(chan struct{}), wake: make(chan struct{}, 1),
		log: s.log.With("member", string(id), "address", c.ActorSystem.Address())}
	inc.ctx, inc.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.self.Store(&id)
	inc.leases = newLeases(s.o.leases, s.o.namespace, s.group, id, c.ActorSystem.Address(), s.o.leaseDur, s.o.renewDL)
	inc.leases.rec.positions = s.positionsAnnotation
	inc.core = handover.NewCore(handover.Config{
		Self: id, Ranges: s.o.ranges, HashField: s.settings(), JoinedAt: time.Now().UnixNano(),
		DiscoveryTicks: 5, HelloTicks: 5, LeaveTicks: max(1, int(s.o.leaveTimeout/s.o.tick)), MaxMoves: s.o.moves(),
		HealTicks: max(15, int(s.o.leaseDur/s.o.tick)), DrainTicks: max(1, int(s.o.drainTimeout/s.o.tick)),
		LiveTicks:     int((liveWait + s.o.tick - 1) / s.o.tick),
		LeaseDuration: s.o.leaseDur, RenewDeadline: s.o.renewDL, RetryPeriod: s.o.retry,
	})
	sys := c.ActorSystem
	io := &memberIO{inc: inc, ranges: map[int]*rangeInformer{}, addrs: map[handover.NodeID]string{}, leaseAddrs: map[handover.MemberID]string{},
		snapshots: map[snapshotKey]*snapshot{}, movedTo: map[int]handover.MemberID{}, positions: kindPositions{}, unrecorded: map[int]*pendingRelease{}}
	ioPID, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return io }), actorName(s.group))
	if err != nil {
		return nil, err
	}
	inc.ioPID = ioPID
	corePID := sys.Root.Spawn(shell.Props(shell.Config[handover.Input]{
		Stage: handover.Ranges,
		Core:  publishing{inc},
		Env:   func(actor.Context) shell.Env { return coreEnv{inc} },
	}))
	inc.corePID = corePID
	s.mu.Lock()
	s.inc = inc
	s.mu.Unlock()
	sys.Root.Send(ioPID, &startIO{})
	inc.log.Info("joining sharded informer group", "ranges", s.o.ranges, "hashField", string(s.o.field))
	return inc, nil
}

// newIncarnationID returns a new incarnation's part of the member id: the
// member's name, then the time and random bits.
func (s *Informer) newIncarnationID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
	if s.name != "" {
		id = s.name + "-" + id
	}
	return id
}

// memberName makes name fit in a member id (WithMemberName).
func memberName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return string(b)
}

// selfNode finds this cluster member's node in its topology: the member at
// its address whose id is, or ends with, the actor system's id (the etcd
// provider names members cluster@id); else the only one at its address.
// Two at one address (a member restarted there, the dead one not expired
// yet) without the id are not told apart: it waits for the next topology.
func selfNode(ctx context.Context, c *cluster.Cluster, every time.Duration) (node handover.NodeID, err error) {
	err = wait.PollUntilContextCancel(ctx, every, true, func(context.Context) (ok bool, _ error) {
		node, ok = findSelfNode(c)
		return ok, nil
	})
	return node, err
}

// findSelfNode looks for this cluster member's node in its current
// topology once (selfNode).
func findSelfNode(c *cluster.Cluster) (handover.NodeID, bool) {
	addr, sysID := c.ActorSystem.Address(), c.ActorSystem.ID
	var byID, byAddr []string
	for _, m := range c.MemberList.Members().Members() {
		if m.Address() != addr {
			continue
		}
		byAddr = append(byAddr, m.Id)
		if m.Id == sysID || strings.HasSuffix(m.Id, "@"+sysID) {
			byID = append(byID, m.Id)
		}
	}
	switch {
	case len(byID) == 1:
		return handover.NodeID(byID[0]), true
	case len(byID) == 0 && len(byAddr) == 1:
		return handover.NodeID(byAddr[0]), true
	}
	return "", false
}

// publishing is the core as the shell runs it: after each step it
// publishes the protocol's status for the public methods.
type publishing struct{ inc *incarnation }

func (p publishing) Step(in handover.Input) []stage.Msg {
	out := p.inc.core.Step(in)
	st := p.inc.publishStatus()
	p.inc.s.signals.Poke()
	if q := quietStatus(st, p.inc.s.now(), p.inc.s.o.tick*time.Duration(quietBatch(p.inc.s.o))); p.inc.quiet.Swap(q) && !q {
		select {
		case p.inc.wake <- struct{}{}:
		default:
		}
	}
	return out
}

// publishStatus publishes the core's status for the public methods: a
// new copy only when it changed (most steps, a tick's, change nothing of
// it). It returns the status, which is the incarnation's, rebuilt at each
// step.
func (inc *incarnation) publishStatus() *handover.Status {
	st := &inc.status
	inc.core.StatusInto(st)
	if prev := inc.s.protocol.Load(); prev == nil || !sameStatus(prev, st) {
		inc.s.protocol.Store(cloneStatus(st))
	}
	return st
}

// sameStatus reports whether a and b are the same status.
func sameStatus(a, b *handover.Status) bool {
	if a.Self != b.Self || a.Discovering != b.Discovering || a.Leaving != b.Leaving || a.Done != b.Done || a.Settled != b.Settled ||
		a.Failed != b.Failed || a.Fenced != b.Fenced || a.ValidUntil != b.ValidUntil || a.Token != b.Token ||
		!sameIDs(a.View, b.View) || (a.Ranges == nil) != (b.Ranges == nil) || len(a.Ranges) != len(b.Ranges) {
		return false
	}
	for i := range a.Ranges {
		x, y := &a.Ranges[i], &b.Ranges[i]
		if x.State != y.State || x.Epoch != y.Epoch || x.Token != y.Token || x.Owner != y.Owner || x.Record != y.Record || !sameIDs(x.Waiting, y.Waiting) {
			return false
		}
	}
	return true
}

// sameIDs reports whether a and b have the same members in the same order
// and are both nil or both not.
func sameIDs(a, b []handover.MemberID) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// cloneStatus copies st, its View and Ranges (not their Waiting slices,
// which StatusInto never reuses).
func cloneStatus(st *handover.Status) *handover.Status {
	c := *st
	c.View = slices.Clone(st.View)
	c.Ranges = slices.Clone(st.Ranges)
	return &c
}

// quietStatus: the member is settled, nothing moves and its claim holds
// for longer than a batch of ticks (span) from now; its ticks only renew
// its lease, send the heartbeat and count time.
func quietStatus(st *handover.Status, now, span time.Duration) bool {
	if !st.Settled || st.Discovering || st.Leaving || st.Done || st.Failed != "" || st.Fenced != "" {
		return false
	}
	if st.ValidUntil != 0 && st.ValidUntil-now <= span {
		return false
	}
	for _, r := range st.Ranges {
		if r.State != "active" && r.State != "idle" {
			return false
		}
	}
	return true
}

// coreEnv performs the core's effects: SetValidity at once (the handler
// calls' gate), the others by the I/O actor.
type coreEnv struct{ inc *incarnation }

func (e coreEnv) Perform(ctx actor.Context, m stage.Msg) bool {
	switch m.To.Kind {
	case handover.Member, handover.Ranges, handover.Lease:
	default:
		return false
	}
	if v, ok := m.Body.(*handover.SetValidity); ok {
		e.inc.s.validUntil.Store(int64(v.Until))
		e.inc.s.validity.Fire()
		return true
	}
	var to handover.MemberID
	if m.To.Kind == handover.Member {
		to = e.inc.core.Member(m.To.ID)
	}
	ctx.Send(e.inc.ioPID, &effect{to: to, kind: m.To.Kind, body: m.Body})
	return true
}

// effect is one of the core's effects, for the I/O actor.
type effect struct {
	to   handover.MemberID
	kind stage.Kind
	body any
}

// The I/O actor's own messages.
type (
	startIO       struct{}
	leasesChanged struct{}
	// clusterStopped: the cluster member's actor system was shut down.
	clusterStopped struct{}
	// rangeDone: a range effect's work has ended; report goes to the core.
	rangeDone struct {
		ri     *rangeInformer
		report handover.Input
		// pending: a release's record write, kept while it fails.
		pending *pendingRelease
	}
	// claimed: a claim's outcome, for the core, and the final positions
	// of the ranges it wrote.
	claimed struct {
		finals map[int]claimedFinal
		in     *handover.RecordsClaimed
	}
)

// memberIO is the incarnation's I/O actor.
type memberIO struct {
	inc        *incarnation
	sub        *eventstream.Subscription
	stopTick   chan struct{}
	ranges     map[int]*rangeInformer
	addrs      map[handover.NodeID]string
	leaseAddrs map[handover.MemberID]string
	leaseInf   *actors.SharedIndexInformer
	recordInf  *actors.SharedIndexInformer
	// snapshots are copies of range caches kept for askers' chunks.
	snapshots map[snapshotKey]*snapshot
	// movedTo: the member each range was last released to, until the
	// range starts here again: a copy asked of this member is asked of
	// that one.
	movedTo map[int]handover.MemberID
	// leasesPending: a snapshot of the leases is on its way to the core.
	leasesPending atomic.Bool
	// work: the work run off the actor (run) that has not ended: API
	// requests, range switches, informers' runs.
	work sync.WaitGroup
	// settings: why the core gave up (Failed), for the ending; ended: the
	// incarnation is ending (dropAll), the core's effects are ignored.
	settings string
	ended    bool
	// freedAt: when the records watch, or an answer, first showed each
	// range's record with no holder at its newest generation (recGen): the
	// previous deliverer had stopped by then, so the range's unserved time
	// starts there.
	freedAt map[int]time.Time
	recGen  map[int]uint64
	// positions: per kind and range, the newest delivered position the
	// group's leases showed (position.go), for a takeover without a
	// release.
	positions kindPositions
	// finals: per range, the final position in its record that this
	// member's last claim of it found, under the claim's token.
	finals map[int]claimedFinal
	// unrecorded: the releases whose record write failed, per range, for
	// the core's ReleaseRecord.
	unrecorded map[int]*pendingRelease
}

// claimedFinal is a range's final position as a claim found it (kinds:
// the other kinds' parts), and the holder the claim replaced ("" when the
// record was released).
type claimedFinal struct {
	token    uint64
	rec      rangeRecord
	kinds    kindFinals
	replaced handover.MemberID
}

// of is kind k's part of the final position.
func (f claimedFinal) of(k *Informer) rangeRecord {
	if k.kindKey == "" {
		return f.rec
	}
	p := f.kinds[k.kindKey]
	return rangeRecord{token: f.rec.token, position: p.Position, version: p.Version, by: f.rec.by}
}

// claimed keeps a claim's final positions, then hands the core the claim's
// outcome (which may activate the ranges).
func (io *memberIO) claimed(m *claimed) {
	io.keepFinals(m)
	io.toCore(m.in)
}

// keepFinals keeps the final positions of the ranges claim m wrote.
func (io *memberIO) keepFinals(m *claimed) {
	if io.finals == nil {
		io.finals = map[int]claimedFinal{}
	}
	for _, res := range m.in.Results {
		if f, ok := m.finals[res.Range]; ok && res.OK {
			f.token = res.Token
			io.finals[res.Range] = f
		}
	}
}

func (io *memberIO) toCore(in handover.Input) {
	io.inc.c.ActorSystem.Root.Send(io.inc.corePID, in)
}

func (io *memberIO) Receive(ctx actor.Context) {
	inc := io.inc
	s := inc.s
	defer func() {
		// protoactor restarts the actor and logs only the panic's value:
		// the stack says where.
		if r := recover(); r != nil {
			inc.log.Error("the member's I/O actor failed on a message (a bug of ours)", "panic", fmt.Sprint(r), "message", fmt.Sprintf("%T", ctx.Message()), "stack", string(debug.Stack()))
			panic(r)
		}
	}()
	switch m := ctx.Message().(type) {
	case *startIO:
		io.start(ctx)
	case *actor.Stopping:
		io.stop()
	case *cluster.ClusterTopology:
		io.topology(m.Members)
	case *leasesChanged:
		io.leasesPending.Store(false)
		io.snapshotLeases()
	case *effect:
		if !io.ended {
			io.perform(ctx, m)
		}
	case *clusterStopped:
		inc.log.Error("the cluster member was shut down under the informer: no handler is called from now on")
		io.dropAll(ending{clusterStopped: true})
	case *rangeDone:
		io.rangeDone(m)
	case *claimed:
		io.claimed(m)
	case *actor.DeadLetterResponse:
		if m.Target != nil {
			if id := io.memberAt(m.Target.Address); id != "" {
				io.toCore(&handover.Undeliverable{Member: id})
			}
		}
	case *shardpb.Probe:
		if m.Group == s.group {
			ctx.Respond(&shardpb.Hello{Group: s.group, From: string(inc.id), Ranges: int32(s.o.ranges), HashField: s.hashSetting(), Protocol: protocolVersion, Reply: true})
		}
	case *shardpb.SnapshotRequest:
		if io.fromWire(m) {
			io.serveSnapshot(ctx, m)
		} else if m.Group == s.group {
			ctx.Respond(&shardpb.SnapshotChunk{Range: m.Range, Chunk: m.Chunk, Error: "no such member here"})
		}
	default:
		io.fromPeer(m)
	}
}

// start subscribes to the cluster's topology, starts the core's ticker and
// the lease watch.
func (io *memberIO) start(ctx actor.Context) {
	inc := io.inc
	s := inc.s
	self, sys := ctx.Self(), inc.c.ActorSystem
	io.sub = sys.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok {
			sys.Root.Send(self, t)
		}
	})
	io.stopTick = make(chan struct{})
	// The core's clock; once the actor system is shut down (its actors
	// still run, but nothing reaches the other members any more), the
	// I/O actor hears clusterStopped.
	io.run(nil, func() {
		ticker(clock.RealClock{}, s.o.tick, quietBatch(s.o), &inc.quiet, inc.wake, io.stopTick, func(n int) bool {
			if sys.IsStopped() {
				sys.Root.Send(self, &clusterStopped{})
				return false
			}
			for range n {
				sys.Root.Send(inc.corePID, &handover.Tick{Now: s.now()})
			}
			return true
		})
	})
	io.startLeaseWatch(ctx)
	// A subscriber added after the member started missed the topology
	// so far: read it.
	io.topology(inc.c.MemberList.Members().Members())
}

// fromPeer hands a peer's protocol message, of this group and for this
// incarnation, to the core.
func (io *memberIO) fromPeer(msg any) {
	s := io.inc.s
	if w, ok := msg.(addressed); !ok || !io.fromWire(w) {
		return
	}
	switch m := msg.(type) {
	case *shardpb.Hello:
		h := helloFromWire(m)
		s.peerRanges.note(h.From, h.Active, s.now(), 10*s.o.leaseDur)
		io.toCore(h)
	case *shardpb.Reject:
		io.toCore(&handover.Reject{From: handover.MemberID(m.From), Reason: m.Reason})
	case *shardpb.Acquire:
		io.toCore(&handover.Acquire{From: handover.MemberID(m.From), Epoch: m.Epoch, Ranges: ints[int](m.Ranges)})
	case *shardpb.Released:
		io.toCore(io.releasedFromWire(m))
	}
}

// releasedFromWire is the core's Released of a wire one; it notes when
// each record it carries was first seen with no holder (a range's unserved
// time starts there).
func (io *memberIO) releasedFromWire(m *shardpb.Released) *handover.Released {
	rel := &handover.Released{From: handover.MemberID(m.From), Epoch: m.Epoch, Ranges: ints[int](m.Ranges)}
	for _, rs := range m.Records {
		rel.Records = append(rel.Records, handover.RecordState{Range: int(rs.Range), Holder: handover.MemberID(rs.Holder), Gen: rs.Gen, Next: handover.MemberID(rs.Next)})
	}
	io.noteFreed(rel.Records)
	return rel
}

// addressed is a peer's message (its generated getters): its group, and
// the member it is for.
type addressed interface {
	GetGroup() string
	GetTo() string
}

// fromWire: a message of this group, for this incarnation (or for its
// node: the sender did not know the incarnation yet).
func (io *memberIO) fromWire(m addressed) bool {
	to := m.GetTo()
	return m.GetGroup() == io.inc.s.group && (to == "" || to == string(io.inc.id) || to == string(io.inc.node))
}

func (io *memberIO) memberAt(addr string) handover.MemberID {
	for n, a := range io.addrs {
		if a == addr {
			return handover.MemberID(n)
		}
	}
	for m, a := range io.leaseAddrs {
		if a == addr {
			return m
		}
	}
	return ""
}

func (io *memberIO) topology(members []*cluster.Member) {
	t := &handover.Topology{Nodes: make([]handover.NodeID, 0, len(members))}
	clear(io.addrs)
	for _, m := range members {
		n := handover.NodeID(m.Id)
		t.Nodes = append(t.Nodes, n)
		io.addrs[n] = m.Address()
	}
	io.toCore(t)
}

// address resolves a member: its node's address in the topology, else the
// one its lease gives.
func (io *memberIO) address(id handover.MemberID) string {
	if a, ok := io.addrs[id.Node()]; ok {
		return a
	}
	return io.leaseAddrs[id]
}

func (io *memberIO) perform(ctx actor.Context, e *effect) {
	inc := io.inc
	switch e.kind {
	case handover.Member:
		addr := io.address(e.to)
		if addr == "" {
			return // unknown now: the core asks again
		}
		body := toWire(inc.s.group, e.to, e.body)
		if body == nil {
			return
		}
		// A request, so that an undeliverable message comes back as a
		// DeadLetterResponse.
		ctx.Request(actor.NewPID(addr, actorName(inc.s.group)), body)
	case handover.Lease:
		io.leaseEffect(e.body)
	case handover.Ranges:
		io.rangeEffect(e.body)
	}
}

// helloFromWire is the core's Hello of a wire Hello; its settings carry the
// sender's protocol version, so that members of other versions differ.
func helloFromWire(m *shardpb.Hello) *handover.Hello {
	settings := m.HashField + ";protocol=" + strconv.Itoa(int(m.Protocol))
	h := &handover.Hello{From: handover.MemberID(m.From), Ranges: int(m.Ranges), HashField: settings,
		JoinedAt: m.JoinedAt, State: handover.PeerState(m.State), Active: ints[int](m.Active), Listing: ints[int](m.Listing), View: ids[handover.MemberID](m.View), Reply: m.Reply}
	h.KnowsYou, h.HeardYou = m.KnowsYou, m.HeardYou
	return h
}

func toWire(group string, to handover.MemberID, body any) any {
	switch m := body.(type) {
	case *handover.Hello:
		out := &shardpb.Hello{Group: group, To: string(to), From: string(m.From), Ranges: int32(m.Ranges), HashField: strings.SplitN(m.HashField, ";", 2)[0],
			Protocol: protocolVersion, JoinedAt: m.JoinedAt, State: int32(m.State), Active: ints[int32](m.Active), Listing: ints[int32](m.Listing), View: ids[string](m.View), Reply: m.Reply}
		out.KnowsYou, out.HeardYou = m.KnowsYou, m.HeardYou
		return out
	case *handover.Reject:
		return &shardpb.Reject{Group: group, To: string(to), From: string(m.From), Reason: m.Reason}
	case *handover.Acquire:
		return &shardpb.Acquire{Group: group, To: string(to), From: string(m.From), Epoch: m.Epoch, Ranges: ints[int32](m.Ranges)}
	case *handover.Released:
		out := &shardpb.Released{Group: group, To: string(to), From: string(m.From), Epoch: m.Epoch, Ranges: ints[int32](m.Ranges)}
		for _, rs := range m.Records {
			out.Records = append(out.Records, &shardpb.Record{Range: int32(rs.Range), Holder: string(rs.Holder), Gen: rs.Gen, Next: string(rs.Next)})
		}
		return out
	}
	return nil
}

// ticker calls send every interval, with the number of ticks due: one;
// while the member is quiet it waits for a batch of them and sends them
// together (the core counts the same ticks, a process wakes up a fifth as
// often). Quiet no longer (wake), it sends the ticks due so far and goes
// back to one per interval. It returns when stop closes or send says so.
func ticker(clk clock.Clock, every time.Duration, batch int, quiet *atomic.Bool, wake, stop <-chan struct{}, send func(n int) bool) {
	for {
		n := 1
		if quiet.Load() {
			n = batch
		}
		start := clk.Now()
		t := clk.NewTimer(time.Duration(n) * every)
		select {
		case <-t.C():
		case <-wake:
			n = min(n, int(clk.Since(start)/every))
		case <-stop:
			t.Stop()
			return
		}
		t.Stop()
		if !send(n) {
			return
		}
	}
}

// quietBatch is how many ticks a quiet member sends at once: those of a
// second (5 at the default interval), at most a lease retry period's, so
// that renewals keep their pace.
func quietBatch(o options) int {
	return max(1, min(int(time.Second/o.tick), int(o.retry/o.tick)))
}

// ---- the lease ----

func (io *memberIO) leaseEffect(body any) {
	inc := io.inc
	s := inc.s
	switch e := body.(type) {
	case *handover.RenewLease:
		start := s.now()
		io.request(func() handover.Input {
			tok, err := inc.leases.write(inc.ctx, e.Create)
			if err != errLost && inc.ctx.Err() == nil {
				s.causes.noteLease(err)
			}
			switch {
			case err == nil:
				return &handover.LeaseRenewed{Seq: e.Seq, Start: start, Now: s.now(), Token: tok}
			case err == errLost:
				return &handover.LeaseRenewFailed{Seq: e.Seq, Start: start, Lost: true}
			}
			inc.warn(err, "the lease write failed")
			return &handover.LeaseRenewFailed{Seq: e.Seq, Start: start}
		})
	case *handover.CheckLease:
		io.request(func() handover.Input {
			found, released, version, err := inc.leases.check(inc.ctx, e.Member)
			inc.warn(err, "cannot read a member's lease", "of", string(e.Member))
			return &handover.LeaseChecked{Member: e.Member, Found: found, Released: released, Version: version, Failed: err != nil}
		})
	case *handover.ClaimRecords:
		// The answer goes through this actor, which keeps the final
		// positions the write found for the ranges' activations.
		io.run(nil, func() {
			res, finals, err := inc.leases.claimRecords(inc.ctx, e.Claims, inc.id)
			inc.warn(err, "cannot write the claimed ranges' records", "claims", len(e.Claims))
			inc.c.ActorSystem.Root.Send(inc.ioPID, &claimed{finals: finals, in: &handover.RecordsClaimed{Now: s.now(), Results: res}})
		})
	case *handover.DeleteLease:
		io.run(nil, func() { inc.leases.deleteStale(inc.ctx, e.Name, e.Version) })
	case *handover.RevokeLease:
		io.request(func() handover.Input {
			ok, err := inc.leases.revoke(inc.ctx, e.Member, e.Version)
			inc.warn(err, "cannot revoke a member's lease", "of", string(e.Member))
			if ok {
				inc.log.Info("revoked the lease of a member that stopped renewing it", "of", string(e.Member), "version", e.Version)
			}
			return &handover.LeaseRevoked{Member: e.Member, Version: e.Version, OK: ok}
		})
	}
}

// warn logs a request's error (args, then err), unless the incarnation is
// ending: that cancels its requests.
func (inc *incarnation) warn(err error, msg string, args ...any) {
	if err == nil || inc.ctx.Err() != nil || !inc.log.Enabled(inc.ctx, slog.LevelWarn) {
		return
	}
	var pc [1]uintptr
	runtime.Callers(2, pc[:]) // the caller's line, not this one's, in the log
	r := slog.NewRecord(time.Now(), slog.LevelWarn, msg, pc[0])
	r.Add(append(args, "err", err)...)
	_ = inc.log.Handler().Handle(inc.ctx, r)
}

// request makes one of the core's API requests off the actor, and hands
// the core its answer straight, as its ticks go: behind this actor's other
// work (a snapshot being encoded for a new owner), a renewal that
// succeeded in time could reach the core after the tick that fences it.
// The core decides what to do on a failure (a failed read is asked again
// at a later tick).
func (io *memberIO) request(do func() handover.Input) {
	io.run(nil, func() { io.toCore(do()) })
}

// lane orders the work run on it (run): each starts once the one before
// has ended. Each range has one, for its switches. Used on the I/O actor
// only.
type lane struct{ last chan struct{} }

// wait returns a channel closed once the work run on l so far has ended.
func (l *lane) wait() <-chan struct{} {
	if l.last == nil {
		l.last = make(chan struct{})
		close(l.last)
	}
	return l.last
}

// run is the one way the member's shell does work that blocks: off the
// actor, after the work run on l before it (nil: at once), and counted in
// io.work, which the member's end waits for. The work reports what the
// core or the actor must know as a message (toCore, report): it decides
// nothing on its own.
func (io *memberIO) run(l *lane, work func()) {
	var prev <-chan struct{}
	var done chan struct{}
	if l != nil {
		prev, done = l.wait(), make(chan struct{})
		l.last = done
	}
	io.work.Add(1)
	go func() {
		defer io.work.Done()
		if done != nil {
			defer close(done)
			<-prev
		}
		work()
	}()
}

// startLeaseWatch watches the group's leases, and its range records, with
// informers of ours; each change sends the core a snapshot of both.
func (io *memberIO) startLeaseWatch(ctx actor.Context) {
	inc := io.inc
	self := ctx.Self()
	poke := func() {
		if io.leasesPending.CompareAndSwap(false, true) {
			inc.c.ActorSystem.Root.Send(self, &leasesChanged{})
		}
	}
	io.leaseInf = io.watchLeases(LabelGroup, "leases", poke)
	io.recordInf = io.watchLeases(LabelRecordOf, "records", poke)
	st := io.recordInf.GetStore()
	inc.leases.watched.Store(&st)
}

// watchLeases runs an informer of the leases labelled label with the
// group's label value; poke is called on every change.
func (io *memberIO) watchLeases(label, name string, poke func()) *actors.SharedIndexInformer {
	inc := io.inc
	s := inc.s
	sel := labels.SelectorFromSet(labels.Set{label: s.group}).String()
	api := s.o.leases.Leases(s.o.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			o.LabelSelector = sel
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return api.Watch(ctx, o)
		},
	}
	opts := append(append([]actors.Option(nil), s.o.actorOpts...), actors.WithActorSystem(inc.c.ActorSystem),
		actors.WithName("shard."+s.group+"."+name), actors.WithWatchList(false))
	inf := actors.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{}, opts...)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	io.run(nil, func() { inf.RunWithContext(inc.ctx) })
	return inf
}

// leasesOf reads the group's leases for the core: the live ones, the
// released ones, and every one with no holder (to delete once old), and
// the live ones' addresses into addrs.
func leasesOf(objs []any, addrs map[handover.MemberID]string) *handover.Leases {
	snap := &handover.Leases{}
	for _, obj := range objs {
		l := obj.(*coordinationv1.Lease)
		h := holder(l)
		if h == "" {
			if m := l.Annotations[AnnotationMember]; m != "" && l.Annotations[AnnotationReleased] != "" {
				snap.Released = append(snap.Released, handover.MemberID(m))
			}
			snap.Stale = append(snap.Stale, handover.StaleLease{Name: l.Name, Version: l.ResourceVersion})
			continue
		}
		id := handover.MemberID(h)
		other := l.Annotations[AnnotationProtocol] != strconv.Itoa(protocolVersion)
		snap.Leases = append(snap.Leases, handover.LeaseRecord{Holder: id, Version: l.ResourceVersion, Other: other})
		if a := l.Annotations[AnnotationAddress]; a != "" {
			addrs[id] = a
		}
	}
	return snap
}

// memberLeases keeps the member leases of the group labelled group: a
// watch that does not filter by label (client-go's fake clientset) shows
// other leases too, the range records among them, whose holder is a
// range's deliverer.
func memberLeases(objs []any, group string) []any {
	out := objs[:0]
	for _, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Labels[LabelGroup] == group {
			out = append(out, o)
		}
	}
	return out
}

// snapshotLeases sends the core the group's leases and records as the
// watches have them, once both have synced.
func (io *memberIO) snapshotLeases() {
	inc := io.inc
	if !io.leaseInf.HasSynced() || !io.recordInf.HasSynced() {
		return // the last sync's change pokes again
	}
	objs := memberLeases(io.leaseInf.GetStore().List(), inc.s.group)
	snap := leasesOf(objs, io.leaseAddrs)
	for _, bad := range learnPositions(io.positions, objs, inc.s.o.ranges) {
		inc.log.Warn("a lease's positions cannot be read; they are ignored", "err", bad)
	}
	recs, _, _ := io.recordInf.GetStore().GetByKey(inc.s.o.namespace + "/" + recordsName(inc.s.group))
	l, _ := recs.(*coordinationv1.Lease)
	var bad []error
	snap.Records, bad = recordStates(l, inc.s.o.ranges)
	for _, err := range bad {
		inc.log.Warn("a range's record cannot be read; the range is claimed as if it had none, which a write refuses", "err", err)
	}
	io.noteFreed(snap.Records)
	snap.Now = inc.s.now()
	inc.copies.leases(snap)
	io.toCore(snap)
}

// noteFreed notes when each range's record was first seen with no
// holder, in the records watch or an answer.
func (io *memberIO) noteFreed(recs []handover.RecordState) {
	if io.freedAt == nil {
		io.freedAt, io.recGen = map[int]time.Time{}, map[int]uint64{}
	}
	now := time.Now()
	for _, rs := range recs {
		if rs.Gen > io.recGen[rs.Range] {
			io.recGen[rs.Range] = rs.Gen
			switch rs.Holder {
			case "":
				io.freedAt[rs.Range] = now
			case io.inc.id:
				// This member's claim, which the watch may show before its
				// outcome comes: the range was free until it.
			default:
				delete(io.freedAt, rs.Range)
			}
		}
	}
}

// ---- the end of an incarnation ----

// leave starts a graceful leave.
func (inc *incarnation) leave() {
	inc.c.ActorSystem.Root.Send(inc.corePID, &handover.Leave{})
}

// finish ends the incarnation (Left, Fenced, Failed, its cluster stopped).
func (inc *incarnation) finish(e ending) {
	inc.end.CompareAndSwap(nil, &e)
	inc.doneOnce.Do(func() { close(inc.done) })
}

// abandon stops the incarnation as a crash would.
func (inc *incarnation) abandon() {
	if !inc.abandoned.CompareAndSwap(false, true) {
		return
	}
	inc.s.validUntil.Store(0)
	inc.stopActors()
	inc.log.Info("abandoned the group")
	inc.finish(ending{})
}

func (inc *incarnation) stopActors() {
	inc.stopOnce.Do(func() {
		root := inc.c.ActorSystem.Root
		_ = root.StopFuture(inc.corePID).Wait()
		_ = root.StopFuture(inc.ioPID).Wait()
		inc.cancel()
	})
}

// stop ends the incarnation's actors and range informers; after a graceful
// leave or a fence its lease is gone already.
func (inc *incarnation) stop() {
	inc.stopActors()
	inc.s.mu.Lock()
	if inc.s.inc == inc {
		inc.s.inc = nil
	}
	inc.s.mu.Unlock()
}

// stop, on the I/O actor when it stops: every range informer stops, its
// handlers detached once its switch under way (dropped) has ended.
func (io *memberIO) stop() {
	if io.sub != nil {
		io.inc.c.ActorSystem.EventStream.Unsubscribe(io.sub)
	}
	if io.stopTick != nil {
		close(io.stopTick)
	}
	io.dropRanges()()
	io.inc.cancel()
	io.work.Wait()
}

// ints converts the wire's range lists to the core's and back; ids its
// member ids. Both return an empty slice, not nil, for none.
func ints[To, From ~int | ~int32](v []From) []To {
	out := make([]To, len(v))
	for i, x := range v {
		out[i] = To(x)
	}
	return out
}

func ids[To, From ~string](v []From) []To {
	out := make([]To, len(v))
	for i, x := range v {
		out[i] = To(x)
	}
	return out
}
