package shard

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A range is asked for once its watch has sent something: awaitLive waits
// for the watch's first event, not only for the informer's sync.
func TestAwaitLiveWaitsForTheWatchsFirstEvent(t *testing.T) {
	fw := watch.NewFake()
	lw := newRangeLW(&cache.ListWatch{
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.PodList{}, nil
		},
	}, Range{Index: 0, Count: 1}, &filter{field: UID, log: slog.New(slog.DiscardHandler)})
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	done := make(chan bool, 1)
	go func() { done <- lw.awaitLive(nil, time.Hour) }()
	select {
	case <-done:
		t.Fatal("awaitLive returned before the watch sent anything")
	case <-time.After(50 * time.Millisecond):
	}
	go fw.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "11"}})
	<-w.ResultChan()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("awaitLive after the first event: false, want true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("awaitLive did not return after the watch's first event")
	}
	if !lw.awaitLive(nil, time.Hour) {
		t.Fatal("awaitLive once live: false, want true")
	}
}

// Without an event, awaitLive gives up after its wait (true: ask anyway),
// and a stop ends it with false.
func TestAwaitLiveEnds(t *testing.T) {
	lw := newRangeLW(&cache.ListWatch{}, Range{Index: 0, Count: 1}, &filter{field: UID, log: slog.New(slog.DiscardHandler)})
	if !lw.awaitLive(nil, time.Millisecond) {
		t.Fatal("awaitLive after its wait: false, want true")
	}
	stop := make(chan struct{})
	close(stop)
	if lw.awaitLive(stop, time.Hour) {
		t.Fatal("awaitLive stopped: true, want false")
	}
}

// A synced range is asked for at once when nobody delivers it, and only
// once its watch has sent something when another member does.
func TestAskWhenReady(t *testing.T) {
	newLW := func() *rangeLW {
		return newRangeLW(&cache.ListWatch{}, Range{Index: 0, Count: 1}, &filter{field: UID, log: slog.New(slog.DiscardHandler)})
	}
	run := func(from handover.MemberID, lw *rangeLW, synced, done chan struct{}) (asked, returned chan struct{}) {
		asked, returned = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(returned)
			askWhenReady(synced, done, from, lw, time.Hour, func() { close(asked) })
		}()
		return asked, returned
	}
	wait := func(c chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	notYet := func(c chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
			t.Fatal(what)
		case <-time.After(50 * time.Millisecond):
		}
	}

	t.Run("nobody delivers it", func(t *testing.T) {
		synced := make(chan struct{})
		asked, _ := run("", newLW(), synced, make(chan struct{}))
		notYet(asked, "asked before the informer synced")
		close(synced)
		wait(asked, "not asked once synced, with no deliverer to wait for")
	})
	t.Run("another member delivers it", func(t *testing.T) {
		synced, lw := make(chan struct{}), newLW()
		asked, _ := run("n1", lw, synced, make(chan struct{}))
		close(synced)
		notYet(asked, "asked before the range's watch sent anything")
		lw.markLive()
		wait(asked, "not asked once the watch sent something")
	})
	t.Run("stopped while it waits for its watch", func(t *testing.T) {
		synced, done := make(chan struct{}), make(chan struct{})
		asked, returned := run("n1", newLW(), synced, done)
		close(synced)
		notYet(asked, "asked before the range's watch sent anything")
		close(done)
		wait(returned, "still waiting after the range stopped")
		notYet(asked, "asked for a range that stopped")
	})
}
