// Package handover is the ownership, fencing and handover protocol of a
// sharded informer group (package shard): a plain core, with no actor
// library, under the stage contract. One Core runs in each member
// incarnation; its Step takes one Input (a message from another member,
// the cluster's topology, the group's leases, a report of its own range
// informers or of its lease, a tick) and returns what to send: messages to
// other members (ToMember), effects on its own range informers (ToRanges)
// and on leases (ToLease). The shell in package shard delivers them; the
// simulator drives many cores, a network, an API server and clocks in one
// goroutine.
//
// The rules (placement, leases and fencing, range records, make-before-break
// handovers) and what they promise are in docs/sharding.md, "How it works"
// and "The promises, and what they rest on"; Place, Config and the messages
// give the details. In short, no two members call handlers for one range at
// the same time, whatever the network and the pauses do, as long as clock
// rates are bounded.
package handover

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/actorinformer/actorinformer/stage"
)

// Config are a member incarnation's settings. Ranges and HashField must be
// the same on every member of a group.
type Config struct {
	Self      MemberID
	Ranges    int
	HashField string
	// JoinedAt orders members for the tie-break of mismatched settings (a
	// later member gives up); the shell uses the start time.
	JoinedAt int64
	// DiscoveryTicks bounds how long a starting member waits for every
	// node of the topology to answer its Hello before computing ownership
	// (default 4), counted from the last node that appeared meanwhile.
	// Waiting only saves work: members started together then list only
	// their own ranges.
	DiscoveryTicks int
	// HelloTicks is the heartbeat period, in ticks (default 4).
	HelloTicks int
	// MaxMoves bounds the ranges taken from a member that stays in the
	// view, per placement (0: no bound): the others move at later
	// placements, once these have.
	MaxMoves int
	// LeaveTicks bounds a graceful leave: after that many ticks the member
	// stops delivering what no new owner has asked for (default 60; < 0:
	// never).
	LeaveTicks int
	// HealTicks: a member that a current peer's view has left out for that
	// many ticks rejoins (default 50).
	HealTicks int
	// DrainTicks bounds a release's drain: that many ticks after a
	// DeactivateRange, the member sends DrainTimeUp (default 50; < 0:
	// never).
	DrainTicks int
	// LiveTicks bounds how long a synced range that another member
	// delivers waits for its watch's first event (RangeLive) before it is
	// asked for (default 3).
	LiveTicks int
	// StaleAge: a lease with no holder (a tombstone, a released lease) is
	// deleted once this member has seen it unchanged that long (default
	// 10 minutes). A tombstone only has to outlive a create in flight, a
	// released lease the time its peers take to see it.
	StaleAge time.Duration
	// The lease's timing, as client-go's leader election: the holder
	// writes every RetryPeriod and stops calling handlers RenewDeadline
	// after the start of its last successful write; the others revoke a
	// lease they have seen unchanged for LeaseDuration. RenewDeadline must
	// be below LeaseDuration; the difference covers the clocks' rate
	// difference and the last handler call.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Ranges < 1:
		return fmt.Errorf("handover: %d ranges", c.Ranges)
	case c.RetryPeriod <= 0 || c.RenewDeadline <= 0 || c.LeaseDuration <= 0:
		return fmt.Errorf("handover: lease timings must be positive (duration %v, renew deadline %v, retry period %v)", c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)
	case c.RenewDeadline >= c.LeaseDuration:
		return fmt.Errorf("handover: renew deadline %v must be below the lease duration %v", c.RenewDeadline, c.LeaseDuration)
	case c.RetryPeriod >= c.RenewDeadline:
		return fmt.Errorf("handover: retry period %v must be below the renew deadline %v", c.RetryPeriod, c.RenewDeadline)
	}
	return nil
}

// Core is one member incarnation's protocol state. It is not safe for
// concurrent use.
type Core struct {
	cfg Config
	out stage.Outbox

	// ids numbers members for addresses (ToMember).
	ids   []MemberID
	index map[MemberID]uint64

	now   time.Duration // the clock, from the last Tick
	ticks int
	clock uint64 // Lamport clock for epochs

	members membership
	ranges  []rangeInfo
	lease   ownLease
	leases  map[MemberID]*peerLease
	// stale: the leases with no holder, by name: the version seen, since
	// when, and whether their delete was sent.
	stale map[string]*staleLease

	leaving bool
	leftAt  int
	forced  bool // the leave's time is up
	failed  string
	fenced  string
	leftOut bool // fenced because the provider dropped its node
	done    bool // Left or Fenced sent: no further input

	settled bool
	// helloDue: a range was activated in this step; the others hear of it
	// in one Hello at its end.
	helloDue bool

	// Collected during one Step, sent at its end.
	released map[releaseKey]*Released
	claims   []RecordClaim
}

