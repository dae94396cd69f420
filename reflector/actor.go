package reflector

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/codes"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/pager"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// reflectorActor is the shell around a Machine: it runs the blocking list
// and watch calls in goroutines that report back with messages, and carries
// out the Machine's Effects. Its Receive never blocks, except on Stopping,
// where it waits for the goroutines reading a watch (which never block on a
// send) to stop their watcher and end. A goroutine still inside a List or
// Watch call is not waited for, since the call may ignore its cancelled
// context (client-go's Run does not wait for a list either): it is
// abandoned, reports nothing when the call returns, and stops the watcher
// the call returned, if any.
type reflectorActor struct {
	r     *Reflector
	m     *Machine
	queue *actor.PID

	root      *actor.RootContext
	self      *actor.PID
	runCtx    context.Context
	cancelRun context.CancelFunc
	cancelOp  context.CancelFunc // the running list or watch
	timer     clock.Timer
	check     clock.Timer // the WatchList stream's next bookmark check
	stopped   bool

	// mu guards abandoned, which Stopping sets: from then on the goroutines
	// send nothing and none starts reading a watch.
	mu        sync.Mutex
	abandoned bool
	// reading counts the goroutines reading a watch; Stopping waits for
	// them, and so for their watcher's Stop.
	reading sync.WaitGroup
}

func (r *Reflector) newActor(queue *actor.PID) *reflectorActor {
	return &reflectorActor{r: r, m: newMachine(r), queue: queue}
}

func (a *reflectorActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *watchEvents:
		if msg.from == a {
			a.apply(ctx, a.m.WatchEvents(msg.gen, msg.events, msg.at))
		}
	case *watchEnded:
		if msg.from == a {
			a.apply(ctx, a.m.WatchEnded(msg.gen))
		}
	case *listDone:
		if msg.from == a {
			a.apply(ctx, a.m.ListDone(msg.gen, msg.res))
		}
	case *watchFailed:
		if msg.from == a {
			a.apply(ctx, a.m.WatchFailed(msg.gen, msg.err))
		}
	case *backoffElapsed:
		if msg.from == a {
			a.apply(ctx, a.m.BackoffElapsed(msg.gen))
		}
	case *watchOpened:
		if msg.from == a {
			a.apply(ctx, a.m.WatchOpened(msg.gen))
		}
	case *watchListCheck:
		if msg.from == a {
			a.apply(ctx, a.m.WatchListCheck(msg.gen))
		}
	case *actor.Started:
		a.root = ctx.ActorSystem().Root
		a.self = ctx.Self()
		parent := a.r.cfg.Context
		if parent == nil {
			parent = context.Background()
		}
		a.runCtx, a.cancelRun = context.WithCancel(parent)
		a.apply(ctx, a.m.Start())
	case *actor.Stopping, *actor.Restarting:
		a.shutdown()
	}
}

func (a *reflectorActor) apply(ctx actor.Context, e Effects) {
	if a.stopped {
		return
	}
	for _, msg := range e.Msgs {
		a.deliver(ctx, msg)
	}
	clear(e.Msgs) // see stage.Msg: the outbox would keep a list's Replace alive
	if e.StopWatch {
		a.stopOp()
	}
	if e.HandleError != nil {
		a.r.handleError(a.runCtx, e.HandleError)
	}
	if a.runCtx.Err() != nil {
		// The run is over and the actor about to stop: like client-go,
		// which checks its context before each list and watch, start
		// nothing more.
		a.stopOp()
		return
	}
	switch {
	case e.List != nil:
		a.stopOp()
		a.startList(*e.List)
	case e.Watch != nil:
		a.stopOp()
		a.startWatch(*e.Watch)
	case e.Wait != nil:
		a.startWait(*e.Wait)
	}
	if e.Check != nil {
		a.startCheck(*e.Check)
	}
}

// deliver sends one of the Machine's messages; it only ever addresses the
// queue, with Send.
func (a *reflectorActor) deliver(ctx actor.Context, msg stage.Msg) {
	if msg.To != stage.ToQueue || msg.Mode != stage.Send {
		a.r.tel.Logger.Error("reflector: undeliverable message", "to", msg.To.Kind, "mode", msg.Mode, "type", fmt.Sprintf("%T", msg.Body))
		return
	}
	ctx.Send(a.queue, msg.Body)
}

func (a *reflectorActor) stopOp() {
	if a.cancelOp != nil {
		a.cancelOp()
		a.cancelOp = nil
	}
}

