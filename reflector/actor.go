package reflector

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/codes"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/pager"

	"github.com/actorinformer/actorinformer/shell"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// Props returns the props of the reflector actor: a Machine's shell
// (package shell), which sends to queue (cfg.Queue when queue is nil). The
// actor starts listing when started and stops every goroutine and timer of
// its own when stopped. A restarted actor carries on over the same Machine:
// it lists again, from the last synced resource version. The queue and the
// indexer run on the goroutine that wakes them (shell.Config.RunOnSender),
// so a pass of the reflector holds theirs: it grows its stack as it begins
// (shell.Config.GrowStack).
func (r *Reflector) Props(queue *actor.PID) *actor.Props {
	if queue == nil {
		queue = r.cfg.Queue
	}
	if queue == nil {
		panic("reflector: no queue PID")
	}
	peers := &shell.Peers{}
	peers.Set(stage.ToQueue, queue)
	direct := &shell.Direct{}
	return shell.Props(shell.Config[Input]{
		Stage:     stage.Reflector,
		Core:      r.NewMachine(),
		Lifecycle: func(l stage.Lifecycle) Input { return Lifecycle(l) },
		Peers:     peers,
		Clock:     r.clock,
		Telemetry: r.tel,
		Env:       func(ctx actor.Context) shell.Env { return r.newSource(ctx, direct) },
		GrowStack: true,
		Direct:    direct,
	})
}

// source performs the Machine's effects for one incarnation of the actor:
// it runs the blocking list and watch calls in goroutines that report back
// with messages, calls the watch error handler and publishes the status.
// Stop (the actor stopping or restarting) cancels the calls and waits for
// the goroutines reading a watch (which never block on a send) to stop
// their watcher and end. It waits up to callGrace for a goroutine still
// inside a List or Watch call: a call that honours its cancelled context
// returns in that time, and nothing of the informer calls its source once
// Run has returned. A call that ignores it is abandoned after callGrace:
// it reports nothing when it returns, and stops the watcher it returned,
// if any.
type source struct {
	r         *Reflector
	root      *actor.RootContext
	self      *actor.PID
	runCtx    context.Context
	cancelRun context.CancelFunc
	cancelOp  context.CancelFunc // the running list or watch
	direct    *shell.Direct      // the actor's mailbox, for the watch reader

	// mu guards abandoned, which Stop sets: from then on the goroutines
	// send nothing and none starts reading a watch.
	mu        sync.Mutex
	abandoned bool
	// reading counts the goroutines reading a watch; Stop waits for them,
	// and so for their watcher's Stop.
	reading sync.WaitGroup
	// calls counts the goroutines inside a List or Watch call; Stop waits
	// for them up to callGrace.
	calls sync.WaitGroup
}

// callGrace bounds how long stopping the actor waits for a List or Watch
// call to return after its context is cancelled: far below protoactor's
// 10 s timeout for stopping an actor.
const callGrace = time.Second

func (r *Reflector) newSource(ctx actor.Context, direct *shell.Direct) *source {
	parent := r.cfg.Context
	if parent == nil {
		parent = context.Background()
	}
	s := &source{r: r, root: ctx.ActorSystem().Root, self: ctx.Self(), direct: direct}
	s.runCtx, s.cancelRun = context.WithCancel(parent)
	return s
}

// Perform implements shell.Env.
func (s *source) Perform(_ actor.Context, m stage.Msg) bool {
	switch b := m.Body.(type) {
	case *StopWatch:
		s.stopOp()
	case *ListRequest:
		s.startList(*b)
	case *WatchRequest:
		s.startWatch(*b)
	case *WatchError:
		s.r.handleError(s.runCtx, b.Err)
	case *Status:
		s.r.setStatus(*b)
	default:
		return false
	}
	return true
}

func (s *source) stopOp() {
	if s.cancelOp != nil {
		s.cancelOp()
		s.cancelOp = nil
	}
}

// Stop implements shell.Stopper.
func (s *source) Stop() {
	s.mu.Lock()
	s.abandoned = true
	s.mu.Unlock()
	s.stopOp()
	s.cancelRun()
	s.reading.Wait()
	calls := make(chan struct{})
	go func() { s.calls.Wait(); close(calls) }()
	t := time.NewTimer(callGrace)
	defer t.Stop()
	select {
	case <-calls:
	case <-t.C:
	}
}

// report sends msg to the actor unless it is stopping.
func (s *source) report(msg any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.abandoned {
		s.root.Send(s.self, msg)
	}
}

// begin adds a goroutine to wg (calls: about to make a List or Watch
// call; reading: about to read a watch), unless the actor is stopping; it
// tells whether it did.
func (s *source) begin(wg *sync.WaitGroup) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abandoned {
		return false
	}
	wg.Add(1)
	return true
}

// startList and startWatch start nothing once the run is over (the actor
// is about to stop), as client-go checks its context before each list and
// watch.
func (s *source) startList(req ListRequest) {
	if s.runCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	s.cancelOp = cancel
	go s.runList(ctx, req)
}

func (s *source) startWatch(req WatchRequest) {
	if s.runCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	s.cancelOp = cancel
	go s.runWatch(ctx, req)
}

// runList lists all pages through tools/pager (which itself falls back to
// a full list when a continue token expires) and reports the result.
func (s *source) runList(ctx context.Context, req ListRequest) {
	if ctx.Err() != nil || !s.begin(&s.calls) {
		return
	}
	res := s.list(ctx, req)
	s.calls.Done()
	if ctx.Err() != nil {
		return // abandoned: nobody waits for it
	}
	s.report(&ListDone{Gen: req.Gen, Result: res})
}

