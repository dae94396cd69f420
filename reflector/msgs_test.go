package reflector

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/actorinformer/actorinformer/stage"
)

// msgsString renders a step's messages as "to/mode/type" for comparisons.
func msgsString(msgs []stage.Msg) string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = fmt.Sprintf("%v/%v/%T", m.To.Kind, m.Mode, m.Body)
	}
	return strings.Join(s, " ")
}

// TestMachineMsgs checks the messages each main transition returns: whom
// to, how, and what.
func TestMachineMsgs(t *testing.T) {
	const (
		replace = "fifo/send/*fifo.Replace"
		deltas  = "fifo/send/*fifo.Deltas"
	)
	gone := apierrors.NewResourceExpired("too old")
	for _, tc := range []struct {
		name      string
		watchList bool
		// step drives the machine to the transition under test and takes it.
		step func(h *harness) Effects
		want string
	}{
		{"start", false, func(h *harness) Effects { return h.m.Start() }, ""},
		{"list done", false, func(h *harness) Effects {
			l := h.expectList(h.m.Start(), "0", 500)
			return h.m.ListDone(l.Gen, ListResult{List: podList("10", pod("a", "5"))})
		}, replace},
		{"empty list", false, func(h *harness) Effects {
			l := h.expectList(h.m.Start(), "0", 500)
			return h.m.ListDone(l.Gen, ListResult{List: podList("10")})
		}, replace},
		{"list failed", false, func(h *harness) Effects {
			l := h.expectList(h.m.Start(), "0", 500)
			return h.m.ListDone(l.Gen, ListResult{Err: fmt.Errorf("boom")})
		}, ""},
		{"stale list", false, func(h *harness) Effects {
			l := h.expectList(h.m.Start(), "0", 500)
			return h.m.ListDone(l.Gen-1, ListResult{List: podList("10")})
		}, ""},
		{"watch events", false, func(h *harness) Effects {
			w := h.startWatching("10")
			return h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "11")), ev(watch.Bookmark, bookmark("12", false))}, time.Time{})
		}, deltas},
		{"watch events all dropped", false, func(h *harness) Effects {
			w := h.startWatching("10")
			return h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, nil)}, time.Time{})
		}, ""},
		{"events then an error event", false, func(h *harness) Effects {
			w := h.startWatching("10")
			return h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "11")), errEvent(gone)}, time.Time{})
		}, deltas},
		{"stale watch events", false, func(h *harness) Effects {
			w := h.startWatching("10")
			return h.m.WatchEvents(w.Gen-1, []watch.Event{ev(watch.Added, pod("a", "11"))}, time.Time{})
		}, ""},
		{"watch failed", false, func(h *harness) Effects {
			w := h.startWatching("10")
			return h.m.WatchFailed(w.Gen, apierrors.NewTooManyRequests("slow down", 1))
		}, ""},
		{"watch ended", false, func(h *harness) Effects {
			w := h.startWatching("10")
			h.clk.Step(time.Minute)
			return h.m.WatchEnded(w.Gen)
		}, ""},
		{"backoff elapsed", false, func(h *harness) Effects {
			w := h.startWatching("10")
			wait := h.expectWait(h.m.WatchFailed(w.Gen, apierrors.NewTooManyRequests("slow down", 1)), -1)
			return h.m.BackoffElapsed(wait.Gen)
		}, ""},
		{"stop", false, func(h *harness) Effects {
			h.startWatching("10")
			return h.m.Stop()
		}, ""},
		{"watch-list initial events", true, func(h *harness) Effects {
			w := h.expectWatchList(h.m.Start(), "")
			return h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "1"))}, time.Time{})
		}, ""},
		{"watch-list end, then events", true, func(h *harness) Effects {
			w := h.expectWatchList(h.m.Start(), "")
			return h.m.WatchEvents(w.Gen, []watch.Event{
				ev(watch.Added, pod("a", "1")),
				ev(watch.Bookmark, bookmark("2", true)),
				ev(watch.Added, pod("b", "3")),
			}, time.Time{})
		}, replace + " " + deltas},
		{"watch-list end alone", true, func(h *harness) Effects {
			w := h.expectWatchList(h.m.Start(), "")
			return h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Bookmark, bookmark("2", true))}, time.Time{})
		}, replace},
		{"watch-list falls back to a list", true, func(h *harness) Effects {
			w := h.expectWatchList(h.m.Start(), "")
			return h.m.WatchFailed(w.Gen, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(tc.watchList) })
			e := tc.step(h)
			if got := msgsString(e.Msgs); got != tc.want {
				t.Fatalf("messages %q, want %q (effects: %s)", got, tc.want, describe(e))
			}
			// The next input starts from an empty outbox.
			if e := h.m.BackoffElapsed(h.m.gen + 1); e.Msgs != nil {
				t.Fatalf("stale input returned %q", msgsString(e.Msgs))
			}
		})
	}
}
