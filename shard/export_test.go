package shard

// RunningRangeInformers is, for tests, the number of this member's range
// informers whose Run has not returned: those of the ranges it delivers or
// syncs, and of released ranges still stopping.
func RunningRangeInformers(s *Informer) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for ri := range s.live {
		if !ri.retired {
			n++
		}
	}
	return n
}

// RangeListeners is, for tests, how many handlers are attached to the
// running range informers of this member, summed over them.
func RangeListeners(s *Informer) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for kr := range s.live {
		if !kr.retired {
			n += len(kr.attached)
		}
	}
	return n
}
