package shard

import (
	"maps"
	"slices"

	"github.com/actorinformer/actorinformer/actors"
)

// Stats returns this member's pipeline counters: those of its range
// informers, running or stopped, summed, so that they only grow while
// ranges come and go. QueueBacklog is that of the running range informers;
// CacheSize counts the objects of the delivered ranges (GetIndexer's);
// Reflector is the zero value (each range has its own). Handlers lists the
// handlers in the order they were added (not the ownership handlers): Delivered and Panics count their
// calls on every range since they were added, Backlog the notifications
// waiting in the running ranges' listeners now.
func (s *Informer) Stats() actors.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.retired
	st.QueueBacklog, st.CacheSize, st.Handlers = 0, 0, nil
	backlog := map[string]int64{}
	for kr := range s.live {
		rs := kr.inf.Stats()
		st.AddCounters(rs)
		st.QueueBacklog += rs.QueueBacklog
		if kr.ri.delivering.Load() {
			st.CacheSize += rs.CacheSize
		}
		for _, h := range rs.Handlers {
			backlog[h.Name] += h.Backlog
		}
	}
	for _, reg := range slices.SortedFunc(maps.Keys(s.regs), func(a, b *registration) int { return a.seq - b.seq }) {
		if reg.h == nil {
			continue // an ownership handler, given no objects
		}
		st.Handlers = append(st.Handlers, actors.HandlerStats{
			Name: reg.name, Delivered: reg.calls.Load(), Panics: reg.panics.Load(), Backlog: backlog[reg.name],
		})
	}
	return st
}

// retire adds the counters of a range informer whose Run has returned to
// the member's.
func (s *Informer) retire(kr *kindRange) {
	rs := kr.inf.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retired.AddCounters(rs)
	delete(s.live, kr)
}
