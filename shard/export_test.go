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
