package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
)

// heldHandler feeds a View, but once hold is closed its OnUpdate blocks
// until release is: entered is told when it first blocks.
type heldHandler struct {
	view    *informertest.View
	hold    chan struct{}
	release chan struct{}
	entered chan struct{}
}

func newHeldHandler() *heldHandler {
	return &heldHandler{view: informertest.NewView(), hold: make(chan struct{}), release: make(chan struct{}), entered: make(chan struct{}, 1)}
}

func (h *heldHandler) handler() cache.ResourceEventHandler {
	v := h.view.Handler()
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: v.AddFunc,
		UpdateFunc: func(old, obj any) {
			select {
			case <-h.hold:
				select {
				case h.entered <- struct{}{}:
				default:
				}
				<-h.release
			default:
			}
			v.UpdateFunc(old, obj)
		},
		DeleteFunc: v.DeleteFunc,
	}
}

func handlerStats(t *testing.T, inf *actors.SharedIndexInformer, name string) actors.HandlerStats {
	t.Helper()
	for _, h := range inf.Stats().Handlers {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("no handler %q in %+v", name, inf.Stats().Handlers)
	return actors.HandlerStats{}
}

// TestCoalescedHeldHandler holds two handlers of a running informer, one
// Coalesced and one not, while thousands of updates over a few keys flow.
// The plain handler's backlog grows with the updates; the Coalesced one's
// stays within the number of keys (plus the call it is stuck in). Released,
// both end with the source's content through a correct story, the
// Coalesced one in fewer calls.
// Real time: the handlers block real goroutines and the runner is a child
// actor (the merge rules on every interleaving: listener/coalesce_test.go,
// internal/sim).
func TestCoalescedHeldHandler(t *testing.T) {
	const keys, updates = 20, 3000
	src, lw := newSource(t)
	for i := 0; i < keys; i++ {
		src.Add(pod("ns", fmt.Sprintf("p%02d", i), 0))
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{}, actors.WithWatchList(false))
	co, plain := newHeldHandler(), newHeldHandler()
	coReg, err := inf.AddEventHandler(actors.NamedHandler("coalesced", actors.Coalesced(co.handler())))
	if err != nil {
		t.Fatal(err)
	}
	plainReg, err := inf.AddEventHandler(actors.NamedHandler("plain", plain.handler()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	defer stop()
	waitSynced(t, ctx, coReg.HasSynced, plainReg.HasSynced)

	close(co.hold)
	close(plain.hold)
	released := false
	release := func() {
		if !released {
			released = true
			close(co.release)
			close(plain.release)
		}
	}
	defer release()
	src.Modify(pod("ns", "p00", 1))
	<-co.entered
	<-plain.entered
	var maxSeen int64
	for i := 0; i < updates; i++ {
		src.Modify(pod("ns", fmt.Sprintf("p%02d", i%keys), i+2))
		if i%100 == 0 {
			maxSeen = max(maxSeen, handlerStats(t, inf, "coalesced").Backlog)
		}
	}
	want := sourceSnapshot(t, lw)
	eventually(t, 30*time.Second, "the cache holds every update", func() string {
		return informertest.Diff(want, informertest.StoreSnapshot(inf.GetStore()))
	})
	// The indexer has sent everything: the plain listener holds it all,
	// the coalesced one at most a notification per key and the one its
	// handler is stuck in, once it has taken in its mailbox.
	eventually(t, 30*time.Second, "the coalesced listener takes in its mailbox", func() string {
		if b := handlerStats(t, inf, "coalesced").Backlog; b > keys+1 {
			return fmt.Sprintf("backlog %d > %d keys + 1", b, keys)
		}
		return ""
	})
	if b := handlerStats(t, inf, "plain").Backlog; b < updates {
		t.Errorf("plain handler's backlog %d; want at least the %d updates (else this test shows nothing)", b, updates)
	}
	t.Logf("coalesced backlog: %d at the end, at most %d sampled while updates flowed; plain: %d",
		handlerStats(t, inf, "coalesced").Backlog, maxSeen, handlerStats(t, inf, "plain").Backlog)

	release()
	for _, h := range []*heldHandler{co, plain} {
		eventually(t, 30*time.Second, "the handler converges", func() string {
			return informertest.Diff(want, h.view.Snapshot())
		})
		if errs := h.view.Errors(); len(errs) > 0 {
			t.Errorf("story broken: %q", errs)
		}
	}
	eventually(t, 30*time.Second, "the backlogs empty", func() string {
		for _, h := range inf.Stats().Handlers {
			if h.Backlog != 0 {
				return fmt.Sprintf("%s: backlog %d", h.Name, h.Backlog)
			}
		}
		return ""
	})
	cu, pu := co.view.Counts().Updates, plain.view.Counts().Updates
	if pu != updates+1 || cu >= pu {
		t.Errorf("updates seen: coalesced %d, plain %d; want plain %d and coalesced fewer", cu, pu, updates+1)
	}
}

// TestCoalescedWithClientGo: client-go's informer takes a Coalesced
// handler as the handler it wraps (every notification delivered).
// Real time: it runs client-go's informer, which takes no clock.
func TestCoalescedWithClientGo(t *testing.T) {
	src, lw := newSource(t)
	for i := 0; i < 5; i++ {
		src.Add(pod("ns", fmt.Sprintf("p%d", i), 0))
	}
	ref := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	view := informertest.NewView()
	reg, err := ref.AddEventHandler(actors.Coalesced(view.Handler()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, ref)
	defer stop()
	waitSynced(t, ctx, reg.HasSynced)
	for i := 0; i < 50; i++ {
		src.Modify(pod("ns", fmt.Sprintf("p%d", i%5), i+1))
	}
	src.Delete(pod("ns", "p0", 0))
	want := sourceSnapshot(t, lw)
	eventually(t, 30*time.Second, "the handler converges", func() string {
		if d := informertest.Diff(want, view.Snapshot()); d != "" {
			return d
		}
		if c := view.Counts(); c.Updates != 50 || c.Deletes != 1 || c.Initial != 5 {
			return "counts " + c.String()
		}
		return ""
	})
	if errs := view.Errors(); len(errs) > 0 {
		t.Errorf("story broken: %q", errs)
	}
}

// TestCoalescedContextHandler: a CoalescedContext handler keeps its name
// and gets the final state through our informer.
// Real time: the informer's API (CoalescedContext, NamedContextHandler,
// Stats) on a real actor system.
func TestCoalescedContextHandler(t *testing.T) {
	src, lw := newSource(t)
	src.Add(pod("ns", "a", 0))
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{}, actors.WithWatchList(false))
	view := informertest.NewView()
	v := view.Handler()
	h := actors.NamedContextHandler("ctx", actors.CoalescedContext(actors.ContextEventHandlerFuncs{
		AddFunc:    func(_ context.Context, obj any, initial bool) { v.AddFunc(obj, initial) },
		UpdateFunc: func(_ context.Context, old, obj any) { v.UpdateFunc(old, obj) },
		DeleteFunc: func(_ context.Context, obj any) { v.DeleteFunc(obj) },
	}))
	reg, err := inf.AddContextEventHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	defer stop()
	waitSynced(t, ctx, reg.HasSynced)
	for i := 1; i <= 20; i++ {
		src.Modify(pod("ns", "a", i))
	}
	src.Add(pod("ns", "b", 0))
	src.Delete(pod("ns", "a", 0))
	want := sourceSnapshot(t, lw)
	eventually(t, 30*time.Second, "the handler converges", func() string {
		return informertest.Diff(want, view.Snapshot())
	})
	if errs := view.Errors(); len(errs) > 0 {
		t.Errorf("story broken: %q", errs)
	}
	if s := handlerStats(t, inf, "ctx"); s.Panics != 0 {
		t.Errorf("stats %+v", s)
	}
}
