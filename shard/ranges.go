package shard

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
)

// rangeInformer is the informer of one range on this member: started when
// the member becomes the range's owner, given the handlers once the former
// owner has released the range, stopped when the member releases it.
type rangeInformer struct {
	r        Range
	epoch    uint64
	inf      *actors.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{} // closed when its Run has returned
	started  time.Time
	span     trace.Span // the acquire span, until activation
	from     handover.MemberID
	regs     map[*registration]cache.ResourceEventHandlerRegistration
	stopping bool
	// delivering: the handlers are attached (guarded by Informer.mu).
	delivering bool
	// retired: its Run has returned and its counters are in
	// Informer.retired (guarded by Informer.mu).
	retired bool
}

// The effects of the protocol's core, run on the group actor's goroutine:
// none blocks; what must wait does so in a goroutine that reports back to
// the actor.

func (s *Informer) startRange(e *handover.StartRange) {
	r := Range{Index: e.Range, Count: s.o.ranges}
	opts := append(append([]actors.Option(nil), s.o.actorOpts...), actors.WithActorSystem(s.c.ActorSystem))
	opts = append(opts, s.rangeTelemetry(r, e.Epoch)...)
	s.mu.Lock()
	inf := actors.NewSharedIndexInformer(newRangeLW(s.lw, r, s.filter), s.example, s.o.resync, cloneIndexers(s.indexers), opts...)
	if s.transform != nil {
		_ = inf.SetTransform(s.transform)
	}
	if s.watchErrorHandler != nil {
		_ = inf.SetWatchErrorHandlerWithContext(s.watchErrorHandler)
	}
	// Not cancelled with Run's context: a leaving member delivers its ranges
	// until their new owners have them. Run cancels each when it ends.
	ctx, cancel := context.WithCancel(context.WithoutCancel(s.runCtx))
	ri := &rangeInformer{r: r, epoch: e.Epoch, inf: inf, cancel: cancel, done: make(chan struct{}), started: time.Now(),
		regs: map[*registration]cache.ResourceEventHandlerRegistration{}}
	ri.span = s.tel.startHandover(ctx, SpanAcquire, r, e.Epoch)
	s.ranges[e.Range] = ri
	s.mu.Unlock()

	go func() {
		defer close(ri.done)
		inf.RunWithContext(ctx)
		s.retire(ri)
	}()
	pid := s.pid
	go func() {
		select {
		case <-inf.HasSyncedChecker().Done():
			s.c.ActorSystem.Root.Send(pid, &handover.RangeSynced{Range: e.Range, Epoch: e.Epoch})
		case <-ri.done:
		}
	}()
}

func (s *Informer) informerName() string {
	return "shard." + s.group
}

func cloneIndexers(ix cache.Indexers) cache.Indexers {
	out := make(cache.Indexers, len(ix))
	for k, v := range ix {
		out[k] = v
	}
	return out
}

// activateRange gives the range to the handlers.
func (s *Informer) activateRange(e *handover.ActivateRange) {
	s.mu.Lock()
	ri := s.ranges[e.Range]
	if ri == nil || ri.epoch != e.Epoch {
		s.mu.Unlock()
		s.log.Error("activating a range that does not run", "range", e.Range, "epoch", e.Epoch)
		return
	}
	ri.from = e.From
	ri.delivering = true
	s.setActiveLocked()
	regs := make([]*registration, 0, len(s.regs))
	for reg := range s.regs {
		regs = append(regs, reg)
	}
	// Keys of this range are this member's again.
	for _, k := range ri.inf.GetIndexer().ListKeys() {
		delete(s.released, k)
	}
	took := time.Since(ri.started)
	s.recordHandoverLocked(Handover{Range: ri.r, From: string(e.From), To: string(s.self()), Epoch: e.Epoch, Start: ri.started, Duration: took, Kind: "acquire"})
	s.mu.Unlock()
	for _, reg := range regs {
		s.attach(reg, ri)
	}
	s.tel.endHandover(ri.span, "acquire", string(e.From), took)
	s.log.Info("acquired range", "range", ri.r.String(), "from", string(e.From), "epoch", e.Epoch, "took", took, "objects", cacheLen(ri.inf.GetIndexer()))
	s.signals.poke(s)
}

