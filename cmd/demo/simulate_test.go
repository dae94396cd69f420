package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// next reads one event from w, failing the test if none comes: events are
// queued before the call, so the wait is only for the pump goroutine.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

func rvOf(t *testing.T, obj any) int64 {
	t.Helper()
	rv, err := strconv.ParseInt(obj.(interface{ GetResourceVersion() string }).GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion: %v", err)
	}
	return rv
}

func listPods(t *testing.T, c *simCluster, ns string) *corev1.PodList {
	t.Helper()
	l, err := c.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func watchPods(t *testing.T, c *simCluster, ns string, opts metav1.ListOptions) watch.Interface {
	t.Helper()
	w, err := c.Client().CoreV1().Pods(ns).Watch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// TestWorkloadSteps drives the generator with a fixed seed and checks what a
// watcher started from a list sees: every change, in order, with increasing
// resourceVersions, and a final list that matches the generator's pods.
func TestWorkloadSteps(t *testing.T) {
	const steps, target = 3000, 100
	c := newSimCluster()
	defer c.Close()
	w := newWorkload(c, 42, 3, target)
	if err := w.populate(); err != nil {
		t.Fatal(err)
	}
	if len(w.pods) != target || w.counts[opCreate] != target {
		t.Fatalf("populate: %d pods, %d creates", len(w.pods), w.counts[opCreate])
	}
	list := listPods(t, c, "")
	if len(list.Items) != target {
		t.Fatalf("list has %d pods, want %d", len(list.Items), target)
	}
	watcher := watchPods(t, c, "", metav1.ListOptions{ResourceVersion: list.ResourceVersion})

	ops := make([]op, steps)
	minPods, maxPods := target, target
	for i := range ops {
		o, err := w.step()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ops[i] = o
		minPods, maxPods = min(minPods, len(w.pods)), max(maxPods, len(w.pods))
	}
	for _, o := range []op{opCreate, opUpdate, opDelete} {
		if w.counts[o] == 0 {
			t.Errorf("no %v in %d steps", o, steps)
		}
	}
	if minPods < target/2 || maxPods > target*3/2 {
		t.Errorf("population went from %d to %d, want it near %d", minPods, maxPods, target)
	}

	wantType := map[op]watch.EventType{opCreate: watch.Added, opUpdate: watch.Modified, opDelete: watch.Deleted}
	prev := rvOf(t, &list.ListMeta)
	for i, o := range ops {
		ev := next(t, watcher)
		if ev.Type != wantType[o] {
			t.Fatalf("event %d is %s, want %s", i, ev.Type, wantType[o])
		}
		if rv := rvOf(t, ev.Object); rv != prev+1 {
			t.Fatalf("event %d has resourceVersion %d after %d", i, rv, prev)
		}
		prev++
	}

	final := listPods(t, c, "")
	if rv := rvOf(t, &final.ListMeta); rv != prev {
		t.Errorf("list resourceVersion %d, last event %d", rv, prev)
	}
	live := map[string]string{}
	for _, p := range w.pods {
		live[p.Namespace+"/"+p.Name] = p.ResourceVersion
	}
	if len(final.Items) != len(live) {
		t.Fatalf("list has %d pods, generator %d", len(final.Items), len(live))
	}
	for _, p := range final.Items {
		if rv, ok := live[p.Namespace+"/"+p.Name]; !ok || rv != p.ResourceVersion {
			t.Errorf("listed %s/%s rv %s, generator has rv %q", p.Namespace, p.Name, p.ResourceVersion, rv)
		}
	}
}

// TestWorkloadIsDeterministic: the same seed gives the same changes.
func TestWorkloadIsDeterministic(t *testing.T) {
	trace := func() []string {
		c := newSimCluster()
		defer c.Close()
		w := newWorkload(c, 7, 2, 20)
		var out []string
		for range 500 {
			o, err := w.step()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o.String())
		}
		for _, p := range w.pods {
			out = append(out, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion+":"+string(p.Status.Phase))
		}
		return out
	}
	a, b := trace(), trace()
	if len(a) != len(b) {
		t.Fatalf("runs differ in length: %d, %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("runs differ at %d: %s, %s", i, a[i], b[i])
		}
	}
}

// TestSimClusterWatchStarts checks each way a watch can start.
func TestSimClusterWatchStarts(t *testing.T) {
	c := newSimCluster()
	defer c.Close()
	c.keep = 10 // history holds 10 to 19 events
	w := newWorkload(c, 1, 2, 5)
	if err := w.populate(); err != nil { // resourceVersions 2..6
		t.Fatal(err)
	}
	t.Run("from a resourceVersion replays the later events", func(t *testing.T) {
		watcher := watchPods(t, c, "", metav1.ListOptions{ResourceVersion: "3"})
		for want := int64(4); want <= 6; want++ {
			if ev := next(t, watcher); ev.Type != watch.Added || rvOf(t, ev.Object) != want {
				t.Fatalf("got %s rv %d, want Added rv %d", ev.Type, rvOf(t, ev.Object), want)
			}
		}
	})
	t.Run("in one namespace only sees that namespace", func(t *testing.T) {
		ns := w.pods[0].Namespace
		watcher := watchPods(t, c, ns, metav1.ListOptions{ResourceVersion: "1"})
		n := 0
		for _, p := range w.pods {
			if p.Namespace == ns {
				n++
			}
		}
		for range n {
			if ev := next(t, watcher); ev.Object.(*corev1.Pod).Namespace != ns {
				t.Fatalf("event for namespace %s", ev.Object.(*corev1.Pod).Namespace)
			}
		}
		if err := c.create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "elsewhere"}}); err != nil {
			t.Fatal(err)
		}
		if err := c.create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, watcher); ev.Object.(*corev1.Pod).Name != "mine" {
			t.Fatalf("got %s, want only the pod of %s", ev.Object.(*corev1.Pod).Name, ns)
		}
	})
	t.Run("without a resourceVersion starts with the current pods", func(t *testing.T) {
		n := len(listPods(t, c, "").Items)
		watcher := watchPods(t, c, "", metav1.ListOptions{})
		for range n {
			if ev := next(t, watcher); ev.Type != watch.Added {
				t.Fatalf("got %s, want Added", ev.Type)
			}
		}
	})
	t.Run("watch-list ends the current pods with a bookmark", func(t *testing.T) {
		list := listPods(t, c, "")
		watcher := watchPods(t, c, "", metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true})
		for range list.Items {
			if ev := next(t, watcher); ev.Type != watch.Added {
				t.Fatalf("got %s, want Added", ev.Type)
			}
		}
		ev := next(t, watcher)
		m := ev.Object.(metav1.Object)
		if ev.Type != watch.Bookmark || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || m.GetResourceVersion() != list.ResourceVersion {
			t.Fatalf("got %s %v rv %s, want the initial-events-end bookmark at %s", ev.Type, m.GetAnnotations(), m.GetResourceVersion(), list.ResourceVersion)
		}
	})
	t.Run("from a compacted resourceVersion fails with 410", func(t *testing.T) {
		for range 30 {
			if _, err := w.step(); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.Client().CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
		if !apierrors.IsResourceExpired(err) {
			t.Fatalf("got %v, want 410 Expired", err)
		}
		// The oldest kept events can still be resumed from.
		rv := strconv.FormatInt(c.expired, 10)
		watcher := watchPods(t, c, "", metav1.ListOptions{ResourceVersion: rv})
		if ev := next(t, watcher); rvOf(t, ev.Object) != c.expired+1 {
			t.Fatalf("resumed at rv %d, want %d", rvOf(t, ev.Object), c.expired+1)
		}
	})
}

