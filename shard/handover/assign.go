package handover

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// sortedKeys is slices.Sorted(maps.Keys(m)) with the slice allocated at
// its size once: the core sorts small maps at every step, and that way
// takes more than twice the allocations (BenchmarkSettledSecond).
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Place returns the owner of each of n ranges among members, given each
// range's holder (holders[r]: the member that delivers it, or claims it
// while its previous deliverer has let it go; "" when none is known):
// sticky assignment with bounded load. A range stays with its holder while
// the holder is a member and within the bound; only the surplus moves, and
// the ranges without a holder in members, each to the member with room and
// the highest rendezvous score for it. With n = q·m + rem over m members,
// rem members own q+1 ranges and the others q: those that hold more than q
// keep the extra one (the most first), the others in order of id, so that
// holders that are part of an earlier placement's owners (members that
// started together, some with their first ranges ready sooner) change no
// owner. maxMoves > 0 bounds the ranges taken from a holder that stays a
// member: the others stay where they are, over the bound, until a later
// placement (with the holders after the moves) moves them. Every member
// computes the same owners from the same members and holders, whatever
// their order.
//
// listing[r] (nil: none) says that range r's holder lists it: it has
// started the range with no member to copy it from and does not deliver
// it yet. Such a range stays with its holder, over the bound if need be,
// and its holder keeps it before the ranges it delivers: moved, it would
// be listed again by its next owner, while a delivered range moves as a
// copy of its holder's cache.
func Place(members []MemberID, holders []MemberID, listing []bool, n, maxMoves int) []MemberID {
	out := make([]MemberID, n)
	if len(members) == 0 {
		return out
	}
	ms := slices.Compact(slices.Sorted(slices.Values(members)))
	lists := func(r int) bool { return r < len(listing) && listing[r] }
	held := heldBy(ms, holders, lists, n)
	capOf := bounds(ms, held, n)
	load := keepHeld(out, ms, held, capOf, holders, lists, maxMoves)
	placeFree(out, ms, capOf, load)
	return out
}

// heldBy returns the ranges of n that each of ms holds (holders[r] is one
// of ms), each member's listed ones first, then its best-scored: the ones
// it keeps when it holds more than its bound.
func heldBy(ms, holders []MemberID, lists func(int) bool, n int) map[MemberID][]int {
	in := make(map[MemberID]bool, len(ms))
	for _, m := range ms {
		in[m] = true
	}
	held := make(map[MemberID][]int, len(ms))
	for r := range n {
		if r < len(holders) && in[holders[r]] {
			held[holders[r]] = append(held[holders[r]], r)
		}
	}
	// The listed, then the best-scored of a member's ranges are the ones
	// it keeps.
	for m, rs := range held {
		slices.SortFunc(rs, func(a, b int) int {
			return cmp.Or(cmp.Compare(b2i(lists(b)), b2i(lists(a))), cmp.Compare(score(m, b), score(m, a)), cmp.Compare(a, b))
		})
	}
	return held
}

// bounds returns how many of n ranges each of ms may own: with
// n = q·m + rem, rem members q+1 and the others q.
func bounds(ms []MemberID, held map[MemberID][]int, n int) map[MemberID]int {
	q, rem := n/len(ms), n%len(ms)
	// The extra ranges go to the members that hold more than q, most
	// first; the rest by id, whatever they hold: a member that holds q or
	// fewer keeps them all either way, and ordering those by what they
	// hold would move the extra range to whichever had started the most
	// of its own when members start together.
	over := func(m MemberID) int {
		if k := len(held[m]); k > q {
			return k
		}
		return 0
	}
	order := slices.Clone(ms)
	slices.SortStableFunc(order, func(a, b MemberID) int { return cmp.Compare(over(b), over(a)) })
	capOf := make(map[MemberID]int, len(ms))
	for i, m := range order {
		capOf[m] = q
		if i < rem {
			capOf[m] = q + 1
		}
	}
	return capOf
}

// keepHeld leaves each member, in out, the ranges it holds within its
// bound (capOf) and those it lists, and returns each member's load. The
// surplus moves, by range: with maxMoves > 0 only the first maxMoves of
// it, the rest staying with its holder over the bound.
func keepHeld(out []MemberID, ms []MemberID, held map[MemberID][]int, capOf map[MemberID]int, holders []MemberID, lists func(int) bool, maxMoves int) map[MemberID]int {
	load := make(map[MemberID]int, len(ms))
	var surplus []int // ranges a member holds over its bound, by range
	for _, m := range ms {
		for i, r := range held[m] {
			if i < capOf[m] || lists(r) {
				out[r] = m
				load[m]++
			} else {
				surplus = append(surplus, r)
			}
		}
	}
	slices.Sort(surplus)
	for i, r := range surplus {
		if maxMoves > 0 && i >= maxMoves {
			out[r] = holders[r] // stays, over the bound, for now
			load[holders[r]]++
		}
	}
	return load
}

// placeFree gives each range without an owner in out to the member of ms
// with room (load under capOf) and the highest rendezvous score for it.
func placeFree(out []MemberID, ms []MemberID, capOf, load map[MemberID]int) {
	order := make([]MemberID, len(ms))
	for r := range out {
		if out[r] != "" {
			continue
		}
		copy(order, ms)
		byScore(order, r)
		for _, m := range order {
			if load[m] < capOf[m] {
				out[r] = m
				load[m]++
				break
			}
		}
	}
}

// score is member m's rendezvous score for range r.
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

// byScore sorts ms by their rendezvous score for range r, the highest
// first (of equal scores, the highest id first).
func byScore(ms []MemberID, r int) {
	slices.SortFunc(ms, func(a, b MemberID) int {
		return cmp.Or(cmp.Compare(score(b, r), score(a, r)), cmp.Compare(b, a))
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
