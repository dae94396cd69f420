package shard

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/pulse"
	"github.com/actorinformer/actorinformer/shard/handover"
)

// rangeInformer is one range on this member: started when the member
// becomes the range's owner, given the handlers once the range is claimed,
// drained and stopped when the member releases it. It has an informer per
// kind (kinds: today one, the group's Informer's). The I/O actor starts
// and ends each effect on it; the waiting happens on the range's lane
// (memberIO.run), which reports back to the actor.
type rangeInformer struct {
	r       Range
	epoch   uint64
	kinds   []*kindRange
	cancel  context.CancelFunc
	done    chan struct{} // closed when every kind's Run has returned
	started time.Time
	span    trace.Span // the acquire span, until activation

	// Set when the range is activated, before the handlers are attached.
	token uint64
	from  handover.MemberID
	// unservedSince is when the range was last known delivered, as this
	// member sees it: its record was seen released, or (a range first
	// served, or taken from a member that was lost) it started listing the
	// range.
	unservedSince time.Time
	// claimed is when the core gave the range its token (ActivateRange).
	claimed time.Time
	// delivering: the handlers may be called for it (the calls' gate).
	delivering atomic.Bool
	// progress fires as a handler is given an event, as handlers are
	// attached or detached, and as delivering turns off: the switch's
	// waits (waitFor) and the calls' gate look again.
	progress pulse.Pulse
	// switching is held while the range is activated or deactivated:
	// each pauses and resumes the intake.
	switching sync.Mutex
	// drainUp is closed when the core ends the range's drain (DrainTimeUp,
	// on the I/O actor).
	drainUp chan struct{}
	// ended: deactivated (guarded by switching); an activation that runs
	// after it does nothing.
	ended bool
	// dropped: a fence or the member's stop dropped the range (drop),
	// without waiting for its switch under way; an activation then gives
	// up, and delivering is never turned on again. Guarded by dropMu,
	// which also covers delivering's turning on. droppedCh is closed then:
	// the switch's waits end.
	dropMu    sync.Mutex
	dropped   bool
	droppedCh chan struct{}
	// switches orders the range's work off the actor (its sync's wait,
	// activation, release, stop), which calls its handlers: the lease is
	// released only once it has ended. Used on the I/O actor.
	switches lane
	// ctx is its informers'.
	ctx context.Context
	// activated: the activation has ended.
	activated atomic.Bool
	// running: the kinds whose informer's Run has not returned; live: the
	// kinds whose watch has sent something.
	running, live atomic.Int32
}

// kindRange is a range's informer of one kind (k's).
type kindRange struct {
	ri   *rangeInformer
	k    *Informer
	inf  *actors.SharedIndexInformer
	lw   *rangeLW
	done chan struct{} // closed when its Run has returned
	// attached are the handlers given the range (guarded by Informer.mu).
	attached map[*registration]*attachment

	// resumeFrom: the range resumes from this position, the newest of its
	// record's and the leases' (none: version 0), set when it starts with
	// no deliverer to copy from, and at its activation;
	// resume is its replay's outcome, set before the range is reported
	// synced, or by the activation; finals are the last states of the
	// objects its activation gave tombstones for (see position.go).
	resumeFrom position
	resume     *resumed
	// listed is the informer's list version when it synced: its intake
	// recorded every delete after it (rangeLW.record).
	listed atomic.Int64
	finals map[string]any
	// position is the newest position written for the range
	// (Informer.positions).
	position atomic.Int64
	// sampled is what the range's informer had been handed at the last
	// position written (Informer.positions, under finalMu): once every
	// handler has been given its newest object, its forwarded version is
	// a position, whatever came since.
	sampled struct{ forwarded, object int64 }
}

// of is the range's informer of kind s.
func (ri *rangeInformer) of(s *Informer) *kindRange { return ri.kinds[s.kind] }

// drop stops the range's deliveries from any goroutine, a switch under
// way included: no handler call starts from now on (the gate), no
// activation turns them on again, and the switch's waits end. The caller
// then waits for the switch (switches) before it detaches the handlers.
func (ri *rangeInformer) drop() {
	ri.dropMu.Lock()
	defer ri.dropMu.Unlock()
	ri.stopDelivering()
	if !ri.dropped {
		ri.dropped = true
		if ri.droppedCh != nil {
			close(ri.droppedCh)
		}
	}
}

// stopDelivering turns the range's deliveries off: no call starts from now
// on, and the calls waiting in the gate see it.
func (ri *rangeInformer) stopDelivering() {
	ri.delivering.Store(false)
	ri.progress.Fire()
}

