package reflector

import (
	"fmt"

	"github.com/actorinformer/actorinformer/stage"
)

// The reflector's timers.
var (
	backoffTimer = stage.TimerOf(stage.Reflector, 0)
	checkTimer   = stage.TimerOf(stage.Reflector, 1)
)

// Step is the Machine's one input (see package stage): it takes one
// message (a report of the shell, a timer's, the actor's lifecycle) and
// returns what must be sent because of it, valid until the next Step: the
// *fifo.Replace and *fifo.Deltas for the queue, then the effects (see
// messages.go), in order. *stage.Started begins a ListAndWatch;
// *stage.Restarting stops everything, and the Started after it begins
// again from the last synced resource version; *stage.Stopping stops for
// good.
func (m *Machine) Step(msg any) []stage.Msg {
	m.out.Reset()
	var e effects
	switch x := msg.(type) {
	case *WatchEvents:
		e = m.onWatchEvents(x.Gen, x.Events, x.At)
	case *ListDone:
		e = m.onListDone(x.Gen, x.Result)
	case *WatchEnded:
		e = m.onWatchEnded(x.Gen)
	case *WatchFailed:
		e = m.onWatchFailed(x.Gen, x.Err)
	case *WatchOpened:
		e = m.onWatchOpened(x.Gen)
	case *WatchListCheck:
		e = m.onWatchListCheck(x.Gen)
	case *BackoffElapsed:
		e = m.onBackoffElapsed(x.Gen)
	case *stage.Started:
		e = m.start()
	case *stage.Restarting:
		e = m.stop()
		m.state = StateIdle // the Started after it begins again
		m.restartReason = ""
	case *stage.Stopping:
		e = m.stop()
	default:
		m.log.Warn("reflector: unexpected message", "reflector", m.name, "type", fmt.Sprintf("%T", x))
	}
	return m.emit(e)
}

var stopWatch = &StopWatch{}

// emit sends an input's effects after its messages for the queue, in
// order, then the status if the input changed it.
func (m *Machine) emit(e effects) []stage.Msg {
	if e.StopWatch || e.List != nil || e.Watch != nil {
		m.out.Send(stage.ToSource, stopWatch)
	}
	if e.HandleError != nil {
		m.out.Send(stage.ToInformer, &WatchError{Err: e.HandleError})
	}
	switch {
	case e.List != nil:
		m.out.Send(stage.ToSource, e.List)
	case e.Watch != nil:
		m.out.Send(stage.ToSource, e.Watch)
	case e.Wait != nil:
		m.out.Send(backoffTimer, &stage.SetTimer{After: e.Wait.Duration, Fire: &BackoffElapsed{Gen: e.Wait.Gen}})
	}
	if e.Check != nil {
		m.out.Send(checkTimer, &stage.SetTimer{After: e.Check.Duration, Fire: &WatchListCheck{Gen: e.Check.Gen}})
	}
	if m.dirty {
		m.dirty = false
		m.out.Send(stage.ToInformer, &m.status)
	}
	return m.out.Msgs()
}
