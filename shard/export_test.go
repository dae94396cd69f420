package shard

// RunningRangeInformers is, for tests, the number of this member's range
// informers whose Run has not returned: those of the ranges it delivers or
// syncs, and of released ranges still stopping.
func RunningRangeInformers(s *Informer) int {
	return sumRunning(s, func(*kindRange) int { return 1 })
}

// RangeListeners is, for tests, how many handlers are attached to the
// running range informers of this member, summed over them.
func RangeListeners(s *Informer) int {
	return sumRunning(s, func(kr *kindRange) int { return len(kr.attached) })
}

// sumRunning sums f over the member's range informers whose Run has not
// returned.
func sumRunning(s *Informer, f func(*kindRange) int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for kr := range s.live {
		n += f(kr)
	}
	return n
}