// startDelivering turns the range's deliveries on, unless it was dropped.
func (ri *rangeInformer) startDelivering() bool {
	ri.dropMu.Lock()
	defer ri.dropMu.Unlock()
	if ri.dropped {
		return false
	}
	ri.delivering.Store(true)
	return true
}

// attachment is a handler given a range.
type attachment struct {
	rreg cache.ResourceEventHandlerRegistration
	h    *rangeHandler
}

// The effects of the protocol's core on the range informers, run on the
// I/O actor's goroutine: none blocks.

func (io *memberIO) rangeEffect(body any) {
	inc := io.inc
	s := inc.s
	switch e := body.(type) {
	case *handover.StartRange:
		delete(io.movedTo, e.Range)
		delete(io.unrecorded, e.Range) // given up (a leave's time was up)
		io.startRange(e)
	case *handover.ActivateRange:
		io.activateRange(e)
	case *handover.DeactivateRange:
		ri := io.ranges[e.Range]
		if ri == nil || ri.epoch != e.Epoch {
			inc.log.Error("deactivating a range that does not run (a bug of ours)", "range", e.Range, "epoch", e.Epoch)
			return
		}
		if e.To != "" {
			io.movedTo[e.Range] = e.To
		}
		io.run(&ri.switches, func() { io.deactivate(ri, e.To) })
	case *handover.DrainTimeUp:
		if ri := io.ranges[e.Range]; ri != nil && ri.epoch == e.Epoch && !closed(ri.drainUp) {
			close(ri.drainUp)
		}
	case *handover.ReleaseRecord:
		io.recordAgain(e)
	case *handover.StopRange:
		ri := io.ranges[e.Range]
		if ri == nil || ri.epoch != e.Epoch {
			return
		}
		s.tel.abortHandover(ri.span)
		inc.log.Debug("stopping a range's informer that no handler was given", "range", ri.r.String(), "epoch", e.Epoch)
		ri.cancel() // before the wait for sync on its lane can end
		io.run(&ri.switches, func() {
			<-ri.done
			io.report(ri, &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch})
		})
	case *handover.Failed:
		io.settings = e.Reason
		inc.log.Warn("this member's settings differ from the group's: it stays out of the group until the members with other settings have left", "reason", e.Reason)
	case *handover.Left:
		io.left(e)
	case *handover.Fenced:
		inc.log.Warn("fenced: no handler is called from now on", "reason", e.Reason, "leftOut", e.LeftOut)
		io.dropAll(ending{fenced: e.Reason, leftOut: e.LeftOut})
	}
}

// activateRange starts the activation of a range the core claimed, from
// the record its claim found.
func (io *memberIO) activateRange(e *handover.ActivateRange) {
	ri := io.ranges[e.Range]
	if ri == nil || ri.epoch != e.Epoch {
		io.inc.log.Error("activating a range that does not run (a bug of ours)", "range", e.Range, "epoch", e.Epoch)
		return
	}
	ri.token = e.Token
	ri.unservedSince = ri.started
	if at, ok := io.freedAt[e.Range]; ok && at.After(ri.started) {
		ri.unservedSince = at // the previous deliverer had stopped by then
	}
	ri.claimed = time.Now()
	rec, ok := io.finals[e.Range]
	delete(io.finals, e.Range)
	if !ok || rec.token != e.Token {
		io.inc.log.Error("activating a range without its claim's record; it resumes from the leases' positions (a bug of ours, or a test's activation)", "range", e.Range, "token", e.Token)
		rec = claimedFinal{}
	}
	// Each kind resumes from its own position: the record's part of it,
	// or the leases'.
	targets := make([]int64, len(ri.kinds))
	for i, kr := range ri.kinds {
		if from := io.positions[kr.k.kindKey][e.Range]; from.newer(kr.resumeFrom) {
			// A lost deliverer's last renewal, or a leaver's release.
			kr.resumeFrom, kr.resume = from, nil
		}
		targets[i] = io.fromRecord(kr, rec.of(kr.k))
	}
	// The previous deliverer: the holder this claim replaced, else the
	// member whose release wrote the record.
	ri.from = cmp.Or(rec.replaced, rec.rec.by)
	io.run(&ri.switches, func() { io.activate(ri, targets) })
}

// left ends a graceful leave: the lease is released, then the incarnation
// ends.
func (io *memberIO) left(e *handover.Left) {
	inc := io.inc
	if e.TimeUp {
		inc.log.Info("the leave's time ran out; the ranges still delivered were released with no member asking, and resume from their records")
	}
	end := ending{settings: io.settings}
	io.run(nil, func() { inc.releaseAndFinish(end) })
}