// TestSimWatcherNeverBlocksWrites: a watcher nobody reads queues events
// (the fake's own watchers would panic after 100), reports its backlog,
// and delivers everything in order once read.
func TestSimWatcherNeverBlocksWrites(t *testing.T) {
	const writes = 500
	c := newSimCluster()
	defer c.Close()
	watcher := watchPods(t, c, "", metav1.ListOptions{ResourceVersion: "1"})
	w := newWorkload(c, 3, 1, writes)
	if err := w.populate(); err != nil {
		t.Fatal(err)
	}
	// The pump can have moved at most the result channel's 64 slots.
	if b := c.backlog(); b < writes-64 || b > writes {
		t.Fatalf("backlog %d, want %d to %d", b, writes-64, writes)
	}
	for i := range writes {
		if rv := rvOf(t, next(t, watcher).Object); rv != int64(i+2) {
			t.Fatalf("event %d has rv %d", i, rv)
		}
	}
	// The pump counts an event out once its send returns, which can be
	// just after the reader has it.
	deadline := time.Now().Add(5 * time.Second)
	for c.backlog() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b := c.backlog(); b != 0 {
		t.Fatalf("backlog %d after reading everything", b)
	}
}

func TestSimWatcherStopAndTimeoutCloseTheChannel(t *testing.T) {
	c := newSimCluster()
	defer c.Close()
	stopped := watchPods(t, c, "", metav1.ListOptions{ResourceVersion: "1"})
	stopped.Stop()
	timedOut := newSimWatcher("", time.Millisecond)
	go timedOut.pump()
	closedCluster := watchPods(t, c, "", metav1.ListOptions{ResourceVersion: "1"})
	c.Close()
	for name, w := range map[string]watch.Interface{"stopped": stopped, "timed out": timedOut, "cluster closed": closedCluster} {
		select {
		case _, ok := <-w.ResultChan():
			if ok {
				t.Errorf("%s: got an event", name)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: result channel still open", name)
		}
	}
	if _, err := c.Client().CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{}); err == nil {
		t.Error("watch on a closed cluster succeeded")
	}
}
