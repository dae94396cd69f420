package actors

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

// registered counts the processes in sys's registry (actors, plus the event
// stream protoactor registers).
func registered(sys *actor.ActorSystem) int {
	n := 0
	for _, bucket := range sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		n += bucket.Count()
	}
	return n
}

// TestSharedActorSystem: informers and factories given neither an actor
// system nor a logger run in one process-wide system; one with a logger gets
// its own, shut down when it stops; one given a system uses it and leaves it
// running. Once the informers stop, the process-wide system holds no actor
// and no goroutine is left.
func TestSharedActorSystem(t *testing.T) {
	shared := sharedSystem()
	idle := registered(shared)
	given := newActorSystem(slog.New(slog.DiscardHandler))
	defer given.Shutdown()

	src := fcache.NewFakeControllerSource()
	defer src.Shutdown()
	src.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}})
	lw := &cache.ListWatch{
		ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { return src.List(o) },
		WatchFunc: src.Watch,
	}
	infs := map[string]*SharedIndexInformer{}
	for _, name := range []string{"a", "b", "logger", "given"} {
		opts := []Option{WithWatchList(false)}
		switch name {
		case "logger":
			opts = append(opts, WithLogger(slog.New(slog.DiscardHandler)))
		case "given":
			opts = append(opts, WithActorSystem(given))
		}
		infs[name] = NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, opts...)
		if _, err := infs[name].AddEventHandler(cache.ResourceEventHandlerFuncs{}); err != nil {
			t.Fatal(err)
		}
	}
	f := NewFactory(nil, 0)
	if f.ActorSystem() != shared {
		t.Fatal("a factory without options did not get the process-wide system")
	}
	fl := NewFactory(nil, 0, WithLogger(slog.New(slog.DiscardHandler)))
	if fl.ActorSystem() == shared {
		t.Fatal("a factory with a logger got the process-wide system")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(infs))
	for _, inf := range infs {
		go func() { inf.RunWithContext(ctx); done <- struct{}{} }()
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for name, inf := range infs {
		if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
			t.Fatalf("%s did not sync", name)
		}
	}
	sysOf := func(inf *SharedIndexInformer) *actor.ActorSystem {
		inf.mu.Lock()
		defer inf.mu.Unlock()
		return inf.sys
	}
	own := sysOf(infs["logger"])
	switch {
	case sysOf(infs["a"]) != shared || sysOf(infs["b"]) != shared:
		t.Fatal("informers without options do not run in the process-wide system")
	case own == shared || own == given || own == nil:
		t.Fatal("the informer with a logger does not run in a system of its own")
	case sysOf(infs["given"]) != given:
		t.Fatal("the informer given a system does not run in it")
	}
	// Each informer has a supervisor, reflector, queue, indexer and a
	// listener.
	if n := registered(shared) - idle; n != 10 {
		t.Fatalf("%d actors in the process-wide system while two informers run, want 10", n)
	}

	cancel()
	for range infs {
		<-done
	}
	fl.Shutdown()
	f.Shutdown()
	if n := registered(shared) - idle; n != 0 {
		t.Fatalf("%d actors left in the process-wide system after its informers stopped", n)
	}
	if !own.IsStopped() || !fl.ActorSystem().IsStopped() {
		t.Fatal("a system created for an informer or a factory was not shut down when it stopped")
	}
	if shared.IsStopped() || given.IsStopped() {
		t.Fatal("the process-wide or the given system was shut down")
	}
	goleak.VerifyNone(t, leakcheck.Options()...)
}