// dropAll ends the incarnation at once: no handler call starts from now
// on, every range is dropped, then the lease is released (every handler
// call has ended, the listeners' and the tombstone calls of the ranges'
// switches: the others may take the ranges over at once).
func (io *memberIO) dropAll(end ending) {
	if io.ended {
		return
	}
	io.ended = true
	inc := io.inc
	for _, ri := range io.ranges {
		if ri.activated.Load() {
			for _, kr := range ri.kinds {
				kr.k.releasedAt(ri.r.Index, position{token: ri.token, version: kr.position.Load()})
			}
		}
	}
	endRanges := io.dropRanges()
	io.run(nil, func() { endRanges(); inc.releaseAndFinish(end) })
}

// releaseAndFinish, off the actor, releases the lease, then ends the
// incarnation.
func (inc *incarnation) releaseAndFinish(end ending) {
	if err := inc.leases.release(inc.ctx); err != nil {
		inc.log.Warn("cannot release the lease; the others revoke it once it lapses", "err", err)
	}
	inc.finish(end)
}

// dropRanges drops every range on the actor: no handler call starts from
// now on, and none is published. The function it returns ends them, on
// the actor or off it: once each range's switch under way has ended, its
// handlers are detached and its informers stopped.
func (io *memberIO) dropRanges() (end func()) {
	io.inc.s.validUntil.Store(0)
	all := make([]*rangeInformer, 0, len(io.ranges))
	switched := make([]<-chan struct{}, 0, len(io.ranges))
	for _, ri := range io.ranges {
		ri.drop()
		all = append(all, ri)
		switched = append(switched, ri.switches.wait())
	}
	clear(io.ranges)
	io.inc.s.publish(nil)
	return func() {
		for i, ri := range all {
			<-switched[i]
			detachAll(ri)
			ri.cancel()
			<-ri.done
		}
	}
}

// report hands a range effect's outcome to the actor.
func (io *memberIO) report(ri *rangeInformer, in handover.Input) {
	io.inc.c.ActorSystem.Root.Send(io.inc.ioPID, &rangeDone{ri: ri, report: in})
}

// rangeDone: on the actor, a range effect has ended.
func (io *memberIO) rangeDone(m *rangeDone) {
	switch r := m.report.(type) {
	case *handover.RangeStopped:
		if m.ri != nil && io.ranges[r.Range] == m.ri {
			delete(io.ranges, r.Range)
		}
		if r.Unrecorded {
			io.unrecorded[r.Range] = m.pending
		} else {
			delete(io.unrecorded, r.Range)
		}
		io.publish()
	case *handover.RangeSynced:
		// The core decides.
	case nil:
		// activated: the handlers have the range.
		io.publish()
		return
	}
	io.toCore(m.report)
}

// publish publishes the ranges whose handlers have them.
func (io *memberIO) publish() {
	io.inc.s.publish(slices.Collect(maps.Values(io.ranges)))
}

func (io *memberIO) startRange(e *handover.StartRange) {
	inc := io.inc
	s := inc.s
	r := Range{Index: e.Range, Count: s.o.ranges}
	warm := e.From != "" && !s.o.noWarm
	if !warm && !s.o.noWarm {
		p, ok := io.positions[""][e.Range]
		inc.log.Info("range informer starts cold: no member delivers the range as this member knows", "range", r.String(), "epoch", e.Epoch, "known", e.Cold,
			"position", p.version, "positionKnown", ok)
	}
	ctx, cancel := context.WithCancel(inc.ctx)
	ri := &rangeInformer{r: r, epoch: e.Epoch, cancel: cancel, done: make(chan struct{}), started: time.Now(),
		droppedCh: make(chan struct{}), drainUp: make(chan struct{}), ctx: ctx}
	ri.span = s.tel.startHandover(ctx, SpanAcquire, r, e.Epoch)
	for _, k := range s.kinds {
		ri.kinds = append(ri.kinds, io.startKind(ri, k, e, warm))
	}
	ri.running.Store(int32(len(ri.kinds)))
	io.ranges[e.Range] = ri
	io.runRange(ri)
}

