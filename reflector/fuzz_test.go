package reflector

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/actorinformer/actorinformer/fifo"
)

// kindless is a runtime.Object whose GetObjectKind returns nil.
type kindless struct{}

func (kindless) GetObjectKind() schema.ObjectKind { return nil }
func (kindless) DeepCopyObject() runtime.Object   { return kindless{} }

func randomObject(rng *rand.Rand) runtime.Object {
	switch rng.IntN(16) {
	case 0:
		return nil
	case 1:
		return (*v1.Pod)(nil)
	case 2:
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"}}
	case 3:
		return &metav1.Status{Status: metav1.StatusFailure, Code: int32(rng.IntN(600)), Reason: metav1.StatusReason(fmt.Sprint(rng.IntN(3)))}
	case 4:
		return (*metav1.Status)(nil)
	case 5:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": 7, "kind": []any{1}, "metadata": "not a map",
		}}
	case 6:
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "meta.k8s.io/v1", "kind": "Table",
			"metadata": map[string]any{"name": 5, "annotations": "x", "resourceVersion": []any{}},
		}}
	case 7:
		return &unstructured.Unstructured{}
	case 8:
		return &unstructured.Unstructured{Object: map[string]any{"kind": "Status", "apiVersion": "v1", "code": "x"}}
	case 9:
		return &runtime.Unknown{Raw: []byte("{")}
	case 10:
		return kindless{}
	case 11:
		b := bookmark(fmt.Sprint(rng.IntN(100)), rng.IntN(3) == 0)
		if rng.IntN(2) == 0 {
			b.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "yes"}
		}
		return b
	case 12:
		return &v1.List{}
	default:
		p := pod(fmt.Sprintf("p%d", rng.IntN(8)), fmt.Sprint(rng.IntN(1000)))
		if rng.IntN(4) == 0 {
			p.Namespace = ""
		}
		if rng.IntN(8) == 0 {
			p.Name = ""
		}
		return p
	}
}

var eventTypes = []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error, "", "WEIRD"}

func randomList(rng *rand.Rand) ListResult {
	switch rng.IntN(8) {
	case 0:
		return ListResult{Err: apierrors.NewResourceExpired("x")}
	case 1:
		return ListResult{Err: errors.New("boom")}
	case 2:
		return ListResult{List: (*v1.PodList)(nil)}
	case 3:
		return ListResult{List: nil}
	case 4:
		return ListResult{List: &v1.Pod{}} // not a list
	case 5:
		l := &v1.List{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}
		for range rng.IntN(4) {
			l.Items = append(l.Items, runtime.RawExtension{Object: randomObject(rng)})
		}
		l.Items = append(l.Items, runtime.RawExtension{Raw: []byte("garbage")})
		return ListResult{List: l}
	case 6:
		return ListResult{List: &unstructured.UnstructuredList{Object: map[string]any{"kind": 5}, Items: []unstructured.Unstructured{{}, {Object: map[string]any{"metadata": 1}}}}}
	default:
		var pods []*v1.Pod
		for range rng.IntN(5) {
			pods = append(pods, pod(fmt.Sprintf("p%d", rng.IntN(8)), "3"))
		}
		return ListResult{List: podList(fmt.Sprint(rng.IntN(100)), pods...), Paginated: rng.IntN(2) == 0}
	}
}

func randomTransform(rng *rand.Rand) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch rng.IntN(10) {
		case 0:
			return nil, errors.New("no")
		case 1:
			return nil, nil
		case 2:
			return (*v1.Pod)(nil), nil
		case 3:
			return "a string", nil
		case 4:
			return cache.DeletedFinalStateUnknown{Key: "k"}, nil
		case 5:
			panic("transform bug")
		}
		return obj, nil
	}
}

func checkDeltas(t *testing.T, what string, ds []fifo.Delta) {
	t.Helper()
	for _, d := range ds {
		if d.Type == 0 || isNil(d.Object) {
			t.Fatalf("%s: bad delta %+v", what, d)
		}
	}
}