func (s *source) list(ctx context.Context, req ListRequest) (res ListResult) {
	tel := s.r.tel
	defer func() {
		if p := recover(); p != nil {
			res = ListResult{Err: fmt.Errorf("panic in list: %v", p)}
			tel.Logger.Error("ListerWatcher panicked in list", "reflector", s.r.name, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	p := pager.New(s.r.lw.ListWithContext)
	p.PageSize = req.PageSize
	if !tel.Tracing() {
		res.List, res.Paginated, res.Err = p.ListWithAlloc(ctx, req.Options)
		if tel.Metrics.Enabled() {
			res.ReceivedAt = time.Now() // the items' event age starts here
		}
		return res
	}
	lctx, span := tel.StartList(ctx, req.Options.ResourceVersion)
	res.List, res.Paginated, res.Err = p.ListWithAlloc(lctx, req.Options)
	res.ReceivedAt = time.Now()
	if res.Err != nil {
		span.RecordError(res.Err)
		span.SetStatus(codes.Error, res.Err.Error())
	} else if !isNil(res.List) {
		span.SetAttributes(telemetry.AttrListItems.Int(meta.LenList(res.List)))
	}
	res.Span = span.SpanContext()
	span.End()
	return res
}

// runWatch opens a watch and reads it in batches: it blocks for one event,
// then takes what is already waiting (up to MaxBatch) without blocking.
// The actor holds at most one batch at a time: while it does, the reader
// goes on filling the next one (up to MaxBatch events, then it waits),
// which it sends when the actor gives the previous one back (see
// WatchEvents). Once reading, it stops the watcher before it ends, and the
// actor's Stop waits for that.
func (s *source) runWatch(ctx context.Context, req WatchRequest) {
	if ctx.Err() != nil || !s.begin(&s.calls) {
		return
	}
	w, err := s.openWatch(ctx, req)
	s.calls.Done()
	if err != nil {
		if ctx.Err() == nil {
			s.report(&WatchFailed{Gen: req.Gen, Err: err})
		}
		return
	}
	if !s.begin(&s.reading) {
		w.Stop() // the actor has stopped meanwhile
		return
	}
	defer s.reading.Done()
	defer w.Stop()
	if req.WatchList {
		// Before its events, in the same mailbox.
		s.root.Send(s.self, &WatchOpened{Gen: req.Gen})
	}
	r := watchReader{ch: w.ResultChan(), max: s.r.maxBatch, stamp: s.r.tel.Tracing() || s.r.tel.Metrics.Enabled()}
	back := make(chan *WatchEvents, 1)
	// spare is the batch the actor gave back: while it is nil, the actor
	// holds a batch.
	cur, spare := newWatchEvents(req.Gen, back), newWatchEvents(req.Gen, back)
	for {
		if len(cur.Events) > 0 && spare != nil {
			if s.direct == nil || !s.direct.Post(cur, r.slow(time.Now(), len(cur.Events))) {
				s.root.Send(s.self, cur)
			}
			cur, spare = spare, nil
			continue
		}
		in := r.ch
		if len(cur.Events) >= r.max {
			in = nil // full: wait for the actor
		}
		var returned <-chan *WatchEvents
		if spare == nil {
			returned = back
		}
		select {
		case <-ctx.Done():
			return
		case spare = <-returned:
		case ev, ok := <-in:
			if ok {
				ok = r.take(cur, ev)
			}
			if !ok {
				if len(cur.Events) > 0 {
					s.root.Send(s.self, cur)
				}
				s.root.Send(s.self, &WatchEnded{Gen: req.Gen})
				return
			}
		}
	}
}

// watchReader is how runWatch reads its watch's result channel.
type watchReader struct {
	ch    <-chan watch.Event
	max   int  // events per batch
	stamp bool // set WatchEvents.At
	// window began at the start of the current millisecond's count of
	// events, n; fast is whether the one before had more than slowEvents.
	window time.Time
	n      int
	fast   bool
}

// slowEvents is how many events a millisecond may bring for the reader
// to run the actor's passes itself (Direct): one every 15 µs or more,
// about three times as long as a pass of one event takes to reach the
// handlers. Faster, a pass run by the reader would hold it from reading
// what comes in meanwhile, and the next batch would be smaller: the
// actor then runs on a goroutine of its own, and the reader fills the
// next batch as the actor takes one.
const slowEvents = 64

// slow counts a batch of n events about to go to the actor at now, and
// reports whether the events come slowly enough for the reader to run its
// pass.
func (r *watchReader) slow(now time.Time, n int) bool {
	if now.Sub(r.window) >= time.Millisecond {
		r.fast, r.window, r.n = r.n > slowEvents, now, 0
	}
	r.n += n
	return !r.fast && r.n <= slowEvents
}

// take appends ev to b, then what is already waiting, without blocking,
// up to r.max events; false once the channel is closed.
func (r *watchReader) take(b *WatchEvents, ev watch.Event) bool {
	if len(b.Events) == 0 && r.stamp {
		b.At = time.Now()
	}
	b.Events = append(b.Events, ev)
	for len(b.Events) < r.max {
		select {
		case ev, ok := <-r.ch:
			if !ok {
				return false
			}
			b.Events = append(b.Events, ev)
		default:
			return true
		}
	}
	return true
}

func (s *source) openWatch(ctx context.Context, req WatchRequest) (w watch.Interface, err error) {
	defer func() {
		if p := recover(); p != nil {
			w, err = nil, fmt.Errorf("panic in watch: %v", p)
			s.r.tel.Logger.Error("ListerWatcher panicked in watch", "reflector", s.r.name, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	w, err = s.r.lw.WatchWithContext(ctx, req.Options)
	if err == nil && isNil(w) {
		err = errors.New("watch returned no watcher")
	}
	return w, err
}
