package reflector

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// expectCheck returns the bookmark check e asks for, which must be due
// after d.
func (h *harness) expectCheck(e Effects, d time.Duration) *WaitRequest {
	h.t.Helper()
	if e.Check == nil {
		h.t.Fatalf("expected a bookmark check after %v, got %s", d, describe(e))
	}
	if e.Check.Duration != d {
		h.t.Fatalf("bookmark check after %v, want %v", e.Check.Duration, d)
	}
	return e.Check
}

func (h *harness) expectAwaiting(want bool) {
	h.t.Helper()
	st := h.r.Status()
	if st.AwaitingInitialEventsEnd != want || st.AwaitingSince.IsZero() == want {
		h.t.Fatalf("status %+v, want AwaitingInitialEventsEnd %v", st, want)
	}
	if got := h.tel.Metrics.WatchListWaiting(); got != want {
		h.t.Fatalf("waiting gauge's value %v, want %v", got, want)
	}
}

// A source that takes the WatchList request as a plain watch (client-go's
// fake clientset behind a plain ListWatch) sends its objects as Added events
// and never the bookmark: 10 s after the last of them the reflector gives up
// and lists, and uses no WatchList any more.
func TestMachineWatchListWithoutBookmarkFallsBack(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	h.expectAwaiting(true)
	h.clk.Step(2 * time.Second) // the watch call took 2 s: not counted
	c := h.expectCheck(h.m.WatchOpened(w.Gen), WatchListGiveUpAfter)
	h.clk.Step(100 * time.Millisecond)
	e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "1")), ev(watch.Added, pod("b", "2"))}, time.Time{})
	if e.replace() != nil || e.Check != nil {
		t.Fatalf("events: %s", describe(e))
	}

	// At 10 s from the open: a warning, and the next check when the 10 s
	// from the last event are over.
	h.clk.Step(WatchListGiveUpAfter - 100*time.Millisecond)
	c = h.expectCheck(h.m.WatchListCheck(c.Gen), 100*time.Millisecond)
	if n := strings.Count(h.logs.String(), "hasn't received the required bookmark"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, h.logs.String())
	}
	h.expectAwaiting(true)

	h.clk.Step(100 * time.Millisecond)
	e = h.m.WatchListCheck(c.Gen)
	if !e.StopWatch || e.Check != nil {
		t.Fatalf("give up: %s", describe(e))
	}
	l := h.expectList(e, "0", 500)
	h.expectAwaiting(false)
	logs := h.logs.String()
	for _, want := range []string{"informer=pods", "k8s.io/initial-events-end", "WatchList is off", "events=2", "ToListWatcherWithWatchListSemantics"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if n := h.counters().WatchErrors.Load(); n != 1 {
		t.Errorf("watch errors %d, want 1", n)
	}
	if h.r.Status().UseWatchList {
		t.Error("Status().UseWatchList still true")
	}

	// The list syncs, then a plain watch; later syncs list too, and so does
	// a restarted actor's Machine.
	w = h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("2", pod("a", "1"), pod("b", "2"))}), "2")
	if h.r.LastSyncUsedWatchList() {
		t.Error("LastSyncUsedWatchList after the list")
	}
	h.clk.Step(time.Minute)
	e = h.m.WatchEvents(w.Gen, []watch.Event{errEvent(apierrors.NewResourceExpired("too old"))}, time.Time{})
	h.expectList(h.m.BackoffElapsed(h.expectWait(e, -1).Gen), "2", 0)
	restarted := newMachine(h.r)
	h.expectList(restarted.Start(), "2", 0)
}

// A stream with no event at all (an empty fake) gives up 10 s after it
// opened.
func TestMachineWatchListSilentStreamFallsBack(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	// Before the watch opens, a check (which the shell never asks for
	// then) decides nothing.
	if e := h.m.WatchListCheck(w.Gen); e.Check != nil || e.List != nil {
		t.Fatalf("check before the open: %s", describe(e))
	}
	c := h.expectCheck(h.m.WatchOpened(w.Gen), WatchListGiveUpAfter)
	h.clk.Step(WatchListGiveUpAfter)
	h.expectList(h.m.WatchListCheck(c.Gen), "0", 500)
}

// A stream that goes on with Added events is a list still streaming: it
// waits, warning every 10 s; an event that is not Added shows the initial
// events are over, and 10 s after it, without the bookmark, it gives up.
func TestMachineWatchListGivesUpAfterTheInitialEvents(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	c := h.expectCheck(h.m.WatchOpened(w.Gen), WatchListGiveUpAfter)
	for i := range 6 { // 30 s of Added events, one every 5 s
		h.clk.Step(5 * time.Second)
		h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod(string(rune('a'+i)), "1"))}, time.Time{})
		if i%2 == 1 {
			c = h.expectCheck(h.m.WatchListCheck(c.Gen), WatchListWarnEvery)
		}
	}
	if n := strings.Count(h.logs.String(), "the informer cannot sync before it"); n != 3 {
		t.Fatalf("%d warnings in 30 s, want 3:\n%s", n, h.logs.String())
	}
	// A Modified event 1 s later; Added events go on.
	h.clk.Step(time.Second)
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Modified, pod("a", "2"))}, time.Time{})
	h.clk.Step(4 * time.Second)
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("z", "3"))}, time.Time{})
	h.clk.Step(5 * time.Second)
	c = h.expectCheck(h.m.WatchListCheck(c.Gen), time.Second)
	h.clk.Step(time.Second)
	h.expectList(h.m.WatchListCheck(c.Gen), "0", 500)
}

// A slow server's bookmark after the warning ends the wait: the stream
// syncs and the check armed before is ignored.
func TestMachineWatchListBookmarkAfterWarning(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	c := h.expectCheck(h.m.WatchOpened(w.Gen), WatchListGiveUpAfter)
	h.clk.Step(time.Second)
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "1"))}, time.Time{})
	h.clk.Step(9 * time.Second)
	c = h.expectCheck(h.m.WatchListCheck(c.Gen), time.Second)
	e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Bookmark, bookmark("1", true))}, time.Time{})
	if e.replace() == nil {
		t.Fatalf("no Replace: %s", describe(e))
	}
	h.expectAwaiting(false)
	h.clk.Step(time.Minute)
	if e := h.m.WatchListCheck(c.Gen); e.List != nil || e.StopWatch || e.Check != nil {
		t.Fatalf("a check after the bookmark acted: %s", describe(e))
	}
	if !h.r.Status().UseWatchList || !h.r.LastSyncUsedWatchList() {
		t.Fatalf("status %+v", h.r.Status())
	}
}

// The wait ends with the stream however it ends: an error that falls back
// to a list, a backoff, a stop.
func TestMachineWatchListWaitEnds(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	h.m.WatchOpened(w.Gen)
	h.expectAwaiting(true)
	h.expectList(h.m.WatchFailed(w.Gen, errors.New("boom")), "0", 500)
	h.expectAwaiting(false)

	h = newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w = h.expectWatchList(h.m.Start(), "")
	h.expectAwaiting(true)
	h.m.Stop()
	h.expectAwaiting(false)
}