// startKind makes range ri's informer of kind k: a copy of the previous
// deliverer's cache when warm, else a list.
func (io *memberIO) startKind(ri *rangeInformer, k *Informer, e *handover.StartRange, warm bool) *kindRange {
	inc := io.inc
	opts := append(append([]actors.Option(nil), k.o.actorOpts...), actors.WithActorSystem(inc.c.ActorSystem))
	opts = append(opts, k.rangeTelemetry(ri.r, e.Epoch)...)
	lw := newRangeLW(k.lw, ri.r, k.filter)
	lw.onLive = func() {
		if ri.live.Add(1) == int32(len(ri.kinds)) {
			io.report(ri, &handover.RangeLive{Range: e.Range, Epoch: e.Epoch})
		}
	}
	if warm {
		io.seedFrom(lw, k, e)
		// The copy is a list: the informer lists then watches (a WatchList
		// stream would not take it).
		opts = append(opts, actors.WithWatchList(false))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	inf := actors.NewSharedIndexInformer(lw, k.example, k.o.resync, cloneIndexers(k.indexers), opts...)
	switch {
	case warm:
		_ = inf.SetTransform(lw.transform(k.transform))
	case k.transform != nil:
		_ = inf.SetTransform(k.transform)
	}
	if k.watchErrorHandler != nil {
		_ = inf.SetWatchErrorHandlerWithContext(k.watchErrorHandler)
	}
	kr := &kindRange{ri: ri, k: k, inf: inf, lw: lw, done: make(chan struct{}), attached: map[*registration]*attachment{}}
	// Until its activation, the range records the deletes its intake
	// takes: an activation gives tombstones for those after its position.
	lw.record()
	if p, ok := io.positions[k.kindKey][e.Range]; ok && e.From == "" {
		kr.resumeFrom = p
	}
	k.live[kr] = struct{}{}
	return kr
}

// runRange runs a started range's informers, and on its lane waits for
// them to sync, then tells the core, and whether their watches have sent
// something yet (their first events report RangeLive too: the core
// decides when to ask for the range).
func (io *memberIO) runRange(ri *rangeInformer) {
	for _, kr := range ri.kinds {
		io.run(nil, func() {
			defer func() {
				close(kr.done)
				if ri.running.Add(-1) == 0 {
					close(ri.done)
				}
			}()
			kr.inf.RunWithContext(ri.ctx)
			kr.k.retire(kr)
		})
	}
	io.run(&ri.switches, func() {
		live := true
		for _, kr := range ri.kinds {
			select {
			case <-kr.inf.HasSyncedChecker().Done():
			case <-kr.done:
				return
			}
			if v, err := strconv.ParseInt(kr.inf.LastSyncResourceVersion(), 10, 64); err == nil {
				kr.listed.Store(v)
			}
			if kr.resumeFrom.version > 0 {
				io.replay(ri.ctx, kr)
			}
			live = live && kr.lw.isLive()
		}
		io.report(ri, &handover.RangeSynced{Range: ri.r.Index, Epoch: ri.epoch, Live: live})
	})
}

// seedFrom makes lw's first list a copy of the range's cache at e.From
// (a warm start).
func (io *memberIO) seedFrom(lw *rangeLW, k *Informer, e *handover.StartRange) {
	inc := io.inc
	r := lw.rng
	from, addr := e.From, io.address(e.From)
	lw.seed = func(ctx context.Context) (copied, error) {
		cp, err := inc.fetchSnapshot(ctx, k, from, addr, r.Index, e.Epoch)
		if err == nil {
			inc.s.warm.starts.Add(1)
			inc.log.Info("range informer started from the previous deliverer's copy, without a list", "range", r.String(), "kind", k.kindKey, "from", string(from), "objects", len(cp.objs), "resourceVersion", cp.rv)
		}
		return cp, err
	}
	lw.fellBack = func(why string) { inc.fellBack(r, from, why) }
}

// liveWait bounds how long a synced range that another member delivers
// waits for its watch's first event before the core asks for it (in
// ticks: handover's Config.LiveTicks, rounded up).
const liveWait = 500 * time.Millisecond

// cloneIndexers copies ix into a new map (never nil).
func cloneIndexers(ix cache.Indexers) cache.Indexers {
	out := make(cache.Indexers, len(ix))
	maps.Copy(out, ix)
	return out
}

// appliedVersion is the resourceVersion a kind's cache of a range has
// applied.
func appliedVersion(kr *kindRange) int64 {
	if a, ok := kr.inf.GetIndexer().(interface{ AppliedResourceVersion() string }); ok {
		n, _ := strconv.ParseInt(a.AppliedResourceVersion(), 10, 64)
		return n
	}
	return 0
}

// waitFor waits until cond holds, the kind's informer of the range stops,
// the range is dropped, the core ends its drain (drainUp) or timeout passes
// (0: none); it reports whether cond held. It looks again as the kind's
// cache moves (indexer.Store.Changed) and as the range's handlers progress
// (ri.progress).
func waitFor(kr *kindRange, timeout time.Duration, cond func() bool) bool {
	ri := kr.ri
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		applied, given := cacheChanged(kr), ri.progress.Wait()
		if cond() {
			return true
		}
		select {
		case <-applied:
		case <-given:
		case <-kr.done:
			return false
		case <-ri.droppedCh:
			return false
		case <-ri.drainUp:
			return false
		case <-expired:
			return false
		}
	}
}

