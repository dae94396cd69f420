package listener

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/stage"
)

// pathLog is a Path that records what the core asks of it.
type pathLog struct {
	inactive bool
	calls    []string
	done     int64
	initial  int64
	flushes  int
	batch    bool
}

func (p *pathLog) Active() bool { return !p.inactive }
func (p *pathLog) Call(it *indexer.Notification) {
	s := it.Type.String() + " " + it.Key()
	if it.Type == indexer.NotifyUpdate {
		s += fmt.Sprintf(" %s->%s", rvOf(it.Old), rvOf(it.New))
	} else {
		s += " " + rvOf(it.New)
	}
	if it.InitialList {
		s += " initial"
	}
	p.calls = append(p.calls, s)
}
func (p *pathLog) Progress(done, initial int64) {
	p.done += done
	p.initial += initial
	p.flushes++
}
func (p *pathLog) InitialBatchDone() { p.batch = true }

func rvOf(obj any) string {
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.UID == "uid-a'" {
			return o.ResourceVersion + "'"
		}
		return o.ResourceVersion
	case cache.DeletedFinalStateUnknown:
		return "tomb(" + rvOf(o.Obj) + ")"
	case nil:
		return "nil"
	}
	return fmt.Sprintf("%T", obj)
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv, UID: types.UID("uid-" + name)}}
}

func TestListenerCoreNotifications(t *testing.T) {
	a1, a2 := pod("a", "1"), pod("a", "2")
	b1 := pod("b", "1")
	for _, tc := range []struct {
		name     string
		n        indexer.Notifications
		inactive bool
		want     []string
		initial  int64
		batch    bool
	}{{
		name: "calls in order",
		n: indexer.Notifications{Items: []indexer.Notification{
			{Type: indexer.NotifyAdd, New: a1, InitialList: true},
			{Type: indexer.NotifyUpdate, Old: a1, New: a2},
			{Type: indexer.NotifyDelete, New: b1},
		}},
		want:    []string{"add ns/a 1 initial", "update ns/a 1->2", "delete ns/b 1"},
		initial: 1,
	}, {
		name: "sync only when the batch syncs to this listener",
		n: indexer.Notifications{Syncing: []indexer.ListenerID{9}, Items: []indexer.Notification{
			{Type: indexer.NotifyUpdate, Old: a1, New: a1, Sync: true},
			{Type: indexer.NotifyUpdate, Old: a1, New: a2},
		}},
		want: []string{"update ns/a 1->2"},
	}, {
		name: "sync to this listener",
		n: indexer.Notifications{Syncing: []indexer.ListenerID{9, 7}, Items: []indexer.Notification{
			{Type: indexer.NotifyUpdate, Old: a1, New: a1, Sync: true},
		}},
		want: []string{"update ns/a 1->1"},
	}, {
		name:     "nothing once inactive, still counted",
		inactive: true,
		n: indexer.Notifications{Initial: true, Items: []indexer.Notification{
			{Type: indexer.NotifyAdd, New: a1, InitialList: true},
		}},
		initial: 1,
		batch:   true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Core{ID: 7}
			p := &pathLog{inactive: tc.inactive}
			if msgs := c.Notifications(&tc.n, p); msgs != nil {
				t.Errorf("sent %v; want nothing", msgs)
			}
			if !reflect.DeepEqual(p.calls, tc.want) {
				t.Errorf("calls %q; want %q", p.calls, tc.want)
			}
			if p.done != int64(len(tc.n.Items)) || p.initial != tc.initial || p.batch != tc.batch {
				t.Errorf("done %d initial %d batch %v; want %d %d %v", p.done, p.initial, p.batch, len(tc.n.Items), tc.initial, tc.batch)
			}
		})
	}
}

func TestListenerCoreOwnedBatchIsCleared(t *testing.T) {
	c := &Core{ID: 1}
	items := make([]indexer.Notification, 2*CounterFlush+3)
	for i := range items {
		items[i] = indexer.Notification{Type: indexer.NotifyAdd, New: pod(fmt.Sprint("p", i), "1")}
	}
	p := &pathLog{}
	c.Notifications(&indexer.Notifications{Items: items, Owned: true}, p)
	if len(p.calls) != len(items) || p.done != int64(len(items)) {
		t.Fatalf("%d calls, %d done; want %d", len(p.calls), p.done, len(items))
	}
	if p.flushes != 3 {
		t.Errorf("%d counter flushes; want 3 (every %d and the rest)", p.flushes, CounterFlush)
	}
	for i := range items {
		if items[i].New != nil {
			t.Fatalf("item %d not cleared", i)
		}
	}
}

func TestListenerCoreDrainMarker(t *testing.T) {
	c := &Core{ID: 5}
	msgs := c.DrainMarker()
	want := []stage.Msg{{To: stage.ToIndexer, Mode: stage.Send, Body: &indexer.Drained{ID: 5}}}
	if !reflect.DeepEqual(msgs, want) {
		t.Fatalf("DrainMarker sent %+v; want %+v", msgs, want)
	}
}
