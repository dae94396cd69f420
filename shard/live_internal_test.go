package shard

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A range's watch is live once it has handed on its first event, not
// before (the core asks for a range another member delivers once it is).
func TestRangeWatchIsLiveAfterItsFirstEvent(t *testing.T) {
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
	if lw.isLive() {
		t.Fatal("live before the watch sent anything")
	}
	go fw.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "11"}})
	<-w.ResultChan()
	if !lw.isLive() {
		t.Fatal("not live after the watch's first event")
	}
}

// A started range reports RangeSynced once its informer has synced,
// saying whether its watch has sent anything, and RangeLive at the
// watch's first event; its switches do not wait for it.
func TestSyncedRangeReportsItsWatchsFirstEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newEffectRig(t, time.Hour)
		rig.io.rangeEffect(&handover.StartRange{Range: 0, Epoch: 1})
		if in, ok := (<-rig.reports).(*handover.RangeSynced); !ok || in.Live || in.Epoch != 1 {
			t.Fatalf("report %+v, want RangeSynced of epoch 1, not live", in)
		}
		w := <-rig.watches
		synctest.Wait()
		select {
		case in := <-rig.lives:
			t.Fatalf("%+v before the watch sent anything", in)
		default:
		}
		// The activation does not wait for the watch.
		rig.io.rangeEffect(&handover.ActivateRange{Range: 0, Epoch: 1, Token: 9})
		if in := <-rig.reports; in != nil {
			t.Fatalf("report %T, want the activation's", in)
		}
		w.Add(cmAt("a", "ua", "11"))
		if in := <-rig.lives; in.Range != 0 || in.Epoch != 1 {
			t.Fatalf("report %+v, want RangeLive of range 0, epoch 1", in)
		}
		synctest.Wait()
		select {
		case in := <-rig.lives:
			t.Fatalf("a second %+v", in)
		default:
		}
		rig.stop()
		time.Sleep(time.Minute) // the actor system's dead-letter throttle
	})
}
