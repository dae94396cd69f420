package handover

import "github.com/actorinformer/actorinformer/stage"

// The core's effects, in the kinds package stage reserves for the packages
// above it: the shell in package shard performs them.
const (
	// Member is another member of the group: Addr.ID is the member's
	// number in the sending core (Core.Member turns it back into a
	// MemberID).
	Member = stage.Ext + iota
	// Ranges is the member's own range informers, which its shell starts,
	// activates and stops, and the member's lifecycle (Failed, Fenced,
	// Left).
	Ranges
	// Lease is the member's lease and its reads and revocations of the
	// other members' leases, on the API server.
	Lease
)

// ToRanges is the address of the member's own range informers; ToLease of
// its lease client.
var (
	ToRanges = stage.Addr{Kind: Ranges}
	ToLease  = stage.Addr{Kind: Lease}
)

// ToMember returns the address of the group member a core numbered id.
func ToMember(id uint64) stage.Addr { return stage.Addr{Kind: Member, ID: id} }
