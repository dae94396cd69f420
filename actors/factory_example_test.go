package actors_test

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/listers"

	"github.com/actorinformer/actorinformer/actors"
)

// actorinformer's own factory (docs/integration.md): typed informers
// without generated code, dynamic ones for CRDs, and stopping one informer.
// Over client-go's fake clientsets it needs no option.
func Example_factory() {
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "leader"}},
	)
	widgetsGVR := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widget := &unstructured.Unstructured{}
	widget.SetAPIVersion("example.com/v1")
	widget.SetKind("Widget")
	widget.SetNamespace("default")
	widget.SetName("w1")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{widgetsGVR: "WidgetList"}, widget)

	f := actors.NewFactory(client, 10*time.Minute,
		actors.WithNamespace("default"),
		actors.WithDynamicClient(dyn))
	pods := actors.Pods(f) // Typed[*corev1.Pod]: Informer(), Lister()
	widgets := f.ForResource(widgetsGVR)
	leases := actors.For[*coordinationv1.Lease](f, coordinationv1.SchemeGroupVersion.WithResource("leases"),
		func(c kubernetes.Interface, ns string) actors.ListWatchable[*coordinationv1.LeaseList] {
			return c.CoordinationV1().Leases(ns)
		})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.StartWithContext(ctx)
	if err := f.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
		fmt.Println(err)
		return
	}
	p, err := listers.NewNamespaced(pods.Lister(), "default").Get("api")
	fmt.Println("pod:", p.Name, err)
	l, err := listers.NewNamespaced(leases.Lister(), "default").Get("leader")
	fmt.Println("lease:", l.Name, err)
	fmt.Println("widgets:", widgets.GetStore().ListKeys())

	// The CRD behind widgets is deleted: stop that informer only.
	fmt.Println("stopped:", f.StopInformer(widgetsGVR), widgets.IsStopped())
	cancel()
	f.Shutdown()
	// Output:
	// pod: api <nil>
	// lease: leader <nil>
	// widgets: [default/w1]
	// stopped: true true
}
