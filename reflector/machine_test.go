package reflector

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

var podsGR = schema.GroupResource{Resource: "pods"}

func TestMachineFirstListAtRV0ThenWatch(t *testing.T) {
	h := newHarness(t, nil)
	l := h.expectList(h.m.Start(), "0", 500)
	if h.m.State() != StateListing {
		t.Fatalf("state %v, want Listing", h.m.State())
	}
	e := h.m.ListDone(l.Gen, ListResult{List: podList("10", pod("a", "5"), pod("b", "7"))})
	if e.replace() == nil {
		t.Fatalf("no Replace: %s", describe(e))
	}
	if got, want := deltasString(e.replace().Items), "Replaced:ns/a@5 Replaced:ns/b@7"; got != want {
		t.Fatalf("Replace items %q, want %q", got, want)
	}
	if e.replace().ResourceVersion != "10" || e.replace().ListTrace != nil || e.replace().Items[0].Trace != nil {
		t.Fatalf("Replace RV %q, ListTrace %v, item trace %v", e.replace().ResourceVersion, e.replace().ListTrace, e.replace().Items[0].Trace)
	}
	w := h.expectWatch(e, "10")
	if got := *w.Options.TimeoutSeconds; got != 300 {
		t.Fatalf("timeout %d, want 300", got)
	}
	if h.r.LastSyncResourceVersion() != "10" || h.m.State() != StateWatching {
		t.Fatalf("RV %q state %v", h.r.LastSyncResourceVersion(), h.m.State())
	}
	st := h.r.Status()
	if st.Syncs != 1 || st.LastSyncUsedWatchList || st.UseWatchList {
		t.Fatalf("status %+v", st)
	}
	c := h.counters()
	if c.Relists.Load() != 1 || c.WatchRestarts.Load() != 1 || c.ReflectorEvents.Load() != 2 {
		t.Fatalf("relists %d, watch restarts %d, events %d", c.Relists.Load(), c.WatchRestarts.Load(), c.ReflectorEvents.Load())
	}
}

func TestMachineWatchTimeout(t *testing.T) {
	cases := []struct {
		minTimeout time.Duration
		rand       float64
		want       int64
	}{
		{0, 0, 300},
		{0, 0.5, 450},
		{0, 0.9999, 599},
		{time.Minute, 0, 300}, // under 5 minutes is raised to 5, as in client-go
		{10 * time.Minute, 0, 600},
		{10 * time.Minute, 0.9999, 1199},
	}
	for _, tc := range cases {
		h := newHarness(t, func(c *Config) { c.MinWatchTimeout = tc.minTimeout })
		h.m.s.rand = func() float64 { return tc.rand }
		w := h.startWatching("1")
		if got := *w.Options.TimeoutSeconds; got != tc.want {
			t.Errorf("min %v rand %v: timeout %d, want %d", tc.minTimeout, tc.rand, got, tc.want)
		}
	}
}

func TestMachineWatchEventsBecomeDeltas(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10", pod("a", "5"))
	e := h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Added, pod("b", "11")),
		ev(watch.Modified, pod("a", "12")),
		ev(watch.Deleted, pod("b", "13")),
	}, time.Time{})
	if e.deltas() == nil || e.replace() != nil || e.StopWatch || e.List != nil || e.Watch != nil || e.Wait != nil {
		t.Fatalf("effects: %s", describe(e))
	}
	if got, want := deltasString(e.deltas().Items), "Added:ns/b@11 Updated:ns/a@12 Deleted:ns/b@13"; got != want {
		t.Fatalf("deltas %q, want %q", got, want)
	}
	if e.deltas().Items[0].Trace != nil {
		t.Fatal("trace set with tracing off")
	}
	if rv := h.r.LastSyncResourceVersion(); rv != "13" {
		t.Fatalf("RV %q, want 13", rv)
	}
	if n := h.counters().ReflectorEvents.Load(); n != 4 {
		t.Fatalf("received %d, want 4 (1 listed + 3 watched)", n)
	}
}

// A bookmark moves the reflector's RV on and goes to the queue, in order
// with the events around it, as a Bookmark delta (client-go's store.Bookmark,
// which its AtomicFIFO queues), so that the cache's version follows it.
func TestMachineBookmarkAdvancesRV(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10")
	e := h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Added, pod("a", "41")), ev(watch.Bookmark, bookmark("42", false)), ev(watch.Modified, pod("a", "43")),
	}, time.Time{})
	if e.replace() != nil || e.List != nil || e.Watch != nil || e.Wait != nil || e.deltas() == nil {
		t.Fatalf("bookmark produced %s", describe(e))
	}
	if got := deltasString(e.deltas().Items); got != "Added:ns/a@41 Bookmark:@42 Updated:ns/a@43" {
		t.Fatalf("deltas %s", got)
	}
	if rv := h.r.LastSyncResourceVersion(); rv != "43" {
		t.Fatalf("RV %q, want 43", rv)
	}
	e = h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Bookmark, bookmark("42", false))}, time.Time{})
	if e.deltas() == nil || deltasString(e.deltas().Items) != "Bookmark:@42" {
		t.Fatalf("bookmark produced %s", describe(e))
	}
	if rv := h.r.LastSyncResourceVersion(); rv != "42" {
		t.Fatalf("RV %q, want 42", rv)
	}
	// The next watch starts from the bookmark.
	h.clk.Step(2 * time.Second)
	h.expectWatch(h.m.WatchEnded(w.Gen), "42")
}