// cacheChanged returns a channel closed once the kind's cache of the range
// next moves (nil, which never closes, for a cache that cannot say).
func cacheChanged(kr *kindRange) <-chan struct{} {
	if c, ok := kr.inf.GetIndexer().(interface{ Changed() <-chan struct{} }); ok {
		return c.Changed()
	}
	return nil
}

// activate gives a claimed range to the handlers, each kind continuing
// from its newest position (resumeFrom): once each kind's informer has
// reached the previous delivery's newest version of it (targets, by
// kind), the kinds' intakes are paused while the handlers hear OnAcquire,
// then get OnDelete for the objects deleted since the position that the
// caches no longer have, then the caches; then changes flow again.
func (io *memberIO) activate(ri *rangeInformer, targets []int64) {
	s := io.inc.s
	ri.switching.Lock()
	defer ri.switching.Unlock()
	if ri.ended {
		return
	}
	begun := time.Now()
	missing, caught := io.catchUp(ri, targets)
	caughtUp := time.Since(begun)
	if !caught || !ri.startDelivering() {
		// A fence, or the member's stop, dropped the range meanwhile (its
		// lease is being released, another member may own the range), or
		// an informer stopped before it caught up.
		resumeAll(ri)
		s.tel.abortHandover(ri.span)
		io.inc.log.Info("the range was dropped during its activation; not delivering it", "range", ri.r.String(), "epoch", ri.epoch, "token", ri.token)
		return
	}
	s.publishAdd(ri)
	handTo(ri, missing)
	// A handler's listener takes its initial list when its subscription
	// reaches the range's indexer, after attach returns: the intake stays
	// paused until every one has, so that no change lands between the cache
	// the missing objects were judged against and the handlers' initial
	// lists (a delete landing there would reach neither). Only a drop, a
	// stop or the end of a release's drain ends the wait sooner: the range
	// is then being released or dropped, and is not reported activated.
	subscribed := true
	for _, kr := range ri.kinds {
		subscribed = subscribed && kr.k.waitSubscribed(kr)
	}
	resumeAll(ri)
	if !subscribed {
		s.tel.abortHandover(ri.span)
		io.inc.log.Info("the range was dropped or released during its activation", "range", ri.r.String(), "epoch", ri.epoch, "token", ri.token)
		return
	}
	gone := 0
	for _, m := range missing {
		gone += len(m)
	}
	io.acquired(ri, gone, caughtUp)
}

// catchUp waits until each kind's informer of the range has reached its
// target, then, for a kind that resumes from a position, pauses its intake
// and returns the objects deleted since (by kind); it is false if the
// range was dropped or an informer stopped first.
func (io *memberIO) catchUp(ri *rangeInformer, targets []int64) ([][]handover.ObjectRef, bool) {
	missing := make([][]handover.ObjectRef, len(ri.kinds))
	for i, kr := range ri.kinds {
		if targets[i] > 0 && !io.reach(kr, targets[i]) {
			return nil, false
		}
		if kr.resumeFrom.version > 0 {
			var ok bool
			if missing[i], ok = io.deletedSincePosition(kr); !ok {
				return nil, false
			}
		}
	}
	return missing, true
}

// handTo gives a range that delivers now to every handler of every kind:
// each hears OnAcquire before any kind's first call, then gets its kind's
// missing objects' OnDelete, then its informer's handler.
func handTo(ri *rangeInformer, missing [][]handover.ObjectRef) {
	regs := make([][]*registration, len(ri.kinds))
	for i, kr := range ri.kinds {
		k := kr.k
		k.mu.Lock()
		regs[i] = slices.Collect(maps.Keys(k.regs))
		k.reclaimed(kr.inf.GetIndexer())
		k.mu.Unlock()
	}
	acquired := make([][]bool, len(ri.kinds))
	for i, kr := range ri.kinds {
		for _, reg := range regs[i] {
			acquired[i] = append(acquired[i], kr.k.acquire(reg, ri))
		}
	}
	for i, kr := range ri.kinds {
		for j, reg := range regs[i] {
			kr.k.attach(reg, kr, missing[i], acquired[i][j])
		}
	}
}

// resumeAll resumes the intake of every kind of the range.
func resumeAll(ri *rangeInformer) {
	for _, kr := range ri.kinds {
		kr.lw.resume()
	}
}

