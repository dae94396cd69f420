package actors

import (
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestListenerCallPath: the handler call path makes a batch's calls in
// order, a Sync notification only when the batch syncs to the handler,
// none once the handler is removed (still counted), lets go of an owned
// batch's objects, and counts every listener.CounterFlush notifications.
func TestListenerCallPath(t *testing.T) {
	obj := func(i int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("p", i), ResourceVersion: "1"}}
	}
	var calls []string
	h := plainHandler{h: cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { calls = append(calls, "add "+o.(*corev1.Pod).Name) },
		UpdateFunc: func(_, o any) { calls = append(calls, "update "+o.(*corev1.Pod).Name) },
	}}
	var halted atomic.Bool
	l := newListener(1, h, "h", 0, telemetry.Nop(), &halted)
	var synced int
	l.synced = func() { synced++ }

	l.counters.Pending.Add(1)
	l.backlog.N.Add(3)
	l.Call(&listener.Calls{InitialBatch: true, Items: []indexer.Notification{
		{Type: indexer.NotifyAdd, New: obj(0), InitialList: true},
		{Type: indexer.NotifyUpdate, Old: obj(0), New: obj(0), Sync: true},
		{Type: indexer.NotifyUpdate, Old: obj(0), New: obj(1)},
	}})
	if want := "[add p0 update p1]"; fmt.Sprint(calls) != want {
		t.Fatalf("calls %v, want %s", calls, want)
	}
	if l.backlog.N.Load() != 0 || l.counters.Pending.Load() != 0 || !l.counters.InitialDone.Load() || synced != 2 {
		t.Fatalf("backlog %d, pending %d, initial done %v, synced told %d times; want 0, 0, true, 2",
			l.backlog.N.Load(), l.counters.Pending.Load(), l.counters.InitialDone.Load(), synced)
	}

	calls = nil
	items := make([]indexer.Notification, 2*listener.CounterFlush+3)
	for i := range items {
		items[i] = indexer.Notification{Type: indexer.NotifyAdd, New: obj(i)}
	}
	var seen []int64
	backlog := &atomic.Int64{}
	l.counters.Backlog = backlog
	backlog.Add(int64(len(items)))
	l.handler = plainHandler{h: cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen = append(seen, backlog.Load()) }}}
	l.Call(&listener.Calls{Items: items, Owned: true})
	if len(seen) != len(items) || seen[listener.CounterFlush] != int64(len(items)-listener.CounterFlush) || backlog.Load() != 0 {
		t.Fatalf("%d calls; backlog after the first flush %d, at the end %d", len(seen), seen[listener.CounterFlush], backlog.Load())
	}
	for i := range items {
		if items[i].New != nil {
			t.Fatalf("owned item %d not cleared", i)
		}
	}

	l.removed.Store(true)
	seen = nil
	backlog.Add(1)
	l.Call(&listener.Calls{Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: obj(0)}}})
	if len(seen) != 0 || backlog.Load() != 0 {
		t.Fatalf("removed handler: %d calls, backlog %d; want none, 0", len(seen), backlog.Load())
	}
}
