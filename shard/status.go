package shard

import (
	"slices"
	"time"
)

// Handover is one range moving to or from this member.
type Handover struct {
	Range Range
	// From and To are member ids. An acquire's From is the holder its
	// claim replaced (a lost member's, for a takeover), else the member
	// whose release it resumes from; "" is no member (a range first
	// served, or released with nobody to hand it to).
	From, To string
	// Epoch is the attempt's number (the new owner's); Token the range's
	// fencing token under the new owner (acquire) or the old (release).
	Epoch, Token uint64
	// Kind is "acquire" (this member is To) or "release" (it is From).
	Kind string
	// Deleted counts the objects the previous deliverer's handlers had
	// that this member no longer had (acquire): its handlers got OnDelete
	// for them.
	Deleted int
	// Start is when this member started listing the range (acquire) or was
	// asked for it (release); Duration how long until it delivered it, or
	// until the last handler call on it ended.
	Start    time.Time
	Duration time.Duration
	// Unserved (acquire) is how long the range went undelivered as this
	// member sees it: from its record seen released (its previous
	// deliverer had stopped by then) to its handlers getting the range;
	// or, with no release seen (a range first served, or taken from a
	// member that was lost, whose last call it cannot see), from the start
	// of its list.
	Unserved time.Duration
	// Claim and CatchUp (acquire) are parts of Unserved: until the range
	// had its fencing token (the lease write), and the wait for the
	// range's informer to reach the previous deliverer's version. The rest
	// is the handlers' initial lists.
	Claim, CatchUp time.Duration
}

// RangeStatus is one range as this member sees it.
type RangeStatus struct {
	Range Range
	// State is idle, syncing, acquiring, claiming, active, deactivating or
	// stopping.
	State string
	Epoch uint64
	// Token is the fencing token the range is delivered under (active).
	Token uint64
	// Waiting are the members whose answer (or void lease) the range waits
	// for (acquiring).
	Waiting []string
	// Owner is the range's owner in this member's view.
	Owner string
	// Objects are those cached by this member's informer of the range.
	Objects int
}

// Status is a member's state: its view of the group, its ranges, its last
// handovers and the filter mode.
type Status struct {
	Group, Member string
	// View are the members that own ranges, as this member sees them.
	View []string
	// Delivered are the ranges this member's handlers get now.
	Delivered []Range
	Ranges    []RangeStatus
	Handovers []Handover
	Mode      FilterMode
	// Filtered counts objects the API server sent outside the requested
	// ranges, dropped here.
	Filtered int64
	Synced   bool
	// Discovering: the member is waiting for the others' answers before
	// computing ownership; Leaving: it leaves gracefully.
	Discovering, Leaving bool
	// Failed says why the member gave up, "" if it did not (Err).
	Failed string
	// Waiting says why the member stays out of its group for now: its
	// settings differ from those of members in it (Waiting).
	Waiting string
	// Fenced says why the last incarnation was fenced ("" if none was);
	// Rejoins counts the incarnations that followed a fence.
	Fenced  string
	Rejoins int64
	// WarmStarts counts the ranges whose informer started from the
	// previous deliverer's copy, without a list; WarmFallbacks those that
	// tried and listed (no copy to be had, or the watch from its
	// resourceVersion refused).
	WarmStarts, WarmFallbacks int64
	// Resumes counts the replays of a range's changes from the position
	// an activation resumed from (the previous deliverer's final one, or
	// the newest the leases showed); ResumeGaps those that fell short (the
	// position had left the API server's window: 410 Gone), whose
	// handlers may miss a delete.
	Resumes, ResumeGaps int64
	// RecordFailures counts the release record writes that failed
	// (record.go): each is tried again at the next tick, and the range
	// moves only once one lands or this member's lease is void.
	RecordFailures int64
	// Undelivered are the group's ranges that no member of View delivers,
	// as far as this member knows: neither itself nor a peer whose last
	// Hello (every second, and at once when it starts delivering), heard
	// within the lease duration, named them. A range moving between two
	// members is in it for a moment; one that stays names a range nobody
	// serves. Nil while the member is not in its group.
	Undelivered []Range
	// Causes are what keeps the member from delivering, as far as it
	// knows: requests it may not make (WithAccessCheck), and the last
	// failure of a lease write and of a range's list or watch, until a
	// later one succeeds.
	Causes []string
	// ValidFor is how long the member's claim stays valid unless its lease
	// is renewed (0: no claim: it calls no handler).
	ValidFor time.Duration
}

// Status returns the member's state.
func (s *Informer) Status() Status {
	st := Status{Group: s.group, Member: s.Member(), Mode: s.filter.Mode(), Filtered: s.filter.dropped.Load(),
		Synced: s.HasSynced(), Failed: s.Err(), Delivered: s.Ranges(), Rejoins: s.rejoins.Load(),
		WarmStarts: s.warm.starts.Load(), WarmFallbacks: s.warm.fallbacks.Load(),
		Resumes: s.warm.resumes.Load(), ResumeGaps: s.warm.resumeGaps.Load(), RecordFailures: s.warm.recordFailures.Load()}
	st.Waiting = s.Waiting()
	st.Causes = s.causes.list()
	st.Undelivered = s.undelivered()
	if v := time.Duration(s.validUntil.Load()) - s.now(); v > 0 {
		st.ValidFor = v
	}
	counts := map[int]int{}
	s.mu.Lock()
	for kr := range s.live {
		counts[kr.ri.r.Index] = cacheLen(kr.inf.GetIndexer())
	}
	st.Handovers = slices.Clone(s.handovers)
	s.mu.Unlock()
	if p := s.protocol.Load(); p != nil {
		for _, id := range p.View {
			st.View = append(st.View, string(id))
		}
		st.Discovering, st.Leaving, st.Fenced = p.Discovering, p.Leaving, p.Fenced
		for i, r := range p.Ranges {
			rs := RangeStatus{Range: Range{Index: i, Count: s.o.ranges}, State: r.State, Epoch: r.Epoch, Token: r.Token, Owner: string(r.Owner), Objects: counts[i]}
			for _, w := range r.Waiting {
				rs.Waiting = append(rs.Waiting, string(w))
			}
			st.Ranges = append(st.Ranges, rs)
		}
	}
	return st
}