// From RV "" the server sends synthetic Added events in no RV order; the RV
// moves only after a non-Added event proves they are over.
func TestMachineRVNotPropagatedDuringSyntheticAdds(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("") // a list that reported no RV
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "7")), ev(watch.Added, pod("b", "3"))}, time.Time{})
	if rv := h.r.LastSyncResourceVersion(); rv != "" {
		t.Fatalf("RV %q moved on synthetic Added events", rv)
	}
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Modified, pod("a", "8")), ev(watch.Added, pod("c", "9"))}, time.Time{})
	if rv := h.r.LastSyncResourceVersion(); rv != "9" {
		t.Fatalf("RV %q, want 9", rv)
	}
}

func TestMachineCleanCloseRewatchesWithoutRelist(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10")
	h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "11"))}, time.Time{})
	e := h.m.WatchEnded(w.Gen)
	w2 := h.expectWatch(e, "11")
	if e.HandleError != nil || e.replace() != nil {
		t.Fatalf("effects: %s", describe(e))
	}
	// A watch that lasted long enough but saw nothing also just re-watches.
	h.clk.Step(5 * time.Second)
	h.expectWatch(h.m.WatchEnded(w2.Gen), "11")
	if n := h.counters().Relists.Load(); n != 1 {
		t.Fatalf("relists %d, want 1", n)
	}
	if n := h.counters().WatchErrors.Load(); n != 0 {
		t.Fatalf("watch errors %d", n)
	}
}

func TestMachineVeryShortWatchRelists(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10")
	e := h.m.WatchEnded(w.Gen) // no event, no time passed
	wt := h.expectWait(e, time.Second)
	if e.HandleError != nil {
		t.Fatalf("handler called for a very short watch: %v", e.HandleError)
	}
	h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 0)
	if n := h.counters().WatchErrors.Load(); n != 1 {
		t.Fatalf("watch errors %d, want 1", n)
	}
}

func TestMachineWatchErrorEvents(t *testing.T) {
	const (
		relist  = "relist at last RV after backoff"
		rewatch = "re-watch after backoff"
		now     = "re-watch at once"
	)
	cases := []struct {
		name       string
		event      watch.Event
		maxRetry   time.Duration
		want       string
		reasonLogs string
	}{
		{"expired", errEvent(apierrors.NewResourceExpired("too old")), 0, relist, "Watch closed"},
		{"gone", errEvent(apierrors.NewGone("gone")), 0, relist, "Watch closed"},
		{"too many requests", errEvent(apierrors.NewTooManyRequests("busy", 1)), 0, rewatch, "429"},
		{"internal, retries off", errEvent(apierrors.NewInternalError(errors.New("etcd"))), 0, relist, "watch ended with error"},
		{"internal, retries on", errEvent(apierrors.NewInternalError(errors.New("etcd"))), time.Minute, now, "Retrying watch after internal error"},
		{"forbidden", errEvent(apierrors.NewForbidden(podsGR, "", errors.New("no"))), 0, relist, "watch ended with error"},
		{"not a status", ev(watch.Error, pod("x", "1")), 0, relist, "watch ended with error"},
		{"nil object", ev(watch.Error, nil), 0, relist, "watch ended with error"},
		{"typed nil status", ev(watch.Error, (*metav1.Status)(nil)), 0, relist, "watch ended with error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MaxInternalErrorRetryDuration = tc.maxRetry })
			w := h.startWatching("10")
			e := h.m.WatchEvents(w.Gen, []watch.Event{
				ev(watch.Added, pod("a", "11")),
				tc.event,
				ev(watch.Added, pod("b", "12")), // after the error: never used
			}, time.Time{})
			if e.deltas() == nil || deltasString(e.deltas().Items) != "Added:ns/a@11" {
				t.Fatalf("deltas before the error: %s", describe(e))
			}
			if !e.StopWatch {
				t.Fatal("watch not stopped")
			}
			if e.HandleError != nil {
				t.Fatalf("client-go does not hand watch stream errors to the handler; got %v", e.HandleError)
			}
			if h.r.LastSyncResourceVersion() != "11" {
				t.Fatalf("RV %q, want 11", h.r.LastSyncResourceVersion())
			}
			switch tc.want {
			case relist:
				wt := h.expectWait(e, time.Second)
				h.expectList(h.m.BackoffElapsed(wt.Gen), "11", 0)
			case rewatch:
				wt := h.expectWait(e, time.Second)
				h.expectWatch(h.m.BackoffElapsed(wt.Gen), "11")
			case now:
				h.expectWatch(e, "11")
			}
			if n := h.counters().WatchErrors.Load(); n != 1 {
				t.Fatalf("watch errors %d, want 1", n)
			}
			if !strings.Contains(h.logs.String(), tc.reasonLogs) {
				t.Fatalf("log lacks %q:\n%s", tc.reasonLogs, h.logs.String())
			}
		})
	}
}

