package shard

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// wrapForRange wraps h for range ri as attach does.
func wrapForRange(t *testing.T, h any, ri *rangeInformer) actors.ContextEventHandler {
	t.Helper()
	s := &Informer{shared: &shared{clock0: time.Now()}}
	s.validUntil.Store(int64(time.Hour))
	reg := &registration{s: s, h: h}
	wrapped, err := actors.WrapHandler(h, func(inner actors.ContextEventHandler) actors.ContextEventHandler {
		return newRangeHandler(reg, &kindRange{ri: ri, k: s}, inner)
	})
	if err != nil {
		t.Fatal(err)
	}
	return wrapped
}

// A ContextEventHandler's calls carry the range's claim; a
// cache.ResourceEventHandler never sees a context, and its calls allocate
// nothing for one: at 20,000 pods and 5,000 updates, a context and a boxed
// claim a call had cost three members 1.8 MB together.
func TestRangeHandlerClaimContext(t *testing.T) {
	ri := &rangeInformer{r: Range{Index: 3, Count: 16}, token: 42}
	ri.delivering.Store(true)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: "7"}}
	ctx := context.Background()

	var got Claim
	var found bool
	withCtx := wrapForRange(t, actors.ContextEventHandlerFuncs{AddFunc: func(ctx context.Context, _ any, _ bool) {
		got, found = ClaimFrom(ctx)
	}}, ri)
	withCtx.OnAdd(ctx, pod, false)
	if want := (Claim{Range: ri.r, Epoch: 42}); !found || got != want {
		t.Fatalf("ClaimFrom in a ContextEventHandler's call: %+v, %v; want %+v", got, found, want)
	}
	// The context carrying the claim, and nothing else.
	if a := testing.AllocsPerRun(100, func() { withCtx.OnAdd(ctx, pod, false) }); a != 1 {
		t.Errorf("a ContextEventHandler's call allocated %v times, want 1 (its context)", a)
	}

	calls := 0
	plain := wrapForRange(t, cache.ResourceEventHandlerFuncs{AddFunc: func(any) { calls++ }, UpdateFunc: func(any, any) { calls++ }}, ri)
	plain.OnAdd(ctx, pod, true)
	plain.OnUpdate(ctx, pod, pod)
	if calls != 2 {
		t.Fatalf("the plain handler was called %d times, want 2", calls)
	}
	if a := testing.AllocsPerRun(100, func() {
		plain.OnAdd(ctx, pod, false)
		plain.OnUpdate(ctx, pod, pod)
	}); a != 0 {
		t.Errorf("a cache.ResourceEventHandler's calls allocated %v times, want 0", a)
	}
}
