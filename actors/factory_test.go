package actors_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func widget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetResourceVersion("1")
	return u
}

// watchStarted closes the returned channel when the fake client opens a
// watch on resource, so a test writes only once the informer watches (the
// fake clientset loses events between a list and the watch that follows).
func watchStarted(c interface {
	PrependWatchReactor(string, clienttesting.WatchReactionFunc)
}, resource string) <-chan struct{} {
	ch := make(chan struct{})
	closed := false
	c.PrependWatchReactor(resource, func(clienttesting.Action) (bool, watch.Interface, error) {
		if !closed {
			closed = true
			close(ch)
		}
		return false, nil, nil
	})
	return ch
}

// TestFactoryTypedDynamicAndStopOne: a Factory serves typed and dynamic
// informers, and StopInformer stops one while the others go on.
// Real time: the Factory's API over client-go's fake clientsets, on a real
// actor system.
func TestFactoryTypedDynamicAndStopOne(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", ResourceVersion: "1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p2", ResourceVersion: "1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm", ResourceVersion: "1"}},
	)
	podWatch := watchStarted(client, "pods")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, widget("a", "w1"), widget("a", "w2"))

	f := actors.NewFactory(client, 0, actors.WithDynamicClient(dyn))
	pods := actors.Pods(f)
	cms := actors.ConfigMaps(f)
	dynInf := f.ForResource(widgets)
	if actors.Pods(f).Informer() != pods.Informer() {
		t.Fatal("the factory made two pod informers")
	}
	stop := make(chan struct{})
	defer f.Shutdown()
	defer close(stop)
	f.Start(stop)
	synced := f.WaitForCacheSync(stop)
	if len(synced) != 3 {
		t.Fatalf("WaitForCacheSync reported %d informers, want 3", len(synced))
	}
	for gvr, ok := range synced {
		if !ok {
			t.Fatalf("%v did not sync", gvr)
		}
	}
	if got, _ := pods.Lister().List(labels.Everything()); len(got) != 2 {
		t.Fatalf("pod lister: %d pods, want 2", len(got))
	}
	if cm, err := cms.Lister().Get("a/cm"); err != nil || cm.Name != "cm" {
		t.Fatalf("configmap lister Get: %v, %v", cm, err)
	}
	if n := len(dynInf.GetStore().List()); n != 2 {
		t.Fatalf("dynamic informer holds %d widgets, want 2", n)
	}
	if _, ok := dynInf.GetStore().List()[0].(*unstructured.Unstructured); !ok {
		t.Fatalf("dynamic informer holds %T", dynInf.GetStore().List()[0])
	}

	// Stop only the dynamic informer, as after its CRD is deleted.
	if !f.StopInformer(widgets) {
		t.Fatal("StopInformer did not find the widget informer")
	}
	if !dynInf.IsStopped() {
		t.Fatal("widget informer still running after StopInformer")
	}
	if f.StopInformer(widgets) {
		t.Fatal("StopInformer found the widget informer twice")
	}
	if pods.Informer().IsStopped() {
		t.Fatal("pod informer stopped along with the widget informer")
	}
	<-podWatch
	if _, err := client.CoreV1().Pods("c").Create(context.Background(),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "p3", ResourceVersion: "2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "pod informer keeps working", func() string {
		if _, err := pods.Lister().Get("c/p3"); err != nil {
			return err.Error()
		}
		return ""
	})
	// A new informer for the stopped resource can be made and started.
	again := f.ForResource(widgets)
	if again == dynInf {
		t.Fatal("ForResource returned the stopped informer")
	}
	f.Start(stop)
	if !f.WaitForCacheSync(stop)[widgets] {
		t.Fatal("new widget informer did not sync")
	}
	f.Shutdown()
	for _, inf := range []*actors.SharedIndexInformer{pods.Informer(), cms.Informer(), again} {
		if !inf.IsStopped() {
			t.Fatalf("%s still running after Shutdown", inf.Name())
		}
	}
}

func TestFactoryNamespaceAndTweak(t *testing.T) {
	var objs []runtime.Object
	for i := 0; i < 6; i++ {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: fmt.Sprint("ns", i%2), Name: fmt.Sprint("p", i), ResourceVersion: "1",
			Labels: map[string]string{"app": fmt.Sprint(i % 3)},
		}})
	}
	client := fake.NewClientset(objs...)
	var tweaked int
	f := actors.NewFactory(client, 0, actors.WithNamespace("ns0"),
		actors.WithTweakListOptions(func(o *metav1.ListOptions) { tweaked++ }))
	pods := actors.Pods(f)
	stop := make(chan struct{})
	f.Start(stop)
	f.WaitForCacheSync(stop)
	got, _ := pods.Lister().List(labels.Everything())
	close(stop)
	f.Shutdown()
	if len(got) != 3 {
		t.Fatalf("namespaced factory listed %d pods, want the 3 of ns0", len(got))
	}
	for _, p := range got {
		if p.Namespace != "ns0" {
			t.Fatalf("pod from %s in a factory limited to ns0", p.Namespace)
		}
	}
	if tweaked == 0 {
		t.Fatal("list options were not tweaked")
	}
}

// eventLog records a handler's calls as "add ns/name rv" etc.
type eventLog struct {
	mu  sync.Mutex
	log []string
}