// acquired records, counts and logs a range's activation, and reports it.
func (io *memberIO) acquired(ri *rangeInformer, gone int, caughtUp time.Duration) {
	s := io.inc.s
	now := time.Now()
	took, unserved, claim := now.Sub(ri.started), now.Sub(ri.unservedSince), ri.claimed.Sub(ri.unservedSince)
	s.recordHandover(Handover{Range: ri.r, From: string(ri.from), To: string(io.inc.id), Epoch: ri.epoch, Token: ri.token, Start: ri.started,
		Duration: took, Unserved: unserved, Claim: claim, CatchUp: caughtUp, Kind: "acquire", Deleted: gone})
	s.tel.endHandover(ri.span, "acquire", string(ri.from), took)
	s.tel.recordUnserved(unserved)
	objects := 0
	for _, kr := range ri.kinds {
		objects += cacheLen(kr.inf.GetIndexer())
		kr.lw.takeDeleted() // what its intake recorded for a resume
	}
	io.inc.log.Info("acquired range", "range", ri.r.String(), "from", string(ri.from), "epoch", ri.epoch, "token", ri.token,
		"took", took, "unserved", unserved, "objects", objects, "gone", gone,
		"claim", claim, "catch_up", caughtUp)
	ri.activated.Store(true)
	io.report(ri, nil)
}

// deletedSincePosition returns the objects of a kind of the range deleted
// since the position it resumes from, which the previous deliverer's
// handlers may have had, with the kind's intake paused (the caller resumes
// it), once the cache has applied what the intake took. It is false if the
// range was dropped, released or stopped first.
func (io *memberIO) deletedSincePosition(kr *kindRange) ([]handover.ObjectRef, bool) {
	if kr.resume == nil {
		io.replay(kr.ri.ctx, kr)
	}
	if kr.resume == nil {
		return nil, false // stopped meanwhile
	}
	kr.lw.pause()
	fwd, _ := kr.lw.versions()
	if !waitFor(kr, 0, func() bool { return appliedVersion(kr) >= fwd }) {
		return nil, false
	}
	kr.finals = map[string]any{}
	return missingSince(kr.resume, kr.lw.takeDeleted(), kr.resumeFrom.version, kr.inf.GetIndexer(), kr.finals), true
}

// replay finds the objects of a kind of a range that were deleted between
// the position it resumes from and its list.
func (io *memberIO) replay(ctx context.Context, kr *kindRange) {
	s := io.inc.s
	ri := kr.ri
	from := kr.resumeFrom
	var deleted map[string]runtime.Object
	var took time.Duration
	var err error
	to := kr.listed.Load()
	complete := to > 0
	if !complete {
		err = errors.New("the range's informer has no list version")
	} else if to > from.version {
		// At or before the position, the list has nothing to replay.
		begun := time.Now()
		deleted, complete, err = replay(ctx, kr.lw, from.version, to)
		took = time.Since(begun)
		if ctx.Err() != nil {
			return // stopped meanwhile
		}
	}
	kr.resume = &resumed{deleted: deleted}
	s.warm.resumes.Add(1)
	if !complete {
		s.warm.resumeGaps.Add(1)
		io.inc.log.Warn("the range's changes since its last delivered position could not all be replayed: a delete in between may reach no handler",
			"range", ri.r.String(), "position", from.version, "token", from.token, "list", to, "took", took, "err", err)
		return
	}
	io.inc.log.Info("the range resumes from its last delivered position", "range", ri.r.String(), "position", from.version,
		"token", from.token, "list", to, "deleted", len(deleted), "took", took)
}

// fromRecord resumes a kind of the range from its record's final position
// rec (as its claim found it) if that is the newest known, and returns the
// newest object version the record says its delivery's handlers were
// given (0 for none).
func (io *memberIO) fromRecord(kr *kindRange, rec rangeRecord) int64 {
	if rec.token == 0 {
		return 0
	}
	if p := rec.pos(); p.version > 0 && p.newer(kr.resumeFrom) {
		kr.resumeFrom, kr.resume = p, nil
	}
	return rec.version
}

// reach waits until a kind's informer of the range has reached version
// target, the newest object version the previous deliverer's handlers were
// given, so that no object's version goes back. It waits as long as that
// takes, with a warning each catch-up timeout. It is false if the range
// was dropped or the informer stopped first: nothing may be delivered
// then.
func (io *memberIO) reach(kr *kindRange, target int64) bool {
	begun := time.Now()
	for !waitFor(kr, io.inc.s.o.catchUp, func() bool { return appliedVersion(kr) >= target }) {
		if kr.stopped() {
			return false
		}
		io.inc.log.Warn("the range's informer has not reached the previous deliverer's version; still waiting, its handlers get nothing of the range until then",
			"range", kr.ri.r.String(), "version", target, "applied", appliedVersion(kr), "waited", time.Since(begun))
	}
	return true
}

