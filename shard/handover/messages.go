package handover

// MemberID names a member of the cluster (protoactor's member id).
type MemberID string

// PeerState is what a member says of itself in its Hello.
type PeerState uint8

const (
	// Joined: the member takes part in the group and may own ranges.
	Joined PeerState = iota
	// Leaving: the member is leaving gracefully; it owns no range any more
	// but still delivers those it holds until their new owners ask.
	Leaving
	// Gone: the member holds no range and will answer nothing more; it
	// counts as having released every range.
	Gone
)

func (s PeerState) String() string {
	switch s {
	case Joined:
		return "joined"
	case Leaving:
		return "leaving"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// Messages between members (they travel as protobuf messages; the shell
// converts them).

// Hello introduces a member to another: its group settings, its state and
// the ranges it delivers now. A member sends it to every member of the
// cluster when it starts, to each member that appears later, and every few
// ticks as a heartbeat; one that is not a Reply is answered with a Reply.
type Hello struct {
	From      MemberID
	Ranges    int
	HashField string
	// JoinedAt orders members for a tie-break when two with different
	// settings meet: the later one gives up.
	JoinedAt int64
	State    PeerState
	// Active are the ranges whose handlers the sender calls now.
	Active []int
	Reply  bool
}

// Reject answers a Hello whose settings differ from the receiver's, from a
// member that joined earlier: the sender must give up.
type Reject struct {
	From   MemberID
	Reason string
}

// Acquire asks a member to release ranges to the sender, which has synced
// them under epoch Epoch. It is sent to every member of the cluster, and
// again every tick to those that have not answered.
type Acquire struct {
	From   MemberID
	Epoch  uint64
	Ranges []int
}

// Released answers an Acquire of epoch Epoch: the sender does not deliver
// Ranges (it waited for its handlers' calls on them to end) and will not
// deliver them again before it acquires them itself. WasActive says it was
// delivering them until now (it is the range's previous owner).
type Released struct {
	From      MemberID
	Epoch     uint64
	Ranges    []int
	WasActive bool
}

// Unreachable says that a message to Member came back undelivered
// (protoactor's DeadLetterResponse): no group actor runs there now, so it
// delivers nothing, and counts as having answered the asks in progress.
type Unreachable struct{ Member MemberID }

// Inputs from this member's own shell.

// Topology is the cluster's current member list (protoactor's
// ClusterTopology), this member included once the provider has registered it.
type Topology struct{ Members []MemberID }

// RangeSynced: the range's informer, started by StartRange of that epoch,
// has synced.
type RangeSynced struct {
	Range int
	Epoch uint64
}

// RangeStopped: the range's informer, asked to stop by StopRange or
// DeactivateRange of that epoch, has stopped, and its handlers' calls have
// ended.
type RangeStopped struct {
	Range int
	Epoch uint64
}

// Tick is the shell's periodic input: retries, heartbeats and timeouts
// count in ticks.
type Tick struct{}

// Leave starts a graceful leave.
type Leave struct{}

// Effects, sent to ToRanges: the shell performs them.

// StartRange starts the range's informer, listing and watching it, without
// handlers; the shell answers RangeSynced once it has synced.
type StartRange struct {
	Range int
	Epoch uint64
}

// ActivateRange gives the range's objects to the handlers: they get
// OnAdd(obj, true) for each cached object, then every change. From is the
// member that delivered the range before ("" when none did, or it was lost).
type ActivateRange struct {
	Range int
	Epoch uint64
	From  MemberID
}

// DeactivateRange stops delivering the range: the handlers get no further
// call, the shell waits for the calls in flight, drops the range's cache
// (with no OnDelete: the objects still exist) and answers RangeStopped. To
// is the member it is released to ("" when none).
type DeactivateRange struct {
	Range int
	Epoch uint64
	To    MemberID
}

// StopRange stops a range's informer that was syncing (no handler has seen
// it); the shell answers RangeStopped.
type StopRange struct {
	Range int
	Epoch uint64
}

// Failed: this member cannot be part of the group (its settings differ
// from those of a member that joined earlier). It delivers nothing more.
type Failed struct{ Reason string }

// Left: the member has released everything and said goodbye; its shell may
// stop.
type Left struct{}