// client-go's TestReflectorExpiredExactResourceVersion, as a script: the
// relist at the last RV is expired, so it is retried at once at RV "".
func TestMachineExpiredExactResourceVersion(t *testing.T) {
	h := newHarness(t, nil)
	pods := make([]*v1.Pod, 8)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("pod-%d", i), fmt.Sprint(i))
	}
	var listRVs []string
	l := h.expectList(h.m.Start(), "0", 500)
	listRVs = append(listRVs, l.Options.ResourceVersion)
	e := h.m.ListDone(l.Gen, ListResult{List: podList("10", pods[:4]...)})
	if len(e.replace().Items) != 4 {
		t.Fatalf("first Replace has %d items", len(e.replace().Items))
	}
	w := h.expectWatch(e, "10")

	// The watch is expired: after the backoff, relist at "10".
	e = h.m.WatchEvents(w.Gen, []watch.Event{errEvent(apierrors.NewResourceExpired("too old"))}, time.Time{})
	wt := h.expectWait(e, time.Second)
	l = h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 0)
	listRVs = append(listRVs, l.Options.ResourceVersion)

	// Expired too: retried at once at "", with the same (unpaginated) pager.
	e = h.m.ListDone(l.Gen, ListResult{Err: apierrors.NewResourceExpired("The resourceVersion for the provided watch is too old.")})
	if e.HandleError != nil || e.replace() != nil {
		t.Fatalf("effects: %s", describe(e))
	}
	l = h.expectList(e, "", 0)
	listRVs = append(listRVs, l.Options.ResourceVersion)
	e = h.m.ListDone(l.Gen, ListResult{List: podList("11", pods...)})
	if e.replace() == nil || len(e.replace().Items) != 8 || e.replace().ResourceVersion != "11" {
		t.Fatalf("second Replace: %s", describe(e))
	}
	h.expectWatch(e, "11")
	if got := strings.Join(listRVs, ","); got != `0,10,` {
		t.Fatalf("list RVs %q, want 0,10,\"\"", got)
	}
	if n := h.counters().Relists.Load(); n != 3 {
		t.Fatalf("relists %d, want 3", n)
	}
}

func TestMachineListRetryFailsToo(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"expired", apierrors.NewResourceExpired("too old")},
		{"too large", apierrors.NewTimeoutError("Too large resource version", 1)},
		{"too large cause", &apierrors.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonTimeout,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			w := h.startWatching("10")
			wt := h.expectWait(h.m.WatchEnded(w.Gen), time.Second) // very short
			l := h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 0)
			l = h.expectList(h.m.ListDone(l.Gen, ListResult{Err: tc.err}), "", 0)
			e := h.m.ListDone(l.Gen, ListResult{Err: tc.err})
			if !errors.Is(e.HandleError, tc.err) {
				t.Fatalf("handler error %v, want it to wrap %v", e.HandleError, tc.err)
			}
			wt = h.expectWait(e, 2*time.Second)
			// The RV is still unavailable: the next relist is at "" too,
			// with a new pager, paginated as RV "" lists are.
			h.expectList(h.m.BackoffElapsed(wt.Gen), "", 500)
		})
	}
}

func TestMachineListErrorCallsHandlerAndBacksOff(t *testing.T) {
	h := newHarness(t, nil)
	forbidden := apierrors.NewForbidden(podsGR, "", errors.New("rbac says no"))
	l := h.expectList(h.m.Start(), "0", 500)
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		e := h.m.ListDone(l.Gen, ListResult{Err: forbidden})
		if !apierrors.IsForbidden(e.HandleError) || !strings.Contains(e.HandleError.Error(), "failed to list *v1.Pod") {
			t.Fatalf("attempt %d: handler error %v", i, e.HandleError)
		}
		if e.replace() != nil || e.deltas() != nil {
			t.Fatalf("emitted on error: %s", describe(e))
		}
		wt := h.expectWait(e, want)
		l = h.expectList(h.m.BackoffElapsed(wt.Gen), "0", 500)
	}
	if n := h.counters().WatchErrors.Load(); n != 3 {
		t.Fatalf("errors counted %d, want 3", n)
	}
}

func TestMachineWatchOpenErrors(t *testing.T) {
	cases := []struct {
		name        string
		err         error
		handler     bool
		thenRelists bool
	}{
		{"connection refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), false, false},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), false, false},
		{"expired", apierrors.NewResourceExpired("too old resource version: 10 (11)"), true, true},
		{"forbidden", apierrors.NewForbidden(podsGR, "", errors.New("no")), true, true},
		{"other", errors.New("boom"), true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			w := h.startWatching("10")
			e := h.m.WatchFailed(w.Gen, tc.err)
			if (e.HandleError != nil) != tc.handler {
				t.Fatalf("handler error %v, want handler called: %v", e.HandleError, tc.handler)
			}
			wt := h.expectWait(e, time.Second)
			if tc.thenRelists {
				h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 0)
			} else {
				h.expectWatch(h.m.BackoffElapsed(wt.Gen), "10")
			}
		})
	}
}

