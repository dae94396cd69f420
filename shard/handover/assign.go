package handover

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// Assign returns the owner of each of n ranges among members (entries ""
// when members is empty): rendezvous hashing with bounded load. Ranges are
// taken in order; each goes to the member with the highest score for it
// that still has room: with n = q·m + r over m members, r members own q+1
// ranges and the others q. Without the bound, 16 ranges over 3 members
// often give one member twice another's share. Every member computes the
// same answer, whatever the order of members; a join or a leave moves
// little more than the joining or leaving member's share.
func Assign(members []MemberID, n int) []MemberID {
	out := make([]MemberID, n)
	if len(members) == 0 {
		return out
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	q, rem := n/len(ms), n%len(ms)
	full := 0 // members that own q+1 ranges
	load := make(map[MemberID]int, len(ms))
	order := make([]MemberID, len(ms))
	for r := range n {
		copy(order, ms)
		slices.SortFunc(order, func(a, b MemberID) int {
			sa, sb := score(a, r), score(b, r)
			if sa != sb {
				return cmp.Compare(sb, sa)
			}
			return cmp.Compare(b, a)
		})
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

func score(m MemberID, r int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(m))
	x := h.Sum64() ^ (uint64(r)+1)*0x9e3779b97f4a7c15
	// splitmix64's finaliser spreads the bits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func containsInt(s []int, x int) bool { return slices.Contains(s, x) }

func sortReleaseKeys(keys []releaseKey) {
	slices.SortFunc(keys, func(a, b releaseKey) int {
		if x := cmp.Compare(a.to, b.to); x != 0 {
			return x
		}
		return cmp.Compare(a.epoch, b.epoch)
	})
}
