package shard

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/asynkron/protoactor-go/actor"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
)

// eventually polls cond until it holds or 10 s have passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The keys of a released range are forgotten once WithReleasedKeyTTL has
// passed, also when no other range is released after it.
func TestReleasedKeysForgottenAfterTTL(t *testing.T) {
	s := &Informer{shared: &shared{o: options{releasedTTL: 20 * time.Millisecond}}, released: map[string]time.Time{}}
	s.rememberReleased([]string{"ns/a", "ns/b"})
	s.mu.Lock()
	n := len(s.released)
	s.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d keys remembered, want 2", n)
	}
	eventually(t, "the released keys are still remembered after their TTL", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.released) == 0
	})
}

// respondCtx is the actor.Context serveSnapshot answers on.
type respondCtx struct {
	actor.Context
	out []any
}

func (c *respondCtx) Respond(m any) { c.out = append(c.out, m) }

// A copy of a range's cache taken for an asker that never came back for
// its other chunks does not keep the copied objects alive: once the
// range's cache has let an object go, it is collected.
func TestAbandonedSnapshotLetsObjectsGo(t *testing.T) {
	defer func(d time.Duration) { snapshotTTL = d }(snapshotTTL)
	snapshotTTL = 50 * time.Millisecond

	n := snapshotChunk + 44 // two chunks
	watches := make(chan *watch.FakeWatcher, 8)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
			for i := range n {
				list.Items = append(list.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%d", i),
					UID: types.UID(fmt.Sprintf("uid-%d", i)), ResourceVersion: "10"}})
			}
			return list, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			watches <- w
			return w, nil
		},
	}
	inf := actors.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{}, actors.WithWatchList(false))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}

	ri := &rangeInformer{}
	ri.kinds = []*kindRange{{ri: ri, inf: inf}}
	ri.delivering.Store(true)
	io := &memberIO{inc: &incarnation{s: (&shared{}).newKind(nil, nil, "")}, ranges: map[int]*rangeInformer{0: ri},
		snapshots: map[snapshotKey]*snapshot{}, movedTo: map[int]handover.MemberID{}}
	rc := &respondCtx{}
	io.serveSnapshot(rc, &shardpb.SnapshotRequest{From: "asker", Range: 0, Epoch: 1, Chunk: 0})
	if len(rc.out) != 1 {
		t.Fatalf("answered %d times", len(rc.out))
	}
	if c := rc.out[0].(*shardpb.SnapshotChunk); c.Error != "" || c.Last || int(c.Total) != n {
		t.Fatalf("chunk 0: error %q, last %v, total %d", c.Error, c.Last, c.Total)
	}
	// The asker gives up. The object leaves the range's cache.
	item, ok, _ := inf.GetIndexer().GetByKey("ns/cm-0")
	if !ok {
		t.Fatal("ns/cm-0 not cached")
	}
	cm := item.(*corev1.ConfigMap)
	wp := weak.Make(cm)
	gone := cm.DeepCopy()
	gone.ResourceVersion = "11"
	item, cm = nil, nil
	(<-watches).Delete(gone)
	eventually(t, "ns/cm-0 still cached after its delete", func() bool {
		_, ok, _ := inf.GetIndexer().GetByKey("ns/cm-0")
		return !ok
	})
	eventually(t, "the deleted object is kept alive (by the abandoned copy)", func() bool {
		runtime.GC()
		return wp.Value() == nil
	})
	runtime.KeepAlive(io) // the member's I/O actor lives on
}