func TestMachinePagination(t *testing.T) {
	t.Run("versioned relist is not paginated (TestReflectorNotPaginatingNotConsistentReads)", func(t *testing.T) {
		h := newHarness(t, nil)
		w := h.startWatching("10") // the RV "0" list was paginated by 500
		wt := h.expectWait(h.m.WatchEnded(w.Gen), -1)
		h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 0)
	})
	t.Run("paginated first list keeps paginating", func(t *testing.T) {
		h := newHarness(t, nil)
		l := h.expectList(h.m.Start(), "0", 500)
		w := h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("10"), Paginated: true}), "10")
		wt := h.expectWait(h.m.WatchEnded(w.Gen), -1)
		h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 500)
	})
	t.Run("paginated RV \"\" list does not count", func(t *testing.T) {
		h := newHarness(t, nil)
		w := h.startWatching("10")
		wt := h.expectWait(h.m.WatchEnded(w.Gen), -1)
		l := h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 0)
		expired := apierrors.NewResourceExpired("x")
		l = h.expectList(h.m.ListDone(l.Gen, ListResult{Err: expired}), "", 0)
		wt = h.expectWait(h.m.ListDone(l.Gen, ListResult{Err: expired}), -1)
		l = h.expectList(h.m.BackoffElapsed(wt.Gen), "", 500)
		w = h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("11"), Paginated: true}), "11")
		wt = h.expectWait(h.m.WatchEnded(w.Gen), -1)
		h.expectList(h.m.BackoffElapsed(wt.Gen), "11", 0)
	})
	t.Run("configured page size always", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.PageSize = 4 })
		l := h.expectList(h.m.Start(), "0", 4)
		w := h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("10")}), "10")
		wt := h.expectWait(h.m.WatchEnded(w.Gen), -1)
		h.expectList(h.m.BackoffElapsed(wt.Gen), "10", 4)
	})
}

func TestMachineBackoffGrowsAndResets(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10")
	refused := fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, d := range want {
		wt := h.expectWait(h.m.WatchFailed(w.Gen, refused), d*time.Second)
		w = h.expectWatch(h.m.BackoffElapsed(wt.Gen), "10")
		if i == 2 {
			h.clk.Step(time.Minute) // less than the 2 minute reset interval
		}
	}
	h.clk.Step(2 * time.Minute)
	h.expectWait(h.m.WatchFailed(w.Gen, refused), time.Second)
	if n := h.counters().Relists.Load(); n != 1 {
		t.Fatalf("connection refused relisted: %d lists", n)
	}
}

func TestDefaultBackoffIsClientGos(t *testing.T) {
	b := DefaultBackoff()
	want := wait.Backoff{Duration: 800 * time.Millisecond, Cap: 30 * time.Second, Steps: 38, Factor: 2, Jitter: 1}
	if b != want {
		t.Fatalf("default backoff %+v, want %+v", b, want)
	}
}

func TestMachineDropsBadObjects(t *testing.T) {
	un := func(apiVersion, kind, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetName(name)
		u.SetResourceVersion("20")
		return u
	}
	cases := []struct {
		name    string
		example runtime.Object
		good    runtime.Object
		bad     watch.Event
		reason  string
	}{
		{"wrong type", &v1.Pod{}, pod("ok", "20"), ev(watch.Added, &v1.Service{}), DropWrongType},
		{"nil object", &v1.Pod{}, pod("ok", "20"), ev(watch.Added, nil), DropWrongType},
		{"nil object, any type", nil, pod("ok", "20"), ev(watch.Modified, nil), DropNilObject},
		{"typed nil", &v1.Pod{}, pod("ok", "20"), ev(watch.Added, (*v1.Pod)(nil)), DropNilObject},
		{"no object meta", nil, pod("ok", "20"), ev(watch.Added, &metav1.Status{}), DropNoMeta},
		{"wrong gvk", un("example.com/v1", "Foo", ""), un("example.com/v1", "Foo", "ok"), ev(watch.Added, un("example.com/v1", "Bar", "x")), DropWrongType},
		{"table", nil, pod("ok", "20"), ev(watch.Added, un("meta.k8s.io/v1", "Table", "t")), DropWrongType},
		{"unknown event type", &v1.Pod{}, pod("ok", "20"), ev("SURPRISE", pod("x", "21")), DropUnknownType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.ExpectedType = tc.example })
			w := h.startWatching("10")
			e := h.m.WatchEvents(w.Gen, []watch.Event{tc.bad, ev(watch.Added, tc.good)}, time.Time{})
			if e.StopWatch || e.List != nil || e.Watch != nil || e.Wait != nil || e.HandleError != nil {
				t.Fatalf("a bad object disturbed the watch: %s", describe(e))
			}
			if e.deltas() == nil || len(e.deltas().Items) != 1 || e.deltas().Items[0].Object != tc.good {
				t.Fatalf("deltas: %s", describe(e))
			}
			if n := h.counters().Dropped.Load(); n != 1 {
				t.Fatalf("dropped %d, want 1", n)
			}
			logs := h.logs.String()
			if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "reason="+tc.reason) || !strings.Contains(logs, "informer=pods") {
				t.Fatalf("log lacks the drop with reason %s:\n%s", tc.reason, logs)
			}
		})
	}
}