// stopped reports whether the range was dropped or the kind's informer
// stopped.
func (kr *kindRange) stopped() bool { return closed(kr.done) || closed(kr.ri.droppedCh) }

// deactivate releases a range, draining: its kinds' intakes are paused,
// its handlers get what the informers had taken, then no further call;
// they hear OnRelease, the range's record takes the final position, the
// core hears RangeStopped, and the informers stop.
func (io *memberIO) deactivate(ri *rangeInformer, to handover.MemberID) {
	s := io.inc.s
	ri.switching.Lock()
	defer ri.switching.Unlock()
	ri.ended = true
	start := time.Now()
	span := s.tel.startHandover(io.inc.ctx, SpanRelease, ri.r, ri.epoch)
	fwds, objs := make([]int64, len(ri.kinds)), make([]int64, len(ri.kinds))
	for i, kr := range ri.kinds {
		kr.lw.pause()
		fwds[i], objs[i] = kr.lw.versions()
	}
	// Until the core ends the drain (DrainTimeUp, DefaultDrainTimeout after
	// the DeactivateRange). Each kind's condition stays true once it holds.
	drained := true
	for i, kr := range ri.kinds {
		drained = drained && waitFor(kr, 0, func() bool { return appliedVersion(kr) >= fwds[i] && kr.k.given(kr, objs[i]) })
	}
	if !drained && ri.delivering.Load() {
		io.inc.log.Warn("the range's handlers were not given everything before its release; the next owner may miss deletes",
			"range", ri.r.String(), "timeout", s.o.drainTimeout)
	}
	ri.stopDelivering()
	s.publishNow()
	rec, kinds := io.finalsOf(ri, drained, fwds, objs)
	detachAll(ri)
	// The range's record takes the final position, and no holder, before
	// the core hears of the release, so before any member can: whoever
	// takes the range next finds it there. Until that write lands, no
	// member takes the range from this one.
	stopped := &handover.RangeStopped{Range: ri.r.Index, Epoch: ri.epoch}
	var pending *pendingRelease
	if ri.activated.Load() {
		pending = &pendingRelease{rec: rec, kinds: kinds, to: to}
		stopped.Record, stopped.Unrecorded = io.writeRelease(ri.r.Index, pending)
	}
	objects := 0
	for _, kr := range ri.kinds {
		keys := kr.inf.GetIndexer().ListKeys()
		kr.k.rememberReleased(keys)
		objects += len(keys)
	}
	took := time.Since(start)
	s.recordHandover(Handover{Range: ri.r, From: string(io.inc.id), To: string(to), Epoch: ri.epoch, Token: ri.token, Start: start, Duration: took, Kind: "release"})
	s.tel.endHandover(span, "release", string(to), took)
	io.inc.log.Info("released range", "range", ri.r.String(), "to", string(to), "epoch", ri.epoch, "took", took, "objects", objects, "drained", drained)
	// The core hears of the release now, and the range's informer stops meanwhile:
	// its intake is paused and no handler is attached, so nothing of it
	// reaches a handler any more; waiting for its Run to return first
	// (its watch's end) would only keep the range unserved longer. The
	// I/O actor's stop waits for it (io.work).
	ri.cancel()
	io.inc.c.ActorSystem.Root.Send(io.inc.ioPID, &rangeDone{ri: ri, report: stopped, pending: pending})
}

// finalsOf is each kind's final position at a release, the record's part
// of it (New's kind's, the others'), also kept for the lease: what its
// handlers were last known to have been given, or, once drained, what its
// informer had been handed (fwds, and objs for the newest object version).
func (io *memberIO) finalsOf(ri *rangeInformer, drained bool, fwds, objs []int64) (rec rangeRecord, kinds kindFinals) {
	for i, kr := range ri.kinds {
		final, obj := kr.position.Load(), max(objs[i], 0)
		if drained && ri.activated.Load() {
			final = max(final, fwds[i])
		}
		kr.k.releasedAt(ri.r.Index, position{token: ri.token, version: final})
		if kr.k.kindKey == "" {
			rec = rangeRecord{token: ri.token, position: final, version: obj, by: io.inc.id}
			continue
		}
		if kinds == nil {
			kinds = kindFinals{}
		}
		kinds[kr.k.kindKey] = kindFinal{Position: final, Version: obj}
	}
	return rec, kinds
}

// pendingRelease is a release's record write: the final position, and the
// member it was for.
type pendingRelease struct {
	rec   rangeRecord
	kinds kindFinals
	to    handover.MemberID
}

