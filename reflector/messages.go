package reflector

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/actorinformer/actorinformer/stage"
)

// The reflector sends *fifo.Replace and *fifo.Deltas to its queue. The
// Machine's other messages are effects, which its shell performs:
//
//   - to stage.ToSource, the API server: *ListRequest, *WatchRequest and
//     *StopWatch; the shell runs the blocking calls in goroutines that
//     report back to the reflector with *ListDone, *WatchFailed,
//     *WatchOpened, *WatchEvents and *WatchEnded;
//   - to its timers: stage.TimerOf(stage.Reflector, 0), the backoff, which
//     fires *BackoffElapsed, and stage.TimerOf(stage.Reflector, 1), the
//     WatchList stream's bookmark checks, which fire *WatchListCheck;
//   - to stage.ToInformer: *WatchError (for the watch error handler) and
//     *Status (what the reflector has synced, for the Reflector handle).
//
// Each report carries the Gen of the request it answers: the Machine
// ignores a report of an older one.

// Input is what the reflector's Machine takes, in Step: the reports of its
// shell's calls (*ListDone, *WatchFailed, *WatchOpened, *WatchEvents,
// *WatchEnded), its timers' *BackoffElapsed and *WatchListCheck, and its
// actor's Lifecycle. It is sealed: no other package's type is one.
type Input interface{ reflectorInput() }

// Lifecycle tells the Machine of an event of its actor's life (see
// stage.Lifecycle).
type Lifecycle stage.Lifecycle

func (*ListDone) reflectorInput()       {}
func (*WatchFailed) reflectorInput()    {}
func (*WatchOpened) reflectorInput()    {}
func (*WatchEvents) reflectorInput()    {}
func (*WatchEnded) reflectorInput()     {}
func (*BackoffElapsed) reflectorInput() {}
func (*WatchListCheck) reflectorInput() {}
func (Lifecycle) reflectorInput()       {}

// ListRequest asks the shell to list through tools/pager.
type ListRequest struct {
	Gen     uint64
	Options metav1.ListOptions
	// PageSize is the pager's page size; 0 lists in one request.
	PageSize int64
}

// WatchRequest asks the shell to open a watch and stream its events back.
type WatchRequest struct {
	Gen     uint64
	Options metav1.ListOptions
	// WatchList marks the initial-events stream of a WatchList sync.
	WatchList bool
}

// StopWatch asks the shell to stop the running list or watch: its calls
// are cancelled, and a watch being read is stopped.
type StopWatch struct{}

// WatchError is an error that ended a ListAndWatch, for the watch error
// handler (Config.WatchErrorHandler).
type WatchError struct{ Err error }

// ListDone reports the end of a list (all its pages).
type ListDone struct {
	Gen    uint64
	Result ListResult
}

// WatchFailed reports that opening a watch failed.
type WatchFailed struct {
	Gen uint64
	Err error
}

// WatchOpened reports that the watch call of a WatchList stream returned
// a watch; it comes before the watch's events.
type WatchOpened struct{ Gen uint64 }

// WatchEvents carries one batch of watch events: those the watch reader
// took while the Machine held the previous batch, or the first one it
// blocked for and whatever was already waiting. The Machine does not keep
// Events. The reader has two WatchEvents, and the Machine's Step gives
// each back once it has taken its events: a busy watch sends one message
// per batch the Machine can take, not one per handful of events.
type WatchEvents struct {
	Gen    uint64
	Events []watch.Event
	// At is when the batch's first event arrived; zero unless tracing or
	// metrics are on.
	At time.Time
	// back is where the reader takes it back (see recycle); nil for a
	// WatchEvents of another sender.
	back chan<- *WatchEvents
}

// newWatchEvents returns an empty WatchEvents of a reader of the watch
// gen, which recycle gives back on back.
func newWatchEvents(gen uint64, back chan<- *WatchEvents) *WatchEvents {
	return &WatchEvents{Gen: gen, back: back}
}

// recycle gives w back to its reader, without the objects its events
// reference, if it came from one. It never blocks: a reader that has
// stopped takes nothing back.
func (w *WatchEvents) recycle() {
	if w.back == nil {
		return
	}
	clear(w.Events)
	w.Events, w.At = w.Events[:0], time.Time{}
	select {
	case w.back <- w:
	default:
	}
}

// WatchEnded reports that a watch's result channel closed.
type WatchEnded struct{ Gen uint64 }

// BackoffElapsed is the backoff timer's: the wait is over.
type BackoffElapsed struct{ Gen uint64 }

// WatchListCheck is the check timer's: a WatchList stream still without
// its initial-events-end bookmark is checked (see watchlistwait.go).
type WatchListCheck struct{ Gen uint64 }
