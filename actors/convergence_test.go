package actors_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
)

// TestConvergenceWithClientGo drives thousands of random adds, updates and
// deletes — some with their watch event dropped, some followed by forced
// relists — through a FakeControllerSource watched by our informer and by
// client-go's, each with a handler registered before start and one added
// mid-stream. Afterwards both caches and every handler's view must equal the
// source.
// Real time: side by side with client-go's informer, which takes no clock
// (ours alone on every interleaving: internal/sim's random seeds).
func TestConvergenceWithClientGo(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runConvergence(t, seed, 3000) })
	}
}

func runConvergence(t *testing.T, seed int64, ops int) {
	src, lw := newSource(t)
	ctx, cancel := context.WithCancel(context.Background())

	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	ours := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, indexers, actors.WithWatchList(false))
	ref := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, indexers)

	// client-go hands on deletes of objects whose add a dropped watch
	// event hid from it; ours drops them (see informertest.LenientDeletes).
	oursEarly, refEarly := informertest.NewView(), informertest.NewView().LenientDeletes()
	oursLate, refLate := informertest.NewView(), informertest.NewView().LenientDeletes()
	if _, err := ours.AddEventHandler(oursEarly.Handler()); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.AddEventHandler(refEarly.Handler()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { ours.RunWithContext(ctx); done <- struct{}{} }()
	go func() { ref.RunWithContext(ctx); done <- struct{}{} }()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	waitSynced(t, ctx, ours.HasSynced, ref.HasSynced)

	rng := rand.New(rand.NewSource(seed))
	live := map[string]*corev1.Pod{}
	names := make([]string, 0, 400)
	for i := 0; i < 400; i++ {
		names = append(names, fmt.Sprintf("p%03d", i))
	}
	gen := 0
	for i := 0; i < ops; i++ {
		gen++
		ns := fmt.Sprintf("ns%d", rng.Intn(4))
		name := names[rng.Intn(len(names))]
		k := ns + "/" + name
		cur, exists := live[k]
		drop := rng.Intn(20) == 0
		switch {
		case !exists:
			p := pod(ns, name, gen)
			live[k] = p
			if drop {
				src.AddDropWatch(p)
			} else {
				src.Add(p)
			}
		case rng.Intn(4) == 0:
			delete(live, k)
			last := cur.DeepCopy()
			if drop {
				src.DeleteDropWatch(last)
			} else {
				src.Delete(last)
			}
		default:
			p := cur.DeepCopy()
			p.Labels["gen"] = fmt.Sprint(gen)
			live[k] = p
			if drop {
				src.ModifyDropWatch(p)
			} else {
				src.Modify(p)
			}
		}
		if i == ops/3 {
			if _, err := ours.AddEventHandler(oursLate.Handler()); err != nil {
				t.Fatal(err)
			}
			if _, err := ref.AddEventHandler(refLate.Handler()); err != nil {
				t.Fatal(err)
			}
		}
		if i > 0 && i%700 == 0 {
			src.ResetWatch() // forces a relist: 410 on re-watch
		}
	}
	// A last relist repairs what dropped watch events hid from both.
	src.ResetWatch()

	want := sourceSnapshot(t, lw)
	eventually(t, 60*time.Second, "convergence", func() string {
		for name, got := range map[string]map[string]string{
			"our cache":               informertest.StoreSnapshot(ours.GetStore()),
			"client-go cache":         informertest.StoreSnapshot(ref.GetStore()),
			"our early handler":       oursEarly.Snapshot(),
			"our late handler":        oursLate.Snapshot(),
			"client-go early handler": refEarly.Snapshot(),
			"client-go late handler":  refLate.Snapshot(),
		} {
			if d := informertest.Diff(want, got); d != "" {
				return name + ": " + d
			}
		}
		return ""
	})
	for name, v := range map[string]*informertest.View{"our early": oursEarly, "our late": oursLate, "client-go early": refEarly, "client-go late": refLate} {
		if errs := v.Errors(); len(errs) > 0 {
			t.Errorf("%s handler saw inconsistent events: %v", name, errs[:min(5, len(errs))])
		}
	}
	if oursLate.Counts().Initial == 0 {
		t.Errorf("late handler got no initial-list adds")
	}
	t.Logf("source %d objects; our early handler: %v; client-go's: %v", len(want), oursEarly.Counts(), refEarly.Counts())
}
