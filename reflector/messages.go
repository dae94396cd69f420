package reflector

import (
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// The reflector actor sends *fifo.Replace and *fifo.Deltas to its queue and
// receives nothing from other actors. The messages below are its own: its
// list and watch goroutines and its backoff timer report with them. Each
// carries the actor instance it belongs to (a restarted actor ignores its
// predecessor's) and the Gen of the Machine request it answers.

// listDone reports the end of a list (all its pages).
type listDone struct {
	from *reflectorActor
	gen  uint64
	res  ListResult
}

// watchFailed reports that opening a watch failed.
type watchFailed struct {
	from *reflectorActor
	gen  uint64
	err  error
}

// watchEvents carries one batch of watch events: the first one the reader
// blocked for, then whatever was already waiting.
type watchEvents struct {
	from   *reflectorActor
	gen    uint64
	events []watch.Event
	// at is when the batch arrived; zero unless tracing.
	at time.Time
}

// watchEnded reports that a watch's result channel closed.
type watchEnded struct {
	from *reflectorActor
	gen  uint64
}

// backoffElapsed reports the end of a backoff wait.
type backoffElapsed struct {
	from *reflectorActor
	gen  uint64
}

// watchOpened reports that the watch call of a WatchList stream returned a
// watch.
type watchOpened struct {
	from *reflectorActor
	gen  uint64
}

// watchListCheck reports that a WatchList stream's bookmark check is due.
type watchListCheck struct {
	from *reflectorActor
	gen  uint64
}
