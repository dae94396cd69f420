package handover

import "slices"

// Assign returns the owner of each of n ranges among members (entries ""
// when members is empty): rendezvous hashing with bounded load. Ranges are
// taken in order; each goes to the member with the highest score for it
// that still has room: with n = q·m + r over m members, r members own q+1
// ranges and the others q. Without the bound, 16 ranges over 3 members
// often give one member twice another's share. Every member computes the
// same answer, whatever the order of members; a join or a leave moves
// little more than the joining or leaving member's share. The core places
// ranges with Place instead, which keeps them with their holders: the
// tests compare Place's moves with Assign's.
func Assign(members []MemberID, n int) []MemberID {
	out := make([]MemberID, n)
	if len(members) == 0 {
		return out
	}
	ms := slices.Compact(slices.Sorted(slices.Values(members)))
	q, rem := n/len(ms), n%len(ms)
	full := 0 // members that own q+1 ranges
	load := make(map[MemberID]int, len(ms))
	order := make([]MemberID, len(ms))
	for r := range n {
		copy(order, ms)
		byScore(order, r)
		for _, m := range order {
			if load[m] < q || load[m] == q && full < rem {
				out[r] = m
				load[m]++
				if load[m] == q+1 {
					full++
				}
				break
			}
		}
	}
	return out
}