func (l *eventLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, fmt.Sprintf(format, args...))
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log, ", ")
}

func (l *eventLog) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			l.add("add %s %s", informertest.Key(obj), informertest.RV(obj))
		},
		UpdateFunc: func(_, obj any) {
			l.add("update %s %s", informertest.Key(obj), informertest.RV(obj))
		},
		DeleteFunc: func(obj any) { l.add("delete %s", informertest.Key(obj)) },
	}
}

// podFactory is what the side-by-side factory tests use of client-go's
// SharedInformerFactory and of ours.
type podFactory struct {
	pods        cache.SharedIndexInformer
	start       func(context.Context)
	waitForSync func(context.Context) cache.SyncResult
	shutdown    func()
}

var factoryImpls = []struct {
	name string
	make func(client *fake.Clientset) podFactory
}{
	{"client-go", func(client *fake.Clientset) podFactory {
		f := informers.NewSharedInformerFactory(client, 0)
		return podFactory{f.Core().V1().Pods().Informer(), f.StartWithContext, f.WaitForCacheSyncWithContext, f.Shutdown}
	}},
	{"actors", func(client *fake.Clientset) podFactory {
		f := actors.NewFactory(client, 0)
		return podFactory{actors.Pods(f).Informer(), f.StartWithContext, f.WaitForCacheSyncWithContext, f.Shutdown}
	}},
}

// TestFactoryOverFakeClientset runs the steps of every user's unit tests on
// client-go's factory and ours, built without options over client-go's fake
// clientset (which does not stream lists): start, wait for the cache to sync,
// then create, update and delete pods through the client. Both must sync,
// stop when the context is cancelled and report the same events.
// Real time: side by side with client-go's factory, over its fake
// clientset.
func TestFactoryOverFakeClientset(t *testing.T) {
	podType := reflect.TypeOf(&corev1.Pod{})
	logs := map[string]string{}
	for _, impl := range factoryImpls {
		t.Run(impl.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", ResourceVersion: "1"}})
			podWatch := watchStarted(client, "pods")
			f := impl.make(client)
			var log eventLog
			if _, err := f.pods.AddEventHandler(log.handler()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer f.shutdown()
			defer cancel()
			f.start(ctx)
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			res := f.waitForSync(wctx)
			wcancel()
			if err := res.AsError(); err != nil {
				t.Fatal(err)
			}
			if len(res.Synced) != 1 || !res.Synced[podType] {
				t.Fatalf("WaitForCacheSyncWithContext: %v, want only %v synced", res.Synced, podType)
			}
			<-podWatch
			pods := client.CoreV1().Pods("a")
			if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p2", ResourceVersion: "2"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := pods.Update(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", ResourceVersion: "3"}}, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := pods.Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			want := "add a/p1 1, add a/p2 2, update a/p1 3, delete a/p2"
			eventually(t, 10*time.Second, "events", func() string {
				if got := log.String(); got != want {
					return fmt.Sprintf("got %q", got)
				}
				return ""
			})
			keys := f.pods.GetStore().ListKeys()
			if len(keys) != 1 || keys[0] != "a/p1" {
				t.Fatalf("cache holds %v, want [a/p1]", keys)
			}
			cancel()
			eventually(t, 10*time.Second, "informer stopped with its context", func() string {
				if !f.pods.IsStopped() {
					return "still running"
				}
				return ""
			})
			logs[impl.name] = log.String()
		})
	}
	if logs["client-go"] != logs["actors"] {
		t.Fatalf("events differ:\nclient-go: %s\nactors:    %s", logs["client-go"], logs["actors"])
	}
}

// TestFactoryWaitForCacheSyncWithContextCancelled: an informer that cannot
// list never syncs; WaitForCacheSyncWithContext returns when its context is
// cancelled, with the cause and the informer reported unsynced, on both
// factories.
func TestFactoryWaitForCacheSyncWithContextCancelled(t *testing.T) {
	podType := reflect.TypeOf(&corev1.Pod{})
	cause := errors.New("gave up waiting")
	for _, impl := range factoryImpls {
		t.Run(impl.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("cannot list")
			})
			f := impl.make(client)
			ctx, cancel := context.WithCancel(context.Background())
			defer f.shutdown()
			defer cancel()
			// Nothing started yet: nothing to wait for.
			if res := f.waitForSync(ctx); res.Err != nil || len(res.Synced) != 0 {
				t.Fatalf("before Start: %+v, want an empty success", res)
			}
			f.start(ctx)
			wctx, wcancel := context.WithCancelCause(ctx)
			time.AfterFunc(100*time.Millisecond, func() { wcancel(cause) })
			res := f.waitForSync(wctx)
			if !errors.Is(res.Err, cause) {
				t.Fatalf("Err = %v, want %v", res.Err, cause)
			}
			if synced, ok := res.Synced[podType]; !ok || synced || len(res.Synced) != 1 {
				t.Fatalf("Synced = %v, want %v false", res.Synced, podType)
			}
			if err := res.AsError(); err == nil || !strings.Contains(err.Error(), podType.String()) {
				t.Fatalf("AsError = %v, want it to name %v", err, podType)
			}
		})
	}
}
