package handover

import (
	"strings"
	"time"
)

// NodeID is a cluster member as the cluster's provider names it
// (protoactor's member id). A node may run several incarnations of a group
// member over its life, one at a time.
type NodeID string

// MemberID names one incarnation of a group member: its node's id, '#',
// and an incarnation id that is new each time a member starts or rejoins.
// Two incarnations never share an id, so a restarted member, or one that
// rejoined after it was fenced, is never taken for its predecessor.
type MemberID string

// NewMemberID returns the id of incarnation inc of a member on node.
func NewMemberID(node NodeID, inc string) MemberID { return MemberID(string(node) + "#" + inc) }

// Node returns the node the member runs on.
func (m MemberID) Node() NodeID {
	if i := strings.LastIndexByte(string(m), '#'); i >= 0 {
		return NodeID(m[:i])
	}
	return NodeID(m)
}

// PeerState is what a member says of itself in its Hello.
type PeerState uint8

const (
	// Joined: the member takes part in the group and may own ranges.
	Joined PeerState = iota
	// Leaving: the member is leaving gracefully; it owns no range any more
	// but still delivers those it holds until their new owners ask.
	Leaving
	// Gone: the member holds no range and will answer nothing more.
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

// Input is what a Core takes: the messages of this file that say they are
// inputs. The compiler refuses anything else.
type Input interface{ handoverInput() }

// Messages between members (they travel as protobuf messages; the shell
// converts them).

// Hello introduces a member to another: its group settings, its state, the
// ranges it delivers and its view of the group. A member sends it to every
// member of its topology and every holder of a lease of the group when it
// starts, to each that appears later, and every HelloTicks as a heartbeat;
// one that is not a Reply is answered with a Reply.
type Hello struct {
	From      MemberID
	Ranges    int
	HashField string
	// JoinedAt orders members for a tie-break when two with different
	// settings meet: the later one gives up.
	JoinedAt int64
	State    PeerState
	// Active are the ranges whose handlers the sender calls now: members
	// place ranges with their holders (sticky placement).
	Active []int
	// Listing are the ranges the sender has started and does not deliver
	// yet (syncing, acquiring, claiming): members place a range that no
	// member delivers with the member that lists it, and do not move it
	// while it does (its next owner would list it again).
	Listing []int
	// View is the sender's group view. A member that a current peer leaves
	// out of its view for HealTicks rejoins as a new incarnation (the
	// peer's provider dropped it and will not take it back).
	View  []MemberID
	Reply bool
	// KnowsYou: the sender's topology has the receiver's node; HeardYou:
	// the sender heard the receiver lately. A view that leaves out a
	// receiver the sender knows and does not hear says that the receiver's
	// messages do not reach the sender (it is unreachable to the
	// receiver), not that the receiver's node was dropped: the receiver is
	// not fenced for it. Members that predate them send neither.
	KnowsYou, HeardYou bool
}

// Reject answers a Hello whose settings differ from the receiver's, from a
// member that joined earlier: the sender must give up.
type Reject struct {
	From   MemberID
	Reason string
}

// Acquire asks the holder of ranges' records to release them to the
// sender, which has synced them under epoch Epoch (an attempt number of
// the sender's). It is sent again every tick until the record changes.
type Acquire struct {
	From   MemberID
	Epoch  uint64
	Ranges []int
}

// Released answers an Acquire of epoch Epoch: the sender does not deliver
// Ranges (its handlers' calls on them have ended). Records: each range's
// record as the sender knows it: the sender will never deliver a range
// under a record of that generation or an earlier one (it delivers only
// under a record write of its own, or of a later one), so a record at that
// generation that names the sender may be taken over. What the sender's
// handlers were given is in the record itself: a member that delivered a
// range answers for it only once its release wrote the record.
type Released struct {
	From    MemberID
	Epoch   uint64
	Ranges  []int
	Records []RecordState
}

// RecordState is a range's record as a member knows it: the member it
// names as the range's holder ("" for none), and its generation, which
// every write of the record raises by one (0: no record was ever written,
// so no member ever delivered the range). A member delivers a range only
// under a record write that named it; it stops before the write that
// names another member or none. Next: the member the last release was
// for ("" when none asked), which members place the range with while the
// record names it or none.
type RecordState struct {
	Range  int
	Holder MemberID
	Gen    uint64
	Next   MemberID
}

// ObjectRef names an object a range's handlers had: the shell's
// tombstones.
type ObjectRef struct {
	Key, UID, Version string
}

// Inputs from this member's own shell.

// Topology is the cluster's current member list (protoactor's
// ClusterTopology), this member's node included once the provider has
// registered it.
type Topology struct{ Nodes []NodeID }

// Tick is the shell's periodic input, with the time on the member's
// monotonic clock (since its start). Retries, heartbeats and timeouts count
// in ticks; leases in time.
type Tick struct{ Now time.Duration }

// Leave starts a graceful leave.
type Leave struct{}

// Undeliverable: a message to Member came back undelivered (protoactor's
// DeadLetterResponse). It says nothing of the member: a connection that is
// not established yet gives one too. The message is sent again at the next
// retry; it never counts as an answer.
type Undeliverable struct{ Member MemberID }

// RangeSynced: the range's informer, started by StartRange of that epoch,
// has synced. Live: its watch has sent something already (an event or a
// bookmark).
type RangeSynced struct {
	Range int
	Epoch uint64
	Live  bool
}

// RangeLive: the watch of the range's informer, started by StartRange of
// that epoch, has sent something (before or after RangeSynced).
type RangeLive struct {
	Range int
	Epoch uint64
}

// RangeStopped: the range's informer, asked to stop by StopRange or
// DeactivateRange of that epoch, has stopped, and its handlers' calls have
// ended; or a ReleaseRecord of that epoch has ended. Record is the range's
// record after the release's write, which named no holder (nil: not
// written). Unrecorded: the range's handlers were given events and the
// write of its final position failed: the record still names this member
// without it.
type RangeStopped struct {
	Range      int
	Epoch      uint64
	Record     *RecordState
	Unrecorded bool
}

// LeaseRenewed: RenewLease Seq wrote this member's lease (created or
// renewed it) by a request that started at Start on the member's clock;
// Token is the lease's resourceVersion after the write. Now is the clock
// when the shell hands the answer over (a paused process resumes with old
// answers in its mailbox).
type LeaseRenewed struct {
	Seq        uint64
	Start, Now time.Duration
	Token      uint64
}

// LeaseRenewFailed: RenewLease Seq, whose write started at Start, failed.
// Lost: the lease is gone or another's (it was revoked, or a create found
// it existing): it will never be renewed again.
type LeaseRenewFailed struct {
	Seq   uint64
	Start time.Duration
	Lost  bool
}

// Leases is the group's leases as the shell's watch of them has them, at
// Now on the member's clock.
type Leases struct {
	Now    time.Duration
	Leases []LeaseRecord
	// Released are the members whose lease was released: marked by its
	// holder once it stopped calling handlers, or by a revoker at a
	// version unchanged for LeaseDuration. Such a lease is void at once;
	// one that is just gone (deleted) is void LeaseDuration later.
	Released []MemberID
	// Records are the group's range records, as the shell's watch of them
	// has them (a range left out has none).
	Records []RecordState
	// Stale are the group's leases with no holder (tombstones, released
	// leases), by name and resourceVersion: each is deleted once this
	// member has seen it unchanged for Config.StaleAge (DeleteLease).
	Stale []StaleLease
}

// StaleLease is a lease with no holder: its name and resourceVersion.
type StaleLease struct {
	Name, Version string
}

// LeaseRecord is one member's lease: its holder and resourceVersion.
// Other: the holder runs another version of the protocol, whose
// deliveries the records do not show.
type LeaseRecord struct {
	Holder  MemberID
	Version string
	Other   bool
}

// RecordsClaimed answers ClaimRecords: each claim's outcome. Now is the
// member's clock when the shell hands the answer over (a paused process
// resumes with old answers in its mailbox).
type RecordsClaimed struct {
	Now     time.Duration
	Results []ClaimResult
}

// ClaimResult is one claim's outcome. OK: the record was at the claim's
// generation and now names this member, by a write whose resourceVersion
// is Token; not OK: the record had changed (Record is what it is now) or
// the write failed (Record.Gen is 0: it may or may not have landed).
type ClaimResult struct {
	Range  int
	Epoch  uint64
	OK     bool
	Token  uint64
	Record RecordState
}

// LeaseChecked answers CheckLease: whether Member has a live lease on the
// API server, and its resourceVersion; not Found: it has none and never
// will write one (it was released, or a tombstone holds its name).
type LeaseChecked struct {
	Member  MemberID
	Found   bool
	Version string
	// Released: not Found, as the lease was released (void at once); else
	// there was none and a tombstone took its name (void LeaseDuration
	// later: someone may have deleted it).
	Released bool
	// Failed: the read failed, and says nothing (the core reads again
	// later).
	Failed bool
}

// LeaseRevoked answers RevokeLease: OK when this member released the lease
// at that version; not when it had changed or was gone.
type LeaseRevoked struct {
	Member  MemberID
	Version string
	OK      bool
}

func (*Hello) handoverInput()            {}
func (*Reject) handoverInput()           {}
func (*Acquire) handoverInput()          {}
func (*Released) handoverInput()         {}
func (*Topology) handoverInput()         {}
func (*Tick) handoverInput()             {}
func (*Leave) handoverInput()            {}
func (*Undeliverable) handoverInput()    {}
func (*RangeSynced) handoverInput()      {}
func (*RangeLive) handoverInput()        {}
func (*RangeStopped) handoverInput()     {}
func (*LeaseRenewed) handoverInput()     {}
func (*LeaseRenewFailed) handoverInput() {}
func (*Leases) handoverInput()           {}
func (*LeaseChecked) handoverInput()     {}
func (*LeaseRevoked) handoverInput()     {}
func (*RecordsClaimed) handoverInput()   {}

// Effects on this member's range informers (sent to ToRanges).

// StartRange starts the range's informer, without handlers; the shell
// answers RangeSynced once it has synced. From is the member that delivers
// the range now, as this one knows it ("" for none): the shell may start
// from a copy of its cache and watch from its resourceVersion, without a
// list (a warm start), and lists when that fails.
type StartRange struct {
	Range int
	Epoch uint64
	From  MemberID
	// Cold says why From is "" (for the shell's log): the members this one
	// knows and what they said they deliver.
	Cold string
}

// ActivateRange gives the range to the handlers, under fencing token Token.
// The shell resumes from the newest position of the range (its record's, as
// the claim found it, and the leases'): it waits until the range's
// informer has reached the newest object version the record says was
// given, then calls OnDelete with a cache.DeletedFinalStateUnknown for
// each object deleted since that position, then OnAdd(obj, true) for each
// cached object, then every change.
type ActivateRange struct {
	Range int
	Epoch uint64
	Token uint64
}

// DeactivateRange stops delivering the range, draining: the range's
// informer stops taking changes from the API server, the handlers get what
// it had taken, then no further call; the shell writes the range's record
// in the API server, if it still names this member (compare-and-swap):
// the final position, and no holder. It drops the range's cache (with no
// OnDelete: the objects still exist) and answers RangeStopped with the
// record. To is the member that asked for it ("" when none).
type DeactivateRange struct {
	Range int
	Epoch uint64
	To    MemberID
}

// DrainTimeUp ends the drain of a range being deactivated (that epoch's):
// the shell stops waiting for its handlers to be given what its informer
// had taken, and releases it as it is (its record and answer carry the
// position the handlers did reach). The core sends it DrainTicks after
// the DeactivateRange.
type DrainTimeUp struct {
	Range int
	Epoch uint64
}

// ReleaseRecord writes the release of a range whose release's write failed
// (RangeStopped.Unrecorded) again: no holder, and the final position the
// shell kept, if the record still names this member. The shell answers
// RangeStopped (neither Record nor Unrecorded when the record names
// another member or none: the range was taken over, or an earlier write
// landed and its answer was lost).
type ReleaseRecord struct {
	Range int
	Epoch uint64
}

// StopRange stops a range's informer that no handler has seen (syncing);
// the shell answers RangeStopped.
type StopRange struct {
	Range int
	Epoch uint64
}

// Failed: this member cannot be part of the group (its settings differ
// from those of a member that joined earlier). It delivers nothing more.
type Failed struct{ Reason string }

// Left: the member has released everything and said goodbye; its shell
// deletes its lease and may stop. TimeUp: the leave's time ran out, and
// the ranges still delivered then were released with nobody asking (their
// next owners resume from their records).
type Left struct {
	TimeUp bool
}

// Fenced: this incarnation lost its claim (its lease could not be renewed
// in time, or was revoked), or the group left it out of its view. The core
// takes no further input. The shell stops every handler call at once
// (without draining), drops every range, deletes the lease if it still
// exists, and rejoins as a new incarnation. LeftOut: the cluster's
// provider dropped this member's node (a peer's view left it out, or its
// own topology did), so only an incarnation on a new node can rejoin.
type Fenced struct {
	Reason  string
	LeftOut bool
}

// Effects on this member's lease (sent to ToLease).

// RenewLease writes this member's lease: creates it (Create) or renews it;
// the shell starts the write after taking this message and answers
// LeaseRenewed or LeaseRenewFailed with Seq and the time the write
// started, within RenewDeadline.
type RenewLease struct {
	Seq    uint64
	Create bool
}

// SetValidity: handler calls are allowed while the member's clock is
// before Until (0: none). The shell checks it before every call.
type SetValidity struct{ Until time.Duration }

// CheckLease reads Member's lease (a direct read, not the watch). If there
// is none, the shell creates a tombstone in its place (a lease of that
// name with no holder), so that the member can never create its lease
// again. It answers LeaseChecked: Found with the version when the member
// has a live lease (the tombstone's create can find one made meanwhile),
// not Found when it was released or the tombstone is there.
type CheckLease struct{ Member MemberID }

// ClaimRecords writes each claimed range's record naming this member, by
// compare-and-swap: only a record still at the claim's generation is
// written (one request for every claim of the batch). The shell answers
// RecordsClaimed.
type ClaimRecords struct{ Claims []RecordClaim }

// RecordClaim is a claim of range Range, for the attempt of epoch Epoch,
// on the record at generation Gen.
type RecordClaim struct {
	Range int
	Epoch uint64
	Gen   uint64
}

// DeleteLease deletes the lease Name if it is still at Version (a delete
// refused if the lease changed). Nothing answers: the next snapshot shows
// the outcome.
type DeleteLease struct {
	Name, Version string
}

// RevokeLease releases Member's lease if it is still at Version (a write
// refused if the lease changed): it loses its holder, gets a mark saying
// it was released, and keeps its name, so the member cannot renew it or
// create it again. The shell answers LeaseRevoked.
type RevokeLease struct {
	Member  MemberID
	Version string
}
