package shard

import (
	"sync"
	"time"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// peerRanges are the ranges each peer last said it delivers (its Hello's
// Active) and when, on the member's clock: with the member's own, they
// tell which ranges of the group no member delivers, as far as the member
// knows (Status().Undelivered, the actorinformer.shard.group.undelivered
// gauge).
type peerRanges struct {
	mu    sync.Mutex
	peers map[handover.MemberID]peerHello
}

type peerHello struct {
	active []int
	at     time.Duration
}

// note records a peer's Hello, and forgets the peers not heard from for
// forget.
func (p *peerRanges) note(from handover.MemberID, active []int, now, forget time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.peers == nil {
		p.peers = map[handover.MemberID]peerHello{}
	}
	p.peers[from] = peerHello{active: active, at: now}
	for id, h := range p.peers {
		if now-h.at > forget {
			delete(p.peers, id)
		}
	}
}

// undelivered returns the ranges of the group that neither this member
// delivers nor any other member of its view said it delivers in a Hello
// of the last lease duration (a peer silent that long may have stopped).
// It is nil while the member is not in its group (before Run, while it
// discovers the group, waits, or after it left).
func (s *Informer) undelivered() []Range {
	p := s.protocol.Load()
	if p == nil || p.Done || p.Discovering || len(p.View) == 0 {
		return nil
	}
	served := make([]bool, s.o.ranges)
	for _, ri := range *s.delivered.Load() {
		served[ri.r.Index] = true
	}
	now := s.now()
	s.peerRanges.mu.Lock()
	for _, id := range p.View {
		h, ok := s.peerRanges.peers[id]
		if id == p.Self || !ok || now-h.at > s.o.leaseDur {
			continue
		}
		for _, r := range h.active {
			if r >= 0 && r < len(served) {
				served[r] = true
			}
		}
	}
	s.peerRanges.mu.Unlock()
	out := []Range{}
	for i, ok := range served {
		if !ok {
			out = append(out, Range{Index: i, Count: s.o.ranges})
		}
	}
	return out
}