func TestMachineTransform(t *testing.T) {
	transform := func(obj any) (any, error) {
		p := obj.(*v1.Pod)
		switch p.Name {
		case "bad":
			return nil, errors.New("cannot transform")
		case "nil":
			return nil, nil
		case "panic":
			panic("transform bug")
		}
		q := p.DeepCopy()
		q.Labels = map[string]string{"transformed": "yes"}
		return q, nil
	}
	h := newHarness(t, func(c *Config) { c.Transform = transform })
	l := h.expectList(h.m.Start(), "0", 500)
	e := h.m.ListDone(l.Gen, ListResult{List: podList("10", pod("a", "1"), pod("bad", "2"))})
	if len(e.replace().Items) != 1 || e.replace().Items[0].Object.(*v1.Pod).Labels["transformed"] != "yes" {
		t.Fatalf("Replace: %s", describe(e))
	}
	w := h.expectWatch(e, "10")
	e = h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Added, pod("b", "11")),
		ev(watch.Modified, pod("bad", "12")),
		ev(watch.Added, pod("nil", "13")),
		ev(watch.Added, pod("panic", "14")),
		ev(watch.Added, pod("c", "15")),
	}, time.Time{})
	// A transform that panics drops its object like one that fails; the
	// events after it are kept.
	if e.deltas() == nil || len(e.deltas().Items) != 2 || e.deltas().Items[0].Object.(*v1.Pod).Labels["transformed"] != "yes" ||
		e.deltas().Items[1].Key != "ns/c" {
		t.Fatalf("deltas: %s", describe(e))
	}
	if n := h.counters().Dropped.Load(); n != 4 {
		t.Fatalf("dropped %d, want 4", n)
	}
	if !strings.Contains(h.logs.String(), "reason=transform") || !strings.Contains(h.logs.String(), "transform panicked: transform bug") {
		t.Fatalf("no transform drop or panic logged:\n%s", h.logs.String())
	}
	// Dropped events still move the RV on, as in client-go.
	if rv := h.r.LastSyncResourceVersion(); rv != "15" {
		t.Fatalf("RV %q, want 15", rv)
	}
}

func TestMachineWatchList(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	if h.m.State() != StateWatchListing {
		t.Fatalf("state %v", h.m.State())
	}
	p1v2 := pod("p1", "3")
	p1v2.Labels = map[string]string{"v": "2"}
	e := h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Added, pod("p1", "1")),
		ev(watch.Added, pod("p2", "2")),
	}, time.Time{})
	if e.replace() != nil || e.deltas() != nil {
		t.Fatalf("emitted before the initial-events-end bookmark: %s", describe(e))
	}
	e = h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Modified, p1v2),
		ev(watch.Added, pod("p3", "4")),
		ev(watch.Deleted, pod("p3", "5")),
		ev(watch.Bookmark, bookmark("5", false)), // not the end
	}, time.Time{})
	if e.replace() != nil {
		t.Fatalf("a bookmark without the annotation ended the stream: %s", describe(e))
	}
	e = h.m.WatchEvents(w.Gen, []watch.Event{
		ev(watch.Bookmark, bookmark("6", true)),
		ev(watch.Added, pod("p4", "7")), // same watch, now a normal one
	}, time.Time{})
	if e.replace() == nil || e.replace().ResourceVersion != "6" {
		t.Fatalf("Replace: %s", describe(e))
	}
	if got, want := deltasString(e.replace().Items), "Replaced:ns/p1@3 Replaced:ns/p2@2"; got != want {
		t.Fatalf("Replace items %q, want %q", got, want)
	}
	if e.deltas() == nil || deltasString(e.deltas().Items) != "Added:ns/p4@7" {
		t.Fatalf("deltas after the bookmark: %s", describe(e))
	}
	if e.Watch != nil || e.List != nil || e.StopWatch {
		t.Fatalf("the watch-list watch must go on: %s", describe(e))
	}
	if !h.r.LastSyncUsedWatchList() || h.r.LastSyncResourceVersion() != "7" || h.m.State() != StateWatching {
		t.Fatalf("used watch-list %v, RV %q, state %v", h.r.LastSyncUsedWatchList(), h.r.LastSyncResourceVersion(), h.m.State())
	}
	// When that watch closes, a normal watch follows from the last RV.
	h.expectWatch(h.m.WatchEnded(w.Gen), "7")
	if n := h.counters().Relists.Load(); n != 1 {
		t.Fatalf("relists %d, want 1", n)
	}
}

