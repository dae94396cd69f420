package indexer

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
)

func pod(ns, name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
}

func podIP(ns, name, rv, ip string) *corev1.Pod {
	p := pod(ns, name, rv)
	p.Status.PodIP = ip
	return p
}

func key(obj any) string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		panic(err)
	}
	return k
}

func delta(t fifo.DeltaType, obj any) fifo.Delta {
	return fifo.Delta{Type: t, Key: key(obj), Object: obj}
}

func tombstone(obj any) cache.DeletedFinalStateUnknown {
	return cache.DeletedFinalStateUnknown{Key: key(obj), Obj: obj}
}

// labelValues is a multi-value index: one value per label, "k=v".
func labelValues(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	vals := make([]string, 0, len(p.Labels))
	for k, v := range p.Labels {
		vals = append(vals, k+"="+v)
	}
	return vals, nil
}

func podIPIndex(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	if p.Status.PodIP == "" {
		return nil, nil
	}
	return []string{p.Status.PodIP}, nil
}

// describe renders objects as sorted "key@rv#ptr" strings, so that two
// results compare equal only when they hold the very same objects.
func describe(objs []any) string {
	out := make([]string, len(objs))
	for i, o := range objs {
		rv := ""
		if p, ok := o.(*corev1.Pod); ok {
			rv = p.ResourceVersion
		}
		out[i] = fmt.Sprintf("%s@%s#%p", key(o), rv, o)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// sameObjects reports whether a and b hold the very same objects.
func sameObjects(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	set := make(map[any]struct{}, len(a))
	for _, o := range a {
		set[o] = struct{}{}
	}
	for _, o := range b {
		if _, ok := set[o]; !ok {
			return false
		}
	}
	return len(set) == len(a)
}

func sorted(s []string) []string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return c
}

// expected is the comparable summary of one notification.
type expected struct {
	Type        NotificationType
	Key         string
	OldRV       string
	NewRV       string
	Sync        bool
	InitialList bool
	Tombstone   bool
}

func summarize(items []Notification) []expected {
	out := make([]expected, len(items))
	for i, n := range items {
		// Key is "" for an object without metadata.
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(n.New)
		e := expected{Type: n.Type, Key: k, Sync: n.Sync, InitialList: n.InitialList}
		if p, ok := n.Old.(*corev1.Pod); ok {
			e.OldRV = p.ResourceVersion
		}
		switch o := n.New.(type) {
		case *corev1.Pod:
			e.NewRV = o.ResourceVersion
		case cache.DeletedFinalStateUnknown:
			e.Tombstone = true
		}
		out[i] = e
	}
	return out
}

// applyAll applies deltas as a batch that is not Atomic, returning the batch
// sent to every subscriber (nil when none).
func (c *Core) applyAll(deltas []fifo.Delta) *Notifications {
	c.cur = batchProgress{active: true, deltas: deltas, chunk: applyChunk}
	c.apply()
	p := c.cur
	c.cur = batchProgress{}
	if p.tracing {
		c.recordSpans(deltas, p.items, p.batchStart)
	}
	return c.notifications(p.batch, p.items, p.initial)
}

// routeMsgs returns what routing n, a batch applyAll returned, sends.
func (c *Core) routeMsgs(n *Notifications) []stage.Msg {
	c.out.Reset()
	c.route(n)
	return c.out.Msgs()
}

// addIndexers hands AddIndexers to the core and returns its answer.
func (c *Core) addIndexers(idx cache.Indexers) error {
	m := &AddIndexers{Indexers: idx, Reply: make(chan error, 1)}
	msgs := c.Step(m)
	if len(msgs) != 1 || msgs[0].To != stage.ToInformer {
		panic(fmt.Sprintf("AddIndexers sent %v", msgs))
	}
	a, ok := msgs[0].Body.(*IndexersAdded)
	if !ok || a.Reply != m.Reply || len(m.Reply) != 0 {
		panic(fmt.Sprintf("AddIndexers answered %#v (the core must not use Reply)", msgs[0].Body))
	}
	return a.Err
}

// subscribers returns the subscribed listeners' IDs in subscription order.
func (c *Core) subscribers() []ListenerID {
	ids := make([]ListenerID, len(c.subs))
	for i := range c.subs {
		ids[i] = c.subs[i].id
	}
	return ids
}

// counts is a listener's progress as these tests keep it: the Sent the
// core counts in, and the listener's Delivered, which the tests move as a
// listener would.
type counts struct {
	sent      Sent
	delivered atomic.Int64
}

// subscribe returns a Subscribe of listener id counting in c.
func (c *counts) subscribe(id ListenerID) *Subscribe {
	return &Subscribe{ID: id, Sent: &c.sent, Delivered: &c.delivered}
}

// pending is what was sent of the initial list: no listener delivers in
// these tests.
func (c *counts) pending() int64 { return c.sent.Initial.Load() }

// backlog is what was sent and not done.
func (c *counts) backlog() int64 { return c.sent.Notifications.Load() - c.delivered.Load() }

// setBacklog makes the listener have done all it was sent but n.
func (c *counts) setBacklog(n int64) { c.delivered.Store(c.sent.Notifications.Load() - n) }

// unseen counts n notifications as sent before and not done: the listener
// is that much further behind.
func (c *counts) unseen(n int64) { c.sent.Notifications.Add(n) }