// driveRandom feeds a Machine random inputs, malformed objects included,
// and checks it neither panics nor emits broken deltas.
func driveRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t, func(c *Config) {
		switch rng.IntN(3) {
		case 0:
			c.ExpectedType = nil
		case 1:
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("Pod")
			c.ExpectedType = u
		}
		c.UseWatchList = ptr.To(rng.IntN(2) == 0)
		if rng.IntN(2) == 0 {
			c.Transform = randomTransform(rng)
		}
		c.MaxInternalErrorRetryDuration = time.Duration(rng.IntN(2)) * time.Minute
	})
	e := h.m.Start()
	for range steps {
		if e.replace() != nil {
			checkDeltas(t, "Replace", e.replace().Items)
		}
		if e.deltas() != nil {
			checkDeltas(t, "Deltas", e.deltas().Items)
		}
		gen := h.m.gen
		if rng.IntN(20) == 0 {
			gen-- // stale
		}
		if rng.IntN(3) == 0 {
			h.clk.Step(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		switch h.m.State() {
		case StateListing:
			e = h.m.ListDone(gen, randomList(rng))
		case StateBackingOff:
			e = h.m.BackoffElapsed(gen)
		case StateWatching, StateWatchListing:
			switch rng.IntN(10) {
			case 0:
				e = h.m.WatchEnded(gen)
			case 1:
				errs := []error{syscall.ECONNREFUSED, apierrors.NewTooManyRequests("x", 1), apierrors.NewGone("x"), errors.New("x")}
				e = h.m.WatchFailed(gen, errs[rng.IntN(len(errs))])
			default:
				events := make([]watch.Event, 1+rng.IntN(6))
				for i := range events {
					events[i] = watch.Event{Type: eventTypes[rng.IntN(len(eventTypes))], Object: randomObject(rng)}
				}
				e = h.m.WatchEvents(gen, events, time.Time{})
			}
		default:
			t.Fatalf("unexpected state %v", h.m.State())
		}
		if n := btoi(e.List != nil) + btoi(e.Watch != nil) + btoi(e.Wait != nil); n > 1 {
			t.Fatalf("more than one next step: %s", describe(e))
		}
		if err := h.m.checkStateData(); err != nil {
			t.Fatalf("after %s: %v", describe(e), err)
		}
	}
}

// checkStateData checks the invariants of the state's data, and that the
// status reports a WatchList stream waiting exactly while one is.
func (m *Machine) checkStateData() error {
	_, streaming := m.state.(*watchListing)
	if st := m.sync.status; st.AwaitingInitialEventsEnd != streaming || st.AwaitingSince.IsZero() == streaming {
		return fmt.Errorf("state %v, status awaiting %v since %v", m.State(), st.AwaitingInitialEventsEnd, st.AwaitingSince)
	}
	switch st := m.state.(type) {
	case *listing:
		if st.page < 0 {
			return fmt.Errorf("list page size %d", st.page)
		}
	case *watchListing:
		if st.index == nil || len(st.index)+st.holes != len(st.items) {
			return fmt.Errorf("watch-list: %d items, %d keys, %d holes", len(st.items), len(st.index), st.holes)
		}
		if (st.span != nil) != m.s.tracing {
			return fmt.Errorf("watch-list span %v with tracing %v", st.span, m.s.tracing)
		}
	case *backingOff:
		if st.next > stepWatchList {
			return fmt.Errorf("backoff leads to step %d", st.next)
		}
	case *watching, idle, stopped:
	default:
		return fmt.Errorf("state %T", st)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestMachineRandomMalformedStreams(t *testing.T) {
	for seed := range uint64(200) {
		driveRandom(t, seed, 300)
	}
}

func FuzzMachine(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { driveRandom(t, seed, 200) })
}
