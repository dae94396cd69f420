package actors_test

import (
	"context"
	"fmt"
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
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/actorinformer/actorinformer/actors"
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

func TestFactoryTypedDynamicAndStopOne(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", ResourceVersion: "1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p2", ResourceVersion: "1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm", ResourceVersion: "1"}},
	)
	podWatch := watchStarted(client, "pods")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets: "WidgetList"}, widget("a", "w1"), widget("a", "w2"))

	f := actors.NewFactory(client, 0, actors.WithDynamicClient(dyn), actors.WithWatchList(false))
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
	f := actors.NewFactory(client, 0, actors.WithNamespace("ns0"), actors.WithWatchList(false),
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