func TestMachineWatchListFallbacks(t *testing.T) {
	t.Run("open error falls back to list", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
		w := h.expectWatchList(h.m.Start(), "")
		e := h.m.WatchFailed(w.Gen, apierrors.NewInvalid(schema.GroupKind{}, "streaming is not allowed", nil))
		if e.HandleError != nil {
			t.Fatalf("fallback called the handler: %v", e.HandleError)
		}
		l := h.expectList(e, "0", 500)
		e = h.m.ListDone(l.Gen, ListResult{List: podList("1", pod("p1", "1"))})
		h.expectWatch(e, "1")
		if h.r.LastSyncUsedWatchList() {
			t.Fatal("LastSyncUsedWatchList after a list")
		}
	})
	t.Run("error event falls back to list", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
		w := h.expectWatchList(h.m.Start(), "")
		e := h.m.WatchEvents(w.Gen, []watch.Event{
			ev(watch.Added, pod("p1", "1")),
			errEvent(apierrors.NewForbidden(podsGR, "", errors.New("no"))),
		}, time.Time{})
		if !e.StopWatch || e.replace() != nil || e.deltas() != nil {
			t.Fatalf("effects: %s", describe(e))
		}
		h.expectList(e, "0", 500)
	})
	t.Run("very short close falls back to list", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
		w := h.expectWatchList(h.m.Start(), "")
		h.expectList(h.m.WatchEnded(w.Gen), "0", 500)
	})
	t.Run("close without the bookmark streams again", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
		w := h.expectWatchList(h.m.Start(), "")
		h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("p1", "1"))}, time.Time{})
		w2 := h.expectWatchList(h.m.WatchEnded(w.Gen), "")
		e := h.m.WatchEvents(w2.Gen, []watch.Event{ev(watch.Added, pod("p2", "2")), ev(watch.Bookmark, bookmark("2", true))}, time.Time{})
		if e.replace() == nil || deltasString(e.replace().Items) != "Replaced:ns/p2@2" {
			t.Fatalf("the new stream must start from scratch: %s", describe(e))
		}
	})
	t.Run("429 backs off and streams again", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
		w := h.expectWatchList(h.m.Start(), "")
		for _, d := range []time.Duration{time.Second, 2 * time.Second} {
			wt := h.expectWait(h.m.WatchFailed(w.Gen, apierrors.NewTooManyRequests("busy", 1)), d)
			w = h.expectWatchList(h.m.BackoffElapsed(wt.Gen), "")
		}
	})
	t.Run("expired restarts the stream from RV \"\"", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
		w := h.expectWatchList(h.m.Start(), "")
		e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Bookmark, bookmark("5", true))}, time.Time{})
		if e.replace() == nil {
			t.Fatalf("no Replace: %s", describe(e))
		}
		// The watch after it fails to open: the ListAndWatch ends, and the
		// next sync streams from the last RV, which turns out expired.
		h.clk.Step(time.Minute)
		w = h.expectWatch(h.m.WatchEnded(w.Gen), "5")
		wt := h.expectWait(h.m.WatchFailed(w.Gen, errors.New("boom")), time.Second)
		w = h.expectWatchList(h.m.BackoffElapsed(wt.Gen), "5")
		h.expectWatchList(h.m.WatchFailed(w.Gen, apierrors.NewResourceExpired("too old")), "")
	})
}

func TestMachineStaleReportsIgnored(t *testing.T) {
	h := newHarness(t, nil)
	l := h.expectList(h.m.Start(), "0", 500)
	w := h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("10")}), "10")
	for name, e := range map[string]Effects{
		"old list":   h.m.ListDone(l.Gen, ListResult{List: podList("99", pod("x", "99"))}),
		"old events": h.m.WatchEvents(w.Gen-1, []watch.Event{ev(watch.Added, pod("x", "99"))}, time.Time{}),
		"old close":  h.m.WatchEnded(w.Gen - 1),
		"old fail":   h.m.WatchFailed(w.Gen-1, errors.New("x")),
		"no timer":   h.m.BackoffElapsed(w.Gen),
	} {
		if describe(e) != "nothing" {
			t.Errorf("%s: %s", name, describe(e))
		}
	}
	if h.r.LastSyncResourceVersion() != "10" {
		t.Fatalf("RV %q", h.r.LastSyncResourceVersion())
	}
	h.m.Stop()
	if e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("x", "11"))}, time.Time{}); describe(e) != "nothing" {
		t.Fatalf("after Stop: %s", describe(e))
	}
	if h.m.State() != StateStopped {
		t.Fatalf("state %v", h.m.State())
	}
}

func TestMachineUnsupportedTableList(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ExpectedType = nil })
	l := h.expectList(h.m.Start(), "0", 500)
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("meta.k8s.io/v1")
	list.SetKind("Table")
	e := h.m.ListDone(l.Gen, ListResult{List: list})
	if e.HandleError == nil || !strings.Contains(e.HandleError.Error(), "unsupported list gvk") || e.replace() != nil {
		t.Fatalf("effects: %s", describe(e))
	}
}

