package actors_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
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
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "token"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "leader"}},
	)
	widget := &unstructured.Unstructured{}
	widget.SetAPIVersion("example.com/v1")
	widget.SetKind("Widget")
	widget.SetNamespace("default")
	widget.SetName("w1")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{{Group: "example.com", Version: "v1", Resource: "widgets"}: "WidgetList"}, widget)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := factoryTour(ctx, client, dyn, sdktrace.NewTracerProvider()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// pod: api <nil>
	// secret: token <nil>
	// lease: leader <nil>
	// widgets: [default/w1]
	// stopped: true
}

// factoryTour is docs/integration.md's factory snippets, in order.
func factoryTour(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, tp trace.TracerProvider) error {
	// doc:begin docs/integration.md
	f := actors.NewFactory(client, 10*time.Minute,
		actors.WithNamespace("default"),
		actors.WithDynamicClient(dyn),
		actors.WithTracerProvider(tp))
	pods := actors.Pods(f) // Typed[*corev1.Pod]: Informer(), Lister()
	secrets := actors.Secrets(f)
	widgetsGVR := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgets := f.ForResource(widgetsGVR) // *unstructured.Unstructured objects
	// doc:end

	// doc:begin docs/integration.md
	leases := actors.For[*coordinationv1.Lease](f, coordinationv1.SchemeGroupVersion.WithResource("leases"),
		func(c kubernetes.Interface, ns string) actors.ListWatchable[*coordinationv1.LeaseList] {
			return c.CoordinationV1().Leases(ns)
		})
	// doc:end

	readCaches := func() {
		p, err := listers.NewNamespaced(pods.Lister(), "default").Get("api")
		fmt.Println("pod:", p.Name, err)
		s, err := listers.NewNamespaced(secrets.Lister(), "default").Get("token")
		fmt.Println("secret:", s.Name, err)
		l, err := listers.NewNamespaced(leases.Lister(), "default").Get("leader")
		fmt.Println("lease:", l.Name, err)
		fmt.Println("widgets:", widgets.GetStore().ListKeys())
	}

	// doc:begin docs/integration.md
	f.StartWithContext(ctx)
	if err := f.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
		return err
	}
	readCaches() // pods.Lister(), secrets.Lister(), leases.Lister(), widgets.GetIndexer()
	// ... the CRD behind widgets is deleted:
	f.StopInformer(widgetsGVR) // stops that informer only (client-go cannot: kubernetes#79610)
	f.Shutdown()
	// doc:end
	fmt.Println("stopped:", widgets.IsStopped())
	return nil
}
