package reflector

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

func pod(name, rv string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func podList(rv string, pods ...*v1.Pod) *v1.PodList {
	l := &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, p := range pods {
		l.Items = append(l.Items, *p)
	}
	return l
}

func bookmark(rv string, initialEventsEnd bool) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	if initialEventsEnd {
		p.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return p
}

func ev(t watch.EventType, obj runtime.Object) watch.Event { return watch.Event{Type: t, Object: obj} }

func errEvent(err interface{ Status() metav1.Status }) watch.Event {
	st := err.Status()
	return watch.Event{Type: watch.Error, Object: &st}
}

// syncBuffer is a log sink safe for the actor tests' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testBackoff doubles from 1s to 30s without jitter, so waits are exact.
func testBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 30 * time.Second}
}

// harness drives a Machine without goroutines.
type harness struct {
	t    testing.TB
	r    *Reflector
	m    *Machine
	clk  *testingclock.FakeClock
	logs *syncBuffer
	tel  *telemetry.T
}

func newHarness(t testing.TB, mutate func(*Config)) *harness {
	t.Helper()
	logs := &syncBuffer{}
	tel := telemetry.New(telemetry.Config{
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Informer: telemetry.InformerInfo{Name: "pods"},
	})
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	cfg := Config{
		ListerWatcher: &cache.ListWatch{},
		ExpectedType:  &v1.Pod{},
		UseWatchList:  ptr.To(false),
		Backoff:       testBackoff(),
		Clock:         clk,
		Telemetry:     tel,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	r := New(cfg)
	r.rand = func() float64 { return 0 }
	m := newMachine(r)
	handles.Store(m, r)
	return &harness{t: t, r: r, m: m, clk: clk, logs: logs, tel: tel}
}

func (h *harness) counters() *telemetry.Counters { return &h.tel.Metrics.Counters }

func (h *harness) expectList(e Effects, rv string, pageSize int64) *ListRequest {
	h.t.Helper()
	if e.List == nil {
		h.t.Fatalf("expected a list at RV %q, got %s", rv, describe(e))
	}
	if e.List.Options.ResourceVersion != rv || e.List.PageSize != pageSize {
		h.t.Fatalf("expected list RV %q page size %d, got RV %q page size %d",
			rv, pageSize, e.List.Options.ResourceVersion, e.List.PageSize)
	}
	if e.Watch != nil || e.Wait != nil {
		h.t.Fatalf("more than one next step: %s", describe(e))
	}
	return e.List
}

func (h *harness) expectWatch(e Effects, rv string) *WatchRequest {
	h.t.Helper()
	if e.Watch == nil || e.Watch.WatchList {
		h.t.Fatalf("expected a watch at RV %q, got %s", rv, describe(e))
	}
	o := e.Watch.Options
	if o.ResourceVersion != rv || !o.AllowWatchBookmarks || o.TimeoutSeconds == nil || o.SendInitialEvents != nil || o.ResourceVersionMatch != "" {
		h.t.Fatalf("unexpected watch options: %+v (want RV %q)", o, rv)
	}
	if e.List != nil || e.Wait != nil {
		h.t.Fatalf("more than one next step: %s", describe(e))
	}
	return e.Watch
}

func (h *harness) expectWatchList(e Effects, rv string) *WatchRequest {
	h.t.Helper()
	if e.Watch == nil || !e.Watch.WatchList {
		h.t.Fatalf("expected a watch-list at RV %q, got %s", rv, describe(e))
	}
	o := e.Watch.Options
	if o.ResourceVersion != rv || !o.AllowWatchBookmarks || o.SendInitialEvents == nil || !*o.SendInitialEvents ||
		o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || o.TimeoutSeconds == nil {
		h.t.Fatalf("unexpected watch-list options: %+v (want RV %q)", o, rv)
	}
	return e.Watch
}

func (h *harness) expectWait(e Effects, d time.Duration) *WaitRequest {
	h.t.Helper()
	if e.Wait == nil || e.List != nil || e.Watch != nil {
		h.t.Fatalf("expected a wait of %v, got %s", d, describe(e))
	}
	if d >= 0 && e.Wait.Duration != d {
		h.t.Fatalf("expected a wait of %v, got %v", d, e.Wait.Duration)
	}
	return e.Wait
}

// startWatching lists pods at RV "0" and returns the watch request.
func (h *harness) startWatching(rv string, pods ...*v1.Pod) *WatchRequest {
	h.t.Helper()
	l := h.expectList(h.m.Start(), "0", 500)
	e := h.m.ListDone(l.Gen, ListResult{List: podList(rv, pods...)})
	if e.replace() == nil || len(e.replace().Items) != len(pods) {
		h.t.Fatalf("expected a Replace of %d items, got %s", len(pods), describe(e))
	}
	return h.expectWatch(e, rv)
}

func describe(e Effects) string {
	var parts []string
	if e.replace() != nil {
		parts = append(parts, fmt.Sprintf("Replace(%d items, rv %q)", len(e.replace().Items), e.replace().ResourceVersion))
	}
	if e.deltas() != nil {
		parts = append(parts, fmt.Sprintf("Deltas(%s)", deltasString(e.deltas().Items)))
	}
	if e.StopWatch {
		parts = append(parts, "StopWatch")
	}
	if e.HandleError != nil {
		parts = append(parts, fmt.Sprintf("HandleError(%v)", e.HandleError))
	}
	if e.List != nil {
		parts = append(parts, fmt.Sprintf("List(rv %q, page %d)", e.List.Options.ResourceVersion, e.List.PageSize))
	}
	if e.Watch != nil {
		parts = append(parts, fmt.Sprintf("Watch(rv %q, watchList %v)", e.Watch.Options.ResourceVersion, e.Watch.WatchList))
	}
	if e.Wait != nil {
		parts = append(parts, fmt.Sprintf("Wait(%v)", e.Wait.Duration))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// deltasString renders deltas as "Type:key@rv" for comparisons.
func deltasString(ds []fifo.Delta) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		rv := "?"
		if o, ok := d.Object.(metav1.Object); ok {
			rv = o.GetResourceVersion()
		} else if d.Type == fifo.Bookmark {
			rv = d.BookmarkRV()
		}
		s[i] = fmt.Sprintf("%s:%s@%s", d.Type, d.Key, rv)
	}
	return strings.Join(s, " ")
}

// replace returns the *fifo.Replace e sends to the queue, nil if none.
func (e Effects) replace() *fifo.Replace { return queueMsg[*fifo.Replace](e) }

// deltas returns the *fifo.Deltas e sends to the queue, nil if none.
func (e Effects) deltas() *fifo.Deltas { return queueMsg[*fifo.Deltas](e) }

// queueMsg returns the message of type T among e.Msgs. It panics if a
// message is not a Send to the queue, or if two are of type T: the
// Machine sends at most one Replace and one Deltas per input.
func queueMsg[T any](e Effects) T {
	var found T
	n := 0
	for _, m := range e.Msgs {
		if m.To != stage.ToQueue || m.Mode != stage.Send {
			panic(fmt.Sprintf("message %T to %v by %v, want a Send to the queue", m.Body, m.To, m.Mode))
		}
		if b, ok := m.Body.(T); ok {
			found = b
			n++
		}
	}
	if n > 1 {
		panic(fmt.Sprintf("%d messages of type %T", n, found))
	}
	return found
}

// Effects is what one Step returned, decoded for the tests: the messages
// for the queue (Msgs), then the effects.
type Effects struct {
	Msgs        []stage.Msg
	StopWatch   bool
	HandleError error
	List        *ListRequest
	Watch       *WatchRequest
	Wait        *WaitRequest
	Check       *WaitRequest
	// Status is the status reported, nil if none; StopTimers counts the
	// timers stopped.
	Status     *Status
	StopTimers int
}

// WaitRequest is a timer set: the Gen its message carries, and when.
type WaitRequest = waitRequest

// handles are the Reflector handles of the harnesses' Machines: the
// status a Machine reports is stored there, as its shell does.
var handles sync.Map // *Machine → *Reflector

// decode sorts what a Step of m returned into an Effects, storing the
// status it reports in m's handle. It panics on a message it does not
// know.
func (m *Machine) decode(msgs []stage.Msg) Effects {
	e := decode(msgs)
	if r, ok := handles.Load(m); ok && e.Status != nil {
		r.(*Reflector).setStatus(*e.Status)
	}
	return e
}

func decode(msgs []stage.Msg) Effects {
	var e Effects
	for _, m := range msgs {
		switch {
		case m.To == stage.ToQueue:
			e.Msgs = append(e.Msgs, m)
		case m.To == stage.ToSource:
			switch b := m.Body.(type) {
			case *StopWatch:
				e.StopWatch = true
			case *ListRequest:
				e.List = b
			case *WatchRequest:
				e.Watch = b
			default:
				panic(fmt.Sprintf("%T to the source", b))
			}
		case m.To == stage.ToInformer:
			switch b := m.Body.(type) {
			case *WatchError:
				e.HandleError = b.Err
			case *Status:
				st := *b
				e.Status = &st
			default:
				panic(fmt.Sprintf("%T to the informer", b))
			}
		case m.To == backoffTimer || m.To == checkTimer:
			switch b := m.Body.(type) {
			case *stage.StopTimer:
				e.StopTimers++
			case *stage.SetTimer:
				switch f := b.Fire.(type) {
				case *BackoffElapsed:
					e.Wait = &WaitRequest{Gen: f.Gen, Duration: b.After}
				case *WatchListCheck:
					e.Check = &WaitRequest{Gen: f.Gen, Duration: b.After}
				default:
					panic(fmt.Sprintf("timer firing %T", f))
				}
			}
		default:
			panic(fmt.Sprintf("%T to %v", m.Body, m.To))
		}
	}
	return e
}

// The Machine's inputs, through Step, decoded.
func (m *Machine) Start() Effects { return m.decode(m.Step(Lifecycle(stage.Started))) }
func (m *Machine) Stop() Effects  { return m.decode(m.Step(Lifecycle(stage.Stopping))) }
func (m *Machine) ListDone(gen uint64, res ListResult) Effects {
	return m.decode(m.Step(&ListDone{Gen: gen, Result: res}))
}
func (m *Machine) WatchFailed(gen uint64, err error) Effects {
	return m.decode(m.Step(&WatchFailed{Gen: gen, Err: err}))
}
func (m *Machine) WatchOpened(gen uint64) Effects { return m.decode(m.Step(&WatchOpened{Gen: gen})) }
func (m *Machine) WatchListCheck(gen uint64) Effects {
	return m.decode(m.Step(&WatchListCheck{Gen: gen}))
}
func (m *Machine) WatchEvents(gen uint64, events []watch.Event, at time.Time) Effects {
	return m.decode(m.Step(&WatchEvents{Gen: gen, Events: events, At: at}))
}
func (m *Machine) WatchEnded(gen uint64) Effects { return m.decode(m.Step(&WatchEnded{Gen: gen})) }
func (m *Machine) BackoffElapsed(gen uint64) Effects {
	return m.decode(m.Step(&BackoffElapsed{Gen: gen}))
}