type releaseKey struct {
	to    MemberID
	epoch uint64
}

// NewCore returns the core of member cfg.Self. It does nothing until a
// Topology that contains its node arrives. cfg must be valid (Validate).
func NewCore(cfg Config) *Core {
	cfg.DiscoveryTicks = positiveOr(cfg.DiscoveryTicks, 4)
	cfg.HelloTicks = positiveOr(cfg.HelloTicks, 4)
	cfg.HealTicks = positiveOr(cfg.HealTicks, 50)
	cfg.LiveTicks = positiveOr(cfg.LiveTicks, 3)
	cfg.StaleAge = positiveOr(cfg.StaleAge, 10*time.Minute)
	// Only 0 takes the default: < 0 is never.
	cfg.LeaveTicks = cmp.Or(cfg.LeaveTicks, 60)
	cfg.DrainTicks = cmp.Or(cfg.DrainTicks, 50)
	c := &Core{
		cfg:      cfg,
		index:    map[MemberID]uint64{},
		ranges:   make([]rangeInfo, cfg.Ranges),
		leases:   map[MemberID]*peerLease{},
		stale:    map[string]*staleLease{},
		released: map[releaseKey]*Released{},
	}
	for r := range c.ranges {
		c.ranges[r].state = &idle{}
	}
	c.members.init()
	return c
}