// deactivateRange stops delivering the range: no handler call starts after
// it returns; once the calls in flight have ended, the handlers hear
// OnRelease, the range's informer stops, and the actor hears RangeStopped.
func (s *Informer) deactivateRange(e *handover.DeactivateRange) {
	start := time.Now()
	s.mu.Lock()
	ri := s.ranges[e.Range]
	if ri == nil || ri.epoch != e.Epoch {
		s.mu.Unlock()
		s.log.Error("deactivating a range that does not run", "range", e.Range, "epoch", e.Epoch)
		return
	}
	ri.delivering = false
	s.setActiveLocked()
	type detached struct {
		reg  *registration
		done <-chan struct{}
	}
	var waits []detached
	for reg, rreg := range ri.regs {
		_ = ri.inf.RemoveEventHandler(rreg)
		var done <-chan struct{}
		if sc, ok := rreg.(actors.Registration); ok {
			done = sc.ShutdownChan()
		}
		waits = append(waits, detached{reg, done})
	}
	clear(ri.regs)
	ri.stopping = true
	s.mu.Unlock()
	span := s.tel.startHandover(s.runCtxOrBackground(), SpanRelease, ri.r, e.Epoch)
	pid := s.pid
	go func() {
		for _, w := range waits {
			if w.done != nil {
				<-w.done
			}
			w.reg.released(ri.r)
		}
		keys := ri.inf.GetIndexer().ListKeys()
		s.rememberReleased(keys)
		ri.cancel()
		<-ri.done
		took := time.Since(start)
		s.mu.Lock()
		if s.ranges[e.Range] == ri {
			delete(s.ranges, e.Range)
		}
		s.recordHandoverLocked(Handover{Range: ri.r, From: string(s.self()), To: string(e.To), Epoch: e.Epoch, Start: start, Duration: took, Kind: "release"})
		s.mu.Unlock()
		s.tel.endHandover(span, "release", string(e.To), took)
		s.log.Info("released range", "range", ri.r.String(), "to", string(e.To), "epoch", e.Epoch, "took", took, "objects", len(keys))
		s.c.ActorSystem.Root.Send(pid, &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch})
	}()
}

// stopRange stops a range that was syncing: no handler has seen it.
func (s *Informer) stopRange(e *handover.StopRange) {
	s.mu.Lock()
	ri := s.ranges[e.Range]
	if ri == nil || ri.epoch != e.Epoch {
		s.mu.Unlock()
		return
	}
	ri.stopping = true
	s.mu.Unlock()
	s.tel.abortHandover(ri.span)
	pid := s.pid
	go func() {
		ri.cancel()
		<-ri.done
		s.mu.Lock()
		if s.ranges[e.Range] == ri {
			delete(s.ranges, e.Range)
		}
		s.mu.Unlock()
		s.c.ActorSystem.Root.Send(pid, &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch})
	}()
}

func (s *Informer) runCtxOrBackground() context.Context {
	if s.runCtx != nil {
		return context.WithoutCancel(s.runCtx)
	}
	return context.Background()
}

func (s *Informer) recordHandoverLocked(h Handover) {
	if len(s.handovers) >= maxHandovers {
		copy(s.handovers, s.handovers[1:])
		s.handovers = s.handovers[:maxHandovers-1]
	}
	s.handovers = append(s.handovers, h)
}

// cacheLen is the number of objects in a range's cache, without listing
// them.
func cacheLen(ix cache.Indexer) int {
	if l, ok := ix.(actors.Store); ok {
		return l.Len()
	}
	return len(ix.ListKeys())
}