// writeRelease writes range r's record at its release p, off the actor: the
// record written (nil when it names another member or none), and whether
// the write failed.
func (io *memberIO) writeRelease(r int, p *pendingRelease) (*handover.RecordState, bool) {
	rec, err := io.inc.leases.releaseRecord(io.inc.ctx, r, p.rec, p.kinds, io.inc.id, p.to)
	if err != nil {
		io.inc.s.warm.recordFailures.Add(1)
		io.inc.log.Warn("cannot write the range's record at its release; no member takes the range from this one until it is written (tried again each tick)",
			"range", r, "token", p.rec.token, "position", p.rec.position, "err", err)
		return nil, true
	}
	return rec, false
}

// recordAgain writes again a release whose write failed (kept by rangeDone).
func (io *memberIO) recordAgain(e *handover.ReleaseRecord) {
	p := io.unrecorded[e.Range]
	if p == nil {
		io.inc.log.Error("writing again a release this member did not keep (a bug of ours)", "range", e.Range, "epoch", e.Epoch)
		io.toCore(&handover.RangeStopped{Range: e.Range, Epoch: e.Epoch})
		return
	}
	io.run(nil, func() {
		stopped := &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch}
		stopped.Record, stopped.Unrecorded = io.writeRelease(e.Range, p)
		io.inc.c.ActorSystem.Root.Send(io.inc.ioPID, &rangeDone{report: stopped, pending: p})
	})
}

// publishNow republishes the delivered ranges from any goroutine: a range
// that stopped being delivered goes from the public methods at once.
func (s *Informer) publishNow() {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.storeDelivered(*s.delivered.Load())
}

// detachAll removes every handler of every kind from a range: no call
// starts after it returns, and the calls in flight have ended; then the
// ownership handlers hear OnRelease, after every kind's last call.
// Every handler that heard OnAcquire hears it, attached or not (an
// ownership handler's, or one whose attach the stop overtook).
func detachAll(ri *rangeInformer) {
	ri.stopDelivering()
	for _, kr := range ri.kinds {
		kr.detach()
	}
	for _, kr := range ri.kinds {
		kr.k.mu.Lock()
		regs := slices.Collect(maps.Keys(kr.k.regs))
		kr.k.mu.Unlock()
		for _, reg := range regs {
			reg.released(ri.r)
		}
	}
}

// detach removes every handler from a kind's informer of the range, and
// returns once their calls in flight have ended.
func (kr *kindRange) detach() {
	k := kr.k
	k.mu.Lock()
	var chans []<-chan struct{}
	for _, a := range kr.attached {
		_ = kr.inf.RemoveEventHandler(a.rreg)
		if sc, ok := a.rreg.(actors.Registration); ok {
			chans = append(chans, sc.ShutdownChan())
		}
	}
	clear(kr.attached)
	k.mu.Unlock()
	for _, ch := range chans {
		<-ch
	}
}

func (s *Informer) recordHandover(h Handover) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.handovers) >= maxHandovers {
		copy(s.handovers, s.handovers[1:])
		s.handovers = s.handovers[:maxHandovers-1]
	}
	s.handovers = append(s.handovers, h)
}

// tombstoneIn is what an OnDelete carries for an object deleted since the
// range's position that the new owner no longer has: its last state, which
// a range that resumed from a position knows (kr.finals), else
// tombstoneFor's.
func (s *Informer) tombstoneIn(kr *kindRange, o handover.ObjectRef) cache.DeletedFinalStateUnknown {
	if obj, ok := kr.finals[o.Key]; ok && obj != nil {
		if s.transform != nil {
			if t, err := s.transform(obj); err == nil {
				obj = t
			}
		}
		return cache.DeletedFinalStateUnknown{Key: o.Key, Obj: obj}
	}
	return s.tombstoneFor(o)
}

// tombstoneFor's Obj is an object of the informer's type with the key, UID
// and version the previous deliverer's handlers had.
func (s *Informer) tombstoneFor(o handover.ObjectRef) cache.DeletedFinalStateUnknown {
	var obj any
	if s.example != nil {
		if v, ok := reflect.New(reflect.TypeOf(s.example).Elem()).Interface().(runtime.Object); ok {
			if m, err := meta.Accessor(v); err == nil {
				ns, name, _ := cache.SplitMetaNamespaceKey(o.Key)
				m.SetNamespace(ns)
				m.SetName(name)
				m.SetUID(types.UID(o.UID))
				m.SetResourceVersion(o.Version)
				obj = v
			}
		}
	}
	return cache.DeletedFinalStateUnknown{Key: o.Key, Obj: obj}
}

// cacheLen is the number of objects in a range's cache, without listing
// them.
func cacheLen(ix cache.Indexer) int {
	if l, ok := ix.(actors.Store); ok {
		return l.Len()
	}
	return len(ix.ListKeys())
}
