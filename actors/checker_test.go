package actors_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not done within 20s", what)
	}
}

// TestHasSyncedCheckersFollowTheSync takes the informer's and a
// registration's DoneCheckers before Run and checks that each closes when,
// and only when, its HasSynced turns true: the informer's once the first
// list is in the cache, the registration's once its handler has had the
// list too (it is held back here).
func TestHasSyncedCheckersFollowTheSync(t *testing.T) {
	src, lw := newSource(t)
	for i := range 20 {
		src.Add(pod("ns", "p"+strconv.Itoa(i), 0))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false))
	gate := make(chan struct{})
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { <-gate }})
	if err != nil {
		t.Fatal(err)
	}
	infDone, regDone := inf.HasSyncedChecker().Done(), reg.HasSyncedChecker().Done()
	if closed(infDone) || closed(regDone) {
		t.Fatal("checkers done before Run")
	}
	ctx, _ := running(t, inf)
	waitClosed(t, "informer checker", infDone)
	if !inf.HasSynced() {
		t.Fatal("informer checker done before HasSynced")
	}
	if closed(regDone) || reg.HasSynced() {
		t.Fatal("registration done while its handler is held")
	}
	close(gate)
	waitClosed(t, "registration checker", regDone)
	if !reg.HasSynced() {
		t.Fatal("registration checker done before HasSynced")
	}

	// A handler added after the sync: its checker closes once it has had
	// the cache's objects.
	var adds atomic.Int64
	late, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { adds.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "late registration checker", late.HasSyncedChecker().Done())
	waitSynced(t, ctx, late.HasSynced)
	if n := adds.Load(); n != 20 {
		t.Fatalf("late handler had %d adds when its checker closed, want 20", n)
	}
}

// TestHasSyncedCheckerWithoutRun checks that a DoneChecker of an informer
// that never runs starts nothing that outlives it (it used to poll in a
// goroutine that only the informer's stop ended).
func TestHasSyncedCheckerWithoutRun(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options(goleak.IgnoreCurrent())...)
	_, lw := newSource()
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{})
	if err != nil {
		t.Fatal(err)
	}
	if closed(inf.HasSyncedChecker().Done()) || closed(reg.HasSyncedChecker().Done()) {
		t.Fatal("checkers of an informer that never ran are done")
	}
}