func TestMachineResumesFromHandleRV(t *testing.T) {
	h := newHarness(t, nil)
	h.startWatching("10")
	// A new Machine over the same handle starts from its status.
	m2 := newMachine(h.r)
	h.expectList(m2.Start(), "10", 0)
}

// TestMachineRestart: a restarted actor carries on over the same Machine:
// Restarting stops what runs, and the Started after it lists again from
// the last synced RV; reports of the requests before are stale.
func TestMachineRestart(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("10")
	e := decode(h.m.Step(Lifecycle(stage.Restarting)))
	if !e.StopWatch || e.StopTimers != 2 || e.List != nil || e.Watch != nil || h.m.State() != StateIdle {
		t.Fatalf("Restarting: %s, %d timers stopped, state %v", describe(e), e.StopTimers, h.m.State())
	}
	l := h.expectList(h.m.Start(), "10", 0)
	if e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("x", "11"))}, time.Time{}); describe(e) != "nothing" {
		t.Fatalf("the old watch's events after the restart: %s", describe(e))
	}
	h.expectWatch(h.m.ListDone(l.Gen, ListResult{List: podList("12")}), "12")
}

// fakeWLUnsupported is a ListerWatcher that says it cannot do WatchList.
type fakeWLUnsupported struct{ cache.ListWatch }

func (*fakeWLUnsupported) IsWatchListSemanticsUnSupported() bool { return true }

