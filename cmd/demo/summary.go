package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/actorinformer/actorinformer/actors"
)

// summary prints the informer's counters: a line per interval with the
// rates since the previous line, and totals at the end. It is used by one
// goroutine.
type summary struct {
	w        io.Writer
	p        pipeline
	handlers []*demoHandler // for their names
	start    time.Time
	prevAt   time.Time
	prev     actors.Stats
	prevRec  int64         // the controller's reconciles at prevAt
	side     *clientGoSide // --compare: client-go's line under ours; nil: none
	fleet    *fleet        // a sharded group: a line of its members; nil: none
}

func newSummary(w io.Writer, p pipeline, hs []*demoHandler, now time.Time) *summary {
	s := &summary{w: w, p: p, handlers: hs, start: now}
	s.remember(now, p.Stats())
	return s
}

func (s *summary) remember(now time.Time, st actors.Stats) {
	s.prevAt, s.prev = now, st
	if c, ok := s.p.controllerStats(); ok {
		s.prevRec = c.reconciles
	}
}

// line prints the rates since the last line, e.g.
//
//	[   3.1s] reflector   201/s | queue in   201/s out   201/s | indexer   201/s | cache    993 | controller   201/s | slow   150/s (backlog 312) | panic   201/s (4 panics) | workqueue depth 0, reconciles   198/s
func (s *summary) line(now time.Time) {
	st := s.p.Stats()
	hs := st.Handlers
	dt := now.Sub(s.prevAt).Seconds()
	rate := func(cur, prev int64) string {
		if dt <= 0 {
			return "    -/s"
		}
		return fmt.Sprintf("%5.0f/s", float64(cur-prev)/dt)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%6.1fs] reflector %s | queue in %s out %s", now.Sub(s.start).Seconds(),
		rate(st.ReflectorEvents, s.prev.ReflectorEvents), rate(st.QueueIn, s.prev.QueueIn), rate(st.QueueOut, s.prev.QueueOut))
	if st.QueueBacklog > 0 {
		fmt.Fprintf(&b, " (backlog %d)", st.QueueBacklog)
	}
	fmt.Fprintf(&b, " | indexer %s | cache %6d", rate(st.IndexerEvents, s.prev.IndexerEvents), st.CacheSize)
	for i, h := range hs {
		var prev int64
		if i < len(s.prev.Handlers) {
			prev = s.prev.Handlers[i].Delivered
		}
		fmt.Fprintf(&b, " | %s %s", h.Name, rate(h.Delivered, prev))
		writeHandlerTrouble(&b, h)
	}
	if c, ok := s.p.controllerStats(); ok {
		fmt.Fprintf(&b, " | workqueue depth %d, reconciles %s", c.depth, rate(c.reconciles, s.prevRec))
	}
	trouble := st
	if s.fleet != nil {
		// A group's range informers list and watch as ranges come: these
		// are not relists nor watch restarts.
		trouble.Relists, trouble.WatchRestarts = s.prev.Relists, s.prev.WatchRestarts
	}
	writeReflectorTrouble(&b, trouble, s.prev)
	fmt.Fprintln(s.w, b.String())
	if s.side != nil {
		s.side.writeLine(s.w, now)
	}
	if s.fleet != nil {
		s.fleet.writeLine(s.w, now)
	}
	s.remember(now, st)
}

func writeHandlerTrouble(b *strings.Builder, h actors.HandlerStats) {
	switch {
	case h.Backlog > 0 && h.Panics > 0:
		fmt.Fprintf(b, " (backlog %d, %d panics)", h.Backlog, h.Panics)
	case h.Backlog > 0:
		fmt.Fprintf(b, " (backlog %d)", h.Backlog)
	case h.Panics > 0:
		fmt.Fprintf(b, " (%d panics)", h.Panics)
	}
}

// writeReflectorTrouble notes relists and watch restarts past the first
// list and watch, watch errors and dropped objects.
func writeReflectorTrouble(b *strings.Builder, st, prev actors.Stats) {
	if n := st.Relists - prev.Relists; n > 0 && prev.Relists > 0 {
		fmt.Fprintf(b, " | relists +%d", n)
	}
	if n := st.WatchRestarts - prev.WatchRestarts; n > 0 && prev.WatchRestarts > 0 {
		fmt.Fprintf(b, " | watch restarts +%d", n)
	}
	if st.WatchErrors > 0 {
		fmt.Fprintf(b, " | watch errors %d", st.WatchErrors)
	}
	if st.Dropped > 0 {
		fmt.Fprintf(b, " | dropped %d", st.Dropped)
	}
}

// final prints the totals of the run, which ended at end; the informer
// took shutdown to stop.
func (s *summary) final(end time.Time, shutdown time.Duration) {
	st := s.p.Stats()
	fmt.Fprintf(s.w, "\ntotals after %.1fs (shutdown %s): reflector %d, queue in %d out %d, indexer %d, cache %d objects, lists %d, watches %d, watch errors %d, dropped %d\n",
		end.Sub(s.start).Seconds(), fmtDuration(shutdown), st.ReflectorEvents, st.QueueIn, st.QueueOut, st.IndexerEvents, st.CacheSize,
		st.Relists, st.WatchRestarts, st.WatchErrors, st.Dropped)
	width := len("handler")
	for _, h := range s.handlers {
		width = max(width, len(h.label))
	}
	fmt.Fprintf(s.w, "  %-*s %10s %12s %7s\n", width, "handler", "delivered", "undelivered", "panics")
	for _, h := range st.Handlers {
		fmt.Fprintf(s.w, "  %-*s %10d %12d %7d\n", width, h.Name, h.Delivered, h.Backlog, h.Panics)
	}
	if c, ok := s.p.controllerStats(); ok {
		fmt.Fprintf(s.w, "controller: %d reconciles by %d worker(s): %d found the pod in the cache, %d found it deleted\n",
			c.reconciles, c.workers, c.found, c.reconciles-c.found)
	}
}