// positiveOr is v, or d when v is not positive.
func positiveOr[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// Member returns the member that ToMember(id) addresses.
func (c *Core) Member(id uint64) MemberID { return c.ids[id] }

func (c *Core) addr(m MemberID) stage.Addr {
	id, ok := c.index[m]
	if !ok {
		id = uint64(len(c.ids))
		c.ids = append(c.ids, m)
		c.index[m] = id
	}
	return ToMember(id)
}

// Step takes one input and returns what to send (valid until the next
// Step). Once the core has said Left or Fenced it takes nothing more.
func (c *Core) Step(in Input) []stage.Msg {
	c.out.Reset()
	if c.done {
		return nil
	}
	switch m := in.(type) {
	case *Topology:
		c.topology(m)
	case *Hello:
		c.hello(m)
	case *Reject:
		c.fail(fmt.Sprintf("member %s, in the group since before this one, has other settings: %s", m.From, m.Reason))
	case *Acquire:
		c.acquire(m)
	case *Released:
		c.releasedMsg(m)
	case *Undeliverable:
		// Not an answer: the ask is repeated at the next tick.
	case *RangeSynced:
		c.synced(m)
	case *RangeLive:
		c.live(m.Range, m.Epoch)
	case *RangeStopped:
		c.stopped(m)
	case *Tick:
		c.tick(m)
	case *Leave:
		c.leave()
	case *LeaseRenewed:
		c.renewed(m)
	case *LeaseRenewFailed:
		c.renewFailed(m)
	case *Leases:
		c.leaseSnapshot(m)
	case *LeaseChecked:
		c.leaseChecked(m)
	case *LeaseRevoked:
		c.leaseRevoked(m)
	case *RecordsClaimed:
		c.recordsClaimed(m)
	}
	if !c.done {
		c.reconcile()
		if c.helloDue {
			// The others learn at once where the ranges are: a member that
			// places them before this Hello comes would start them
			// elsewhere, with no holder to copy them from.
			c.helloDue = false
			c.broadcastHello()
		}
		c.flushReleased()
		c.flushClaims()
		c.finish()
	}
	return c.out.Msgs()
}

func (c *Core) observe(e uint64) { c.clock = max(c.clock, e) }

func (c *Core) nextEpoch() uint64 {
	c.clock++
	return c.clock
}

func (c *Core) fail(reason string) {
	if c.failed != "" {
		return
	}
	c.failed = reason
	c.out.Send(ToRanges, &Failed{Reason: reason})
	c.broadcastHello()
}

// fence ends this incarnation at once: its claim may be void, so it calls
// no handler from now on and answers nothing.
func (c *Core) fence(reason string) {
	if c.done {
		return
	}
	c.fenced = reason
	c.done = true
	for r := range c.ranges {
		c.ranges[r].state = &idle{}
	}
	c.lease.validUntil = 0
	c.out.Send(ToLease, &SetValidity{})
	c.out.Send(ToRanges, &Fenced{Reason: reason, LeftOut: c.leftOut})
}

// fenceLeftOut fences this member because the cluster's provider dropped
// its node: protoactor never shows a node that left again, so only an
// incarnation on a new node can rejoin.
func (c *Core) fenceLeftOut(reason string) {
	if !c.done {
		c.leftOut = true
	}
	c.fence(reason)
}

func (c *Core) tick(m *Tick) {
	c.now = max(c.now, m.Now)
	c.ticks++
	if !c.members.started || c.done {
		return
	}
	c.leaseTick()
	if c.done {
		return
	}
	c.members.discoveryTick(c)
	c.healTick()
	if c.done {
		return
	}
	if c.leaving && c.cfg.LeaveTicks > 0 && c.ticks-c.leftAt >= c.cfg.LeaveTicks {
		c.forced = true
	}
	c.liveTimeUp()
	c.askAgain()
	c.drainTimeUp()
	c.recordAgain()
	c.checkAbsentLeases()
	c.deleteStale()
	if c.ticks%c.cfg.HelloTicks == 0 {
		c.broadcastHello()
	}
}

func (c *Core) leave() {
	if c.leaving {
		return
	}
	c.leaving = true
	c.leftAt = c.ticks
	if !c.members.started {
		c.done = true
		c.out.Send(ToRanges, &Left{})
		return
	}
	c.broadcastHello()
}

// eligible: this member may own ranges.
func (c *Core) eligible() bool {
	return c.members.inTopo && !c.leaving && c.failed == ""
}

// finish says goodbye once a leaving or failed member holds nothing, after
// its last answers. It waits for no member to take what its handlers were
// given: each range's record holds its final position (or, a leave's time
// up while a release's write failed, the released lease).
func (c *Core) finish() {
	if c.members.started && !c.done && (c.leaving || c.failed != "") && c.allIdle() {
		c.done = true
		c.broadcastHello() // says Gone
		c.out.Send(ToRanges, &Left{TimeUp: c.forced})
	}
}

func (c *Core) allIdle() bool {
	for r := range c.ranges {
		switch c.ranges[r].state.(type) {
		case *idle:
		case *unrecorded:
			if !c.forced {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// RangeStatus is one range as a member sees it.
type RangeStatus struct {
	// State is idle, syncing, acquiring, claiming, active, deactivating,
	// unrecorded or stopping.
	State string
	// Epoch is that of the member's last attempt on the range.
	Epoch uint64
	// Token is the fencing token the range is delivered under (active).
	Token uint64
	// Owner is the range's owner in the member's view ("" while it
	// discovers the group, or when the view is empty).
	Owner MemberID
	// Record is the range's record as the member knows it.
	Record RecordState
	// Waiting is the record's holder whose answer or void lease the member
	// waits for (acquiring), or itself for its claim's write (claiming) or
	// its release's (unrecorded).
	Waiting []MemberID
}

// Status is a member's protocol state, for status pages and tests.
type Status struct {
	Self MemberID
	// View are the members that may own ranges, sorted.
	View   []MemberID
	Ranges []RangeStatus
	// Discovering: the member waits for the others' answers before it
	// computes ownership.
	Discovering, Leaving, Done bool
	// Settled: the member delivers exactly the ranges its view gives it.
	Settled bool
	Failed  string
	// Fenced says why this incarnation was fenced ("" if it was not).
	Fenced string
	// ValidUntil is when the member's claim lapses unless its lease is
	// renewed, on its clock (0: no claim).
	ValidUntil time.Duration
	// Token is the resourceVersion of the member's last lease write.
	Token uint64
}

// Status returns the member's state.
func (c *Core) Status() Status {
	var s Status
	c.StatusInto(&s)
	return s
}

// StatusInto sets s to the member's state, as Status returns it, reusing
// the arrays of s.View and s.Ranges: a caller that keeps s from step to
// step allocates nothing while no range waits for an answer. The Waiting
// slices are never reused: a copy of s's ranges may keep them.
func (c *Core) StatusInto(s *Status) {
	view := slices.Clone(c.members.view[:0:0]) // nil or empty as the core's
	if len(c.members.view) > 0 {
		view = append(s.View[:0], c.members.view...)
	}
	ranges := s.Ranges
	if ranges == nil || cap(ranges) < len(c.ranges) {
		ranges = make([]RangeStatus, len(c.ranges))
	}
	*s = Status{Self: c.cfg.Self, View: view, Discovering: c.members.discovering,
		Leaving: c.leaving, Done: c.done, Settled: c.settled, Failed: c.failed, Fenced: c.fenced,
		ValidUntil: c.lease.validUntil, Token: c.lease.token,
		Ranges: ranges[:len(c.ranges)]}
	for r := range c.ranges {
		ri := &c.ranges[r]
		rs := RangeStatus{State: ri.state.name(), Epoch: ri.epoch, Record: ri.rec}
		switch st := ri.state.(type) {
		case *active:
			rs.Token = st.token
		case *deactivating:
			rs.Token = st.token
		case *acquiring:
			if st.asked != "" {
				rs.Waiting = []MemberID{st.asked}
			}
		case *claiming, *unrecorded:
			rs.Waiting = []MemberID{c.cfg.Self}
		}
		if c.members.owners != nil && !c.members.discovering {
			rs.Owner = c.members.owners[r]
		}
		s.Ranges[r] = rs
	}
}