func TestNewUseWatchList(t *testing.T) {
	gate := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	for _, tc := range []struct {
		name string
		lw   cache.ListerWatcher
		use  *bool
		want bool
	}{
		{"default follows the feature gate", &cache.ListWatch{}, nil, gate},
		{"explicit on", &cache.ListWatch{}, ptr.To(true), true},
		{"explicit off", &cache.ListWatch{}, ptr.To(false), false},
		{"unsupported client, default", &fakeWLUnsupported{}, nil, false},
		{"unsupported client, explicit on", &fakeWLUnsupported{}, ptr.To(true), false},
	} {
		r := New(Config{ListerWatcher: tc.lw, ExpectedType: &v1.Pod{}, UseWatchList: tc.use})
		if got := r.Status().UseWatchList; got != tc.want {
			t.Errorf("%s: UseWatchList %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNewNamesAndTypes(t *testing.T) {
	r := New(Config{ListerWatcher: &cache.ListWatch{}, ExpectedType: &v1.Pod{}})
	if r.Name() != "*v1.Pod" || r.TypeDescription() != "*v1.Pod" {
		t.Fatalf("name %q type %q", r.Name(), r.TypeDescription())
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Foo")
	r = New(Config{ListerWatcher: &cache.ListWatch{}, ExpectedType: u, Name: "foos"})
	if r.Name() != "foos" || r.expectedGVK == nil || *r.expectedGVK != (schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Foo"}) {
		t.Fatalf("name %q gvk %v", r.Name(), r.expectedGVK)
	}
	// No example accepts every type; a typed nil one gives the type only.
	r = New(Config{ListerWatcher: &cache.ListWatch{}})
	if r.expectedType != nil || r.TypeDescription() != "<unspecified>" {
		t.Fatalf("no example: expected type %v, description %q", r.expectedType, r.TypeDescription())
	}
	r = New(Config{ListerWatcher: &cache.ListWatch{}, ExpectedType: (*unstructured.Unstructured)(nil)})
	if r.expectedType != reflect.TypeFor[*unstructured.Unstructured]() || r.expectedGVK != nil || r.TypeDescription() != "*unstructured.Unstructured" {
		t.Fatalf("typed nil example: expected type %v, gvk %v, description %q", r.expectedType, r.expectedGVK, r.TypeDescription())
	}
}

func newTracingHarness(t *testing.T, mutate func(*Config)) (*harness, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHarness(t, func(c *Config) {
		c.Telemetry = telemetry.New(telemetry.Config{TracerProvider: tp, Informer: telemetry.InformerInfo{Name: "pods"}})
		if mutate != nil {
			mutate(c)
		}
	})
	h.tel = h.r.tel
	return h, rec
}

func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestMachineTracing(t *testing.T) {
	informertest.NeedsTracing(t)
	h, rec := newTracingHarness(t, nil)
	l := h.expectList(h.m.Start(), "0", 500)
	_, listSpan := h.tel.StartList(context.Background(), "0")
	listSpan.End()
	at := time.Now()
	e := h.m.ListDone(l.Gen, ListResult{List: podList("10", pod("a", "1"), pod("b", "2")), ReceivedAt: at, Span: listSpan.SpanContext()})
	if e.replace().ListTrace == nil || !e.replace().ListTrace.Parent.Equal(listSpan.SpanContext()) {
		t.Fatalf("ListTrace %+v", e.replace().ListTrace)
	}
	for _, d := range e.replace().Items {
		if d.Trace == nil || !d.Trace.Parent.IsValid() {
			t.Fatalf("item %s has no trace", d.Key)
		}
	}
	roots := spansNamed(rec, telemetry.SpanReflector)
	if len(roots) != 2 {
		t.Fatalf("%d root spans, want 2", len(roots))
	}
	for _, s := range roots {
		if s.Parent().IsValid() || len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != listSpan.SpanContext().SpanID() {
			t.Fatalf("root span parent %v links %v", s.Parent(), s.Links())
		}
		if !s.StartTime().Equal(at) {
			t.Fatalf("root span starts at %v, want the list's end %v", s.StartTime(), at)
		}
	}
	w := h.expectWatch(e, "10")
	e = h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Modified, pod("a", "11"))}, at)
	if e.deltas().Items[0].Trace == nil {
		t.Fatal("watch delta has no trace")
	}
	roots = spansNamed(rec, telemetry.SpanReflector)
	if len(roots) != 3 || len(roots[2].Links()) != 0 {
		t.Fatalf("%d root spans; the watch one has links %v", len(roots), roots[len(roots)-1].Links())
	}
}

func TestMachineWatchListTracing(t *testing.T) {
	informertest.NeedsTracing(t)
	h, rec := newTracingHarness(t, func(c *Config) { c.UseWatchList = ptr.To(true) })
	w := h.expectWatchList(h.m.Start(), "")
	e := h.m.WatchEvents(w.Gen, []watch.Event{ev(watch.Added, pod("a", "1")), ev(watch.Bookmark, bookmark("2", true))}, time.Now())
	lists := spansNamed(rec, telemetry.SpanList)
	if len(lists) != 1 {
		t.Fatalf("%d list spans, want 1", len(lists))
	}
	if e.replace().ListTrace == nil || e.replace().ListTrace.Parent.SpanID() != lists[0].SpanContext().SpanID() {
		t.Fatalf("ListTrace %+v", e.replace().ListTrace)
	}
	roots := spansNamed(rec, telemetry.SpanReflector)
	if len(roots) != 1 || len(roots[0].Links()) != 1 || roots[0].Links()[0].SpanContext.SpanID() != lists[0].SpanContext().SpanID() {
		t.Fatalf("root spans %d, links %v", len(roots), roots)
	}
}

// TestWatchEventsRecycled: Step gives a WatchEvents of a watch reader back
// to it once it has taken its events, without the objects they reference;
// one of another sender is left as it is; and giving one back never
// blocks, also when the reader takes nothing more.
func TestWatchEventsRecycled(t *testing.T) {
	h := newHarness(t, nil)
	w := h.startWatching("1")
	p := pod("a", "2")
	mine := &WatchEvents{Gen: w.Gen, Events: []watch.Event{ev(watch.Modified, p)}}
	if e := h.m.WatchEvents(w.Gen, mine.Events, time.Time{}); e.deltas() == nil {
		t.Fatal(describe(e))
	}
	h.m.Step(mine)
	if mine.Gen != w.Gen || len(mine.Events) != 1 || mine.Events[0].Object != p {
		t.Fatalf("a caller's WatchEvents was changed: %+v", mine)
	}

	back := make(chan *WatchEvents, 1)
	reader := newWatchEvents(w.Gen, back)
	reader.Events = append(reader.Events, ev(watch.Modified, pod("a", "3")))
	reader.At = time.Now()
	events := reader.Events
	if out := h.m.Step(reader); len(out) == 0 {
		t.Fatal("the reader's batch's events were not taken")
	}
	select {
	case got := <-back:
		if got != reader || got.Gen != w.Gen || len(got.Events) != 0 || !got.At.IsZero() || events[0].Object != nil {
			t.Fatalf("a reader's WatchEvents was not given back emptied: %+v, its array holds %v", got, events[0].Object)
		}
	default:
		t.Fatal("a reader's WatchEvents was not given back")
	}
	// A reader that has stopped: its channel is full, nobody takes it.
	back <- newWatchEvents(w.Gen, back)
	h.m.Step(reader)
	if len(back) != 1 {
		t.Fatalf("%d batches given back", len(back))
	}
}

// The status a step changes goes out before the step's messages for the
// queue: its shell stores the resource version before the queue (and,
// run on the same goroutine, the indexer) takes the list, so an informer
// that has synced reports its list's version, as client-go's does. Sent
// after them, a synced informer could report "" for a moment.
func TestMachineStatusGoesBeforeTheQueue(t *testing.T) {
	h := newHarness(t, nil)
	l := h.expectList(h.m.Start(), "0", 500)
	msgs := h.m.Step(&ListDone{Gen: l.Gen, Result: ListResult{List: podList("10", pod("a", "5"))}})
	if len(msgs) < 2 {
		t.Fatalf("messages %v, want the status and the Replace", msgs)
	}
	st, ok := msgs[0].Body.(*Status)
	if !ok || msgs[0].To != stage.ToInformer || st.ResourceVersion != "10" {
		t.Fatalf("first message %T to %v (%+v), want the status with version 10", msgs[0].Body, msgs[0].To, msgs[0].Body)
	}
	queue := -1
	for i, m := range msgs {
		if m.To == stage.ToQueue && queue < 0 {
			queue = i
		}
	}
	if queue < 1 {
		t.Fatalf("the queue's message at %d of %v, want after the status", queue, msgs)
	}
}