func (a *reflectorActor) shutdown() {
	if a.stopped {
		return
	}
	a.stopped = true
	a.m.Stop()
	a.mu.Lock()
	a.abandoned = true
	a.mu.Unlock()
	a.stopOp()
	if a.cancelRun != nil {
		a.cancelRun()
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.check != nil {
		a.check.Stop()
	}
	a.reading.Wait()
}

// report sends msg to the actor unless it is stopping.
func (a *reflectorActor) report(msg any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.abandoned {
		a.root.Send(a.self, msg)
	}
}

// beginReading registers a goroutine about to read a watch, unless the
// actor is stopping; it tells whether it did.
func (a *reflectorActor) beginReading() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.abandoned {
		return false
	}
	a.reading.Add(1)
	return true
}

func (a *reflectorActor) startWait(req WaitRequest) {
	if a.timer != nil {
		a.timer.Stop()
	}
	root, self, msg := a.root, a.self, &backoffElapsed{from: a, gen: req.Gen}
	a.timer = a.r.clock.AfterFunc(req.Duration, func() { root.Send(self, msg) })
}

// startCheck arms the WatchList stream's next bookmark check; a check of
// an older stream is ignored by the Machine.
func (a *reflectorActor) startCheck(req WaitRequest) {
	if a.check != nil {
		a.check.Stop()
	}
	root, self, msg := a.root, a.self, &watchListCheck{from: a, gen: req.Gen}
	a.check = a.r.clock.AfterFunc(req.Duration, func() { root.Send(self, msg) })
}

func (a *reflectorActor) startList(req ListRequest) {
	ctx, cancel := context.WithCancel(a.runCtx)
	a.cancelOp = cancel
	go a.runList(ctx, req)
}

func (a *reflectorActor) startWatch(req WatchRequest) {
	ctx, cancel := context.WithCancel(a.runCtx)
	a.cancelOp = cancel
	go a.runWatch(ctx, req)
}

// runList lists all pages through tools/pager (which itself falls back to
// a full list when a continue token expires) and reports the result.
func (a *reflectorActor) runList(ctx context.Context, req ListRequest) {
	if ctx.Err() != nil {
		return
	}
	res := a.list(ctx, req)
	if ctx.Err() != nil {
		return // abandoned: nobody waits for it
	}
	a.report(&listDone{from: a, gen: req.Gen, res: res})
}

func (a *reflectorActor) list(ctx context.Context, req ListRequest) (res ListResult) {
	tel := a.r.tel
	defer func() {
		if p := recover(); p != nil {
			res = ListResult{Err: fmt.Errorf("panic in list: %v", p)}
			tel.Logger.Error("ListerWatcher panicked in list", "reflector", a.r.name, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	p := pager.New(a.r.lw.ListWithContext)
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
// then takes what is already waiting (up to MaxBatch) without blocking, and
// sends the batch to the actor as one message. Once reading, it stops the
// watcher before it ends, and the actor's Stopping waits for that.
func (a *reflectorActor) runWatch(ctx context.Context, req WatchRequest) {
	if ctx.Err() != nil {
		return
	}
	w, err := a.openWatch(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			a.report(&watchFailed{from: a, gen: req.Gen, err: err})
		}
		return
	}
	if !a.beginReading() {
		w.Stop() // the actor has stopped meanwhile
		return
	}
	defer a.reading.Done()
	defer w.Stop()
	if req.WatchList {
		// Before its events, in the same mailbox.
		a.root.Send(a.self, &watchOpened{from: a, gen: req.Gen})
	}
	ch := w.ResultChan()
	// The batch's receive time: for root spans, and the event age metric.
	tracing := a.r.tel.Tracing() || a.r.tel.Metrics.Enabled()
	maxBatch := a.r.maxBatch
	buf := make([]watch.Event, 0, 64)
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, ok = <-ch:
		}
		if !ok {
			a.root.Send(a.self, &watchEnded{from: a, gen: req.Gen})
			return
		}
		msg := &watchEvents{from: a, gen: req.Gen}
		if tracing {
			msg.at = time.Now()
		}
		buf = append(buf[:0], ev)
		open := true
	drain:
		for len(buf) < maxBatch {
			select {
			case ev, ok = <-ch:
				if !ok {
					open = false
					break drain
				}
				buf = append(buf, ev)
			default:
				break drain
			}
		}
		msg.events = slices.Clone(buf)
		clear(buf) // drop references to the objects
		a.root.Send(a.self, msg)
		if !open {
			a.root.Send(a.self, &watchEnded{from: a, gen: req.Gen})
			return
		}
	}
}

func (a *reflectorActor) openWatch(ctx context.Context, req WatchRequest) (w watch.Interface, err error) {
	defer func() {
		if p := recover(); p != nil {
			w, err = nil, fmt.Errorf("panic in watch: %v", p)
			a.r.tel.Logger.Error("ListerWatcher panicked in watch", "reflector", a.r.name, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	w, err = a.r.lw.WatchWithContext(ctx, req.Options)
	if err == nil && isNil(w) {
		err = errors.New("watch returned no watcher")
	}
	return w, err
}
