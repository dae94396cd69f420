package shard

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
	"github.com/actorinformer/actorinformer/stage"
)

// groupActor is the shell of a member's protocol core: it turns the
// cluster's topology, other members' messages, its range informers'
// reports and its ticks into the core's inputs, and delivers what the core
// returns: messages to other members' group actors (by name on their
// address), effects to the Informer.
type groupActor struct {
	s     *Informer
	addrs map[handover.MemberID]string // member → address, from the topology
	ids   map[string]handover.MemberID // address → member
	sub   *eventstream.Subscription
	stop  chan struct{}
}

func (g *groupActor) Receive(ctx actor.Context) {
	s := g.s
	var in any
	switch m := ctx.Message().(type) {
	case *actor.Started:
		g.addrs, g.ids = map[handover.MemberID]string{}, map[string]handover.MemberID{}
		self := ctx.Self()
		sys := s.c.ActorSystem
		g.sub = sys.EventStream.Subscribe(func(evt any) {
			if t, ok := evt.(*cluster.ClusterTopology); ok {
				sys.Root.Send(self, t)
			}
		})
		g.stop = make(chan struct{})
		go ticker(sys, self, s.o.tick, g.stop)
		// A subscriber added after the member started missed the topology
		// so far: read it. (protoactor's MemberList.Members reads without
		// the lock that guards its writes, so this read races with a
		// membership change at this very moment; the event of that change
		// follows anyway.)
		in = g.topology(s.c.MemberList.Members().Members())
	case *actor.Stopping, *actor.Restarting:
		// A restart (a panic of ours) builds a new actor over the same core,
		// which subscribes and ticks again.
		s.c.ActorSystem.EventStream.Unsubscribe(g.sub)
		close(g.stop)
		return
	case *actor.Stopped:
		return
	case *cluster.ClusterTopology:
		in = g.topology(m.Members)
	case *shardpb.Probe:
		if m.Group == s.group {
			ctx.Respond(&shardpb.Hello{Group: s.group, From: string(s.self()), Ranges: int32(s.o.ranges), HashField: string(s.o.field), Reply: true})
		}
		return
	case *shardpb.Hello:
		if m.Group != s.group {
			return
		}
		in = &handover.Hello{From: handover.MemberID(m.From), Ranges: int(m.Ranges), HashField: m.HashField,
			JoinedAt: m.JoinedAt, State: handover.PeerState(m.State), Active: ints(m.Active), Reply: m.Reply}
	case *shardpb.Reject:
		if m.Group != s.group {
			return
		}
		in = &handover.Reject{From: handover.MemberID(m.From), Reason: m.Reason}
	case *shardpb.Acquire:
		if m.Group != s.group {
			return
		}
		in = &handover.Acquire{From: handover.MemberID(m.From), Epoch: m.Epoch, Ranges: ints(m.Ranges)}
	case *shardpb.Released:
		if m.Group != s.group {
			return
		}
		in = &handover.Released{From: handover.MemberID(m.From), Epoch: m.Epoch, Ranges: ints(m.Ranges), WasActive: m.WasActive}
	case *actor.DeadLetterResponse:
		if m.Target == nil {
			return
		}
		id, ok := g.ids[m.Target.Address]
		if !ok {
			return
		}
		in = &handover.Unreachable{Member: id}
	case *handover.RangeSynced, *handover.RangeStopped, *handover.Tick, *handover.Leave:
		in = m
	default:
		return
	}
	if s.core == nil {
		t, ok := in.(*handover.Topology)
		if !ok || !g.start(t) {
			if _, leave := in.(*handover.Leave); leave {
				s.leftOnce.Do(func() { close(s.left) }) // never joined: nothing to hand over
			}
			return // before this member is in a topology, nothing can be answered
		}
	}
	out := s.core.Step(in)
	for _, msg := range out {
		g.deliver(ctx, msg)
	}
	clear(out)
	st := s.core.Status()
	s.protocol.Store(&st)
	s.signals.poke(s)
}

// start builds the core once a topology holds this member.
func (g *groupActor) start(t *handover.Topology) bool {
	s := g.s
	self, ok := g.ids[s.c.ActorSystem.Address()]
	if !ok {
		return false
	}
	s.selfID.Store(&self)
	s.core = handover.NewCore(handover.Config{
		Self: self, Ranges: s.o.ranges, HashField: string(s.o.field), JoinedAt: s.joined.UnixNano(),
		DiscoveryTicks: 5, HelloTicks: 5, LeaveTicks: max(1, int(s.o.leaveTimeout/s.o.tick)),
	})
	s.log.Info("joined the group's protocol", "member", string(self), "members", len(t.Members))
	return true
}

func (g *groupActor) topology(members []*cluster.Member) *handover.Topology {
	t := &handover.Topology{Members: make([]handover.MemberID, 0, len(members))}
	clear(g.addrs)
	clear(g.ids)
	for _, m := range members {
		id := handover.MemberID(m.Id)
		t.Members = append(t.Members, id)
		g.addrs[id] = m.Address()
		g.ids[m.Address()] = id
	}
	return t
}

func (g *groupActor) deliver(ctx actor.Context, msg stage.Msg) {
	s := g.s
	switch msg.To.Kind {
	case handover.Member:
		addr, ok := g.addrs[s.core.Member(msg.To.ID)]
		if !ok {
			return // no longer in the topology
		}
		body := toProto(s.group, msg.Body)
		if body == nil {
			return
		}
		// A request, so that an undeliverable message comes back as a
		// DeadLetterResponse.
		ctx.Request(actor.NewPID(addr, actorName(s.group)), body)
	case handover.Ranges:
		switch e := msg.Body.(type) {
		case *handover.StartRange:
			s.startRange(e)
		case *handover.ActivateRange:
			s.activateRange(e)
		case *handover.DeactivateRange:
			s.deactivateRange(e)
		case *handover.StopRange:
			s.stopRange(e)
		case *handover.Failed:
			reason := e.Reason
			s.failed.Store(&reason)
			s.log.Error("this member cannot join the group: its settings differ from the group's", "reason", reason)
		case *handover.Left:
			s.leftOnce.Do(func() { close(s.left) })
		}
	}
}

func toProto(group string, body any) any {
	switch m := body.(type) {
	case *handover.Hello:
		return &shardpb.Hello{Group: group, From: string(m.From), Ranges: int32(m.Ranges), HashField: m.HashField,
			JoinedAt: m.JoinedAt, State: int32(m.State), Active: int32s(m.Active), Reply: m.Reply}
	case *handover.Reject:
		return &shardpb.Reject{Group: group, From: string(m.From), Reason: m.Reason}
	case *handover.Acquire:
		return &shardpb.Acquire{Group: group, From: string(m.From), Epoch: m.Epoch, Ranges: int32s(m.Ranges)}
	case *handover.Released:
		return &shardpb.Released{Group: group, From: string(m.From), Epoch: m.Epoch, Ranges: int32s(m.Ranges), WasActive: m.WasActive}
	}
	return nil
}

func ticker(sys *actor.ActorSystem, pid *actor.PID, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			sys.Root.Send(pid, &handover.Tick{})
		case <-stop:
			return
		}
	}
}

func ints(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

func int32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}
