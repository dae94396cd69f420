package listener

import (
	"context"
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

// pathLog is a listener's handler, called through the real call path
// (Handler) over the core's counters: it records the calls, or hands them
// to h.
type pathLog struct {
	calls []string
	h     cache.ResourceEventHandler
	ctr   *Counters
	path  *Handler
}

// newCore returns a core counting in the pathLog's counters.
func newCore(id indexer.ListenerID, coalesce bool) (*Core, *pathLog) {
	p := &pathLog{ctr: &Counters{Sent: &indexer.Sent{}}}
	p.path = NewHandler(HandlerConfig{Handler: p, Counters: p.ctr})
	return NewCore(Config{ID: id, Coalesce: coalesce, Counters: p.ctr}), p
}

// done is how many notifications were done (delivered, skipped, merged);
// initial how many initial-list ones.
func (p *pathLog) done() int64    { return p.ctr.Delivered.Load() }
func (p *pathLog) initial() int64 { return p.ctr.DeliveredInitial.Load() }

// run makes the calls c asks for, as the listener's Env does.
func (p *pathLog) run(c *Calls) { p.path.Call(c) }

func (p *pathLog) OnAdd(_ context.Context, obj any, initial bool) {
	p.call(&indexer.Notification{Type: indexer.NotifyAdd, New: obj, InitialList: initial})
}
func (p *pathLog) OnUpdate(_ context.Context, old, obj any) {
	p.call(&indexer.Notification{Type: indexer.NotifyUpdate, Old: old, New: obj})
}
func (p *pathLog) OnDelete(_ context.Context, obj any) {
	p.call(&indexer.Notification{Type: indexer.NotifyDelete, New: obj})
}

func (p *pathLog) call(it *indexer.Notification) {
	if p.h != nil {
		switch it.Type {
		case indexer.NotifyAdd:
			p.h.OnAdd(it.New, it.InitialList)
		case indexer.NotifyUpdate:
			p.h.OnUpdate(it.Old, it.New)
		case indexer.NotifyDelete:
			p.h.OnDelete(it.New)
		}
		return
	}
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

// handlerCalls returns the Calls of msgs to listener id's handler.
func handlerCalls(t *testing.T, id indexer.ListenerID, msgs []stage.Msg) []*Calls {
	t.Helper()
	var out []*Calls
	for _, m := range msgs {
		if m.To == stage.ToInformer {
			continue
		}
		c, ok := m.Body.(*Calls)
		if !ok || m.To != stage.ToHandler(uint64(id)) || m.Mode != stage.Send {
			t.Fatalf("sent %T to %v (%v); want Calls to handler %d", m.Body, m.To, m.Mode, id)
		}
		out = append(out, c)
	}
	return out
}

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
		name    string
		n       *indexer.Notifications
		want    []string
		initial int64
		syncs   bool
	}{{
		name: "calls in order",
		n: &indexer.Notifications{Items: []indexer.Notification{
			{Type: indexer.NotifyAdd, New: a1, InitialList: true},
			{Type: indexer.NotifyUpdate, Old: a1, New: a2},
			{Type: indexer.NotifyDelete, New: b1},
		}},
		want:    []string{"add ns/a 1 initial", "update ns/a 1->2", "delete ns/b 1"},
		initial: 1,
	}, {
		name: "sync only when the batch syncs to this listener",
		n: &indexer.Notifications{Syncing: []indexer.ListenerID{9}, Items: []indexer.Notification{
			{Type: indexer.NotifyUpdate, Old: a1, New: a1, Sync: true},
			{Type: indexer.NotifyUpdate, Old: a1, New: a2},
		}},
		want: []string{"update ns/a 1->2"},
	}, {
		name: "sync to this listener",
		n: &indexer.Notifications{Syncing: []indexer.ListenerID{9, 7}, Items: []indexer.Notification{
			{Type: indexer.NotifyUpdate, Old: a1, New: a1, Sync: true},
		}},
		want:  []string{"update ns/a 1->1"},
		syncs: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := newCore(7, false)
			calls := handlerCalls(t, 7, c.Step(tc.n))
			if len(calls) != 1 || calls[0].Syncs != tc.syncs || &calls[0].Items[0] != &tc.n.Items[0] {
				t.Fatalf("sent %+v; want one Calls viewing the batch, Syncs %v", calls, tc.syncs)
			}
			p.run(calls[0])
			if !reflect.DeepEqual(p.calls, tc.want) {
				t.Errorf("calls %q; want %q", p.calls, tc.want)
			}
			if p.done() != int64(len(tc.n.Items)) || p.initial() != tc.initial {
				t.Errorf("done %d initial %d; want %d %d", p.done(), p.initial(), len(tc.n.Items), tc.initial)
			}
		})
	}
}

// TestListenerCoreCallsView: the Calls of a listener that does not
// coalesce is one value reused for every batch (its calls are made before
// the next Step), carrying the batch's flags.
func TestListenerCoreCallsView(t *testing.T) {
	c, _ := newCore(1, false)
	first := handlerCalls(t, 1, c.Step(&indexer.Notifications{Initial: true, Owned: true, Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: pod("a", "1")}}}))
	if len(first) != 1 || !first[0].InitialBatch || !first[0].Owned {
		t.Fatalf("initial batch: %+v", first)
	}
	second := handlerCalls(t, 1, c.Step(&indexer.Notifications{Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: pod("b", "1")}}}))
	if len(second) != 1 || second[0] != first[0] || second[0].InitialBatch || second[0].Owned {
		t.Fatalf("second batch: %+v, want the same value, flags reset", second)
	}
	n := &indexer.Notifications{Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: pod("c", "1")}}}
	if allocs := testing.AllocsPerRun(100, func() { c.Step(n) }); allocs != 0 {
		t.Errorf("%v allocations per batch", allocs)
	}
}

func TestListenerCoreDrainMarker(t *testing.T) {
	c, _ := newCore(5, false)
	msgs := c.Step(&indexer.DrainMarker{})
	want := []stage.Msg{{To: stage.ToIndexer, Mode: stage.Send, Body: &indexer.Drained{ID: 5}}}
	if !reflect.DeepEqual(msgs, want) {
		t.Fatalf("DrainMarker sent %+v; want %+v", msgs, want)
	}
}
