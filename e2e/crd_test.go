package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgetGVR = schema.GroupVersionResource{Group: "e2e.actorinformer.io", Version: "v1", Resource: "widgets"}
)

const widgetCRD = "widgets.e2e.actorinformer.io"

// TestCRD creates a CustomResourceDefinition (through the dynamic client,
// so no apiextensions client module is needed), watches its objects through
// a Factory's dynamic informer next to client-go's, churns them, deletes the
// CRD and stops that one informer: its goroutines are gone, and the
// factory's ConfigMap informer keeps working.
func TestCRD(t *testing.T) {
	c := startCluster(t, testcluster.Options{WatchCache: true})
	cfg := c.Config()
	cs := clientFor(t, cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	f := actors.NewFactory(cs, 0, actors.WithDynamicClient(dyn))
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		f.Shutdown()
	})
	cms := actors.ConfigMaps(f)
	cmView := informertest.NewView()
	if _, err := cms.Informer().AddEventHandler(cmView.Handler()); err != nil {
		t.Fatal(err)
	}
	f.Start(stop)
	waitSynced(t, 30*time.Second, cms.Informer().HasSynced)

	createWidgetCRD(t, dyn)
	// Everything running now (cluster connections, the ConfigMap
	// informer) is the baseline; what the widget informers start must be
	// gone once they are stopped.
	baseline := goleak.IgnoreCurrent()

	ourInf := f.ForResource(widgetGVR)
	if f.ForResource(widgetGVR) != ourInf {
		t.Fatal("ForResource returned a second informer for the same resource")
	}
	ours := &side{name: "ours (factory)", inf: ourInf, ours: ourInf, views: map[string]*informertest.View{}}
	ours.addView(t, "early")
	f.Start(stop)
	ref := &side{name: "client-go", views: map[string]*informertest.View{}}
	ref.inf = cache.NewSharedIndexInformer(listWatch(dyn.Resource(widgetGVR)), &unstructured.Unstructured{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	ref.addView(t, "early")
	stopRef := runUntilStopped(ref.inf)
	defer stopRef()
	waitSynced(t, 30*time.Second, ours.inf.HasSynced, ref.inf.HasSynced)

	namespaces := []string{"crd-0", "crd-1"}
	createNamespaces(t, cs, namespaces...)
	stats, wait := startChurn(ctx, churnSpec{
		ops: widgetOps(dyn), namespaces: namespaces, prefix: "w", names: 80, total: 1000, workers: churnWorkers, seed: 6,
	})
	wait()
	server := func(ctx context.Context) (map[string]string, error) {
		return listSnapshot(dyn.Resource(widgetGVR).List(ctx, metav1.ListOptions{}))
	}
	lister := func(idx cache.Indexer) map[string]string {
		objs, err := cache.NewGenericLister(idx, widgetGVR.GroupResource()).List(labels.Everything())
		if err != nil {
			return map[string]string{"lister-error": err.Error()}
		}
		return objectsSnapshot(objs)
	}
	took, n := waitConverged(t, 60*time.Second, "widgets converged", server, sidesSources(lister, ours, ref))
	t.Logf("widgets: churn %v; %d on the server, converged %v after the last write", stats, n, took.Round(time.Millisecond))

	// Deleting the CRD deletes every widget: each informer sees them go.
	if err := dyn.Resource(crdGVR).Delete(ctx, widgetCRD, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	informertest.Eventually(t, 60*time.Second, 50*time.Millisecond, "CRD gone and every widget deleted in the informers", func() string {
		if _, err := dyn.Resource(crdGVR).Get(ctx, widgetCRD, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("CRD still there (%v)", err)
		}
		for _, src := range sidesSources(lister, ours, ref) {
			if got := src.get(); len(got) > 0 {
				return fmt.Sprintf("%s still has %d widgets", src.name, len(got))
			}
		}
		return ""
	})
	checkHandlerErrors(t, ours, ref)
	for _, s := range []*side{ours, ref} {
		t.Logf("%s: early handler %s", s.name, s.views["early"].Counts())
	}

	if !f.StopInformer(widgetGVR) {
		t.Fatal("StopInformer: the factory did not have the widget informer")
	}
	if f.StopInformer(widgetGVR) {
		t.Fatal("StopInformer twice reported the informer both times")
	}
	if !ourInf.IsStopped() {
		t.Fatal("the widget informer is not stopped after StopInformer")
	}
	stopRef()
	// Nothing the widget informers started is left, while the cluster
	// connections and the ConfigMap informer (in the baseline) go on.
	goleak.VerifyNone(t, leakcheck.Options(baseline)...)

	// The factory's other informer still works.
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-crd"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	informertest.Eventually(t, 30*time.Second, 20*time.Millisecond, "ConfigMap informer sees a new object after StopInformer", func() string {
		if _, err := listers.NewNamespaced(cms.Lister(), "default").Get("after-crd"); err != nil {
			return "lister: " + err.Error()
		}
		if _, ok := cmView.Snapshot()["default/after-crd"]; !ok {
			return "handler has not seen it"
		}
		return ""
	})
}

// runUntilStopped runs informers until the returned function is called;
// it waits for them to return and may be called more than once.
func runUntilStopped(infs ...cache.SharedIndexInformer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(infs))
	for _, inf := range infs {
		go func() {
			inf.RunWithContext(ctx)
			done <- struct{}{}
		}()
	}
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for range infs {
			<-done
		}
	}
}

func createWidgetCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := t.Context()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": widgetCRD},
		"spec": map[string]any{
			"group": widgetGVR.Group,
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	informertest.Eventually(t, 60*time.Second, 50*time.Millisecond, "CRD established and served", func() string {
		got, err := dyn.Resource(crdGVR).Get(ctx, widgetCRD, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return "not Established yet"
		}
		if _, err := dyn.Resource(widgetGVR).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return "not served yet: " + err.Error()
		}
		return ""
	})
}

func widgetOps(dyn dynamic.Interface) resourceOps {
	return resourceOps{
		create: func(ctx context.Context, ns, name string, gen int) error {
			w := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": widgetGVR.GroupVersion().String(),
				"kind":       "Widget",
				"metadata":   map[string]any{"name": name, "labels": map[string]any{"gen": fmt.Sprint(gen)}},
				"spec":       map[string]any{"gen": fmt.Sprint(gen)},
			}}
			_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
			return err
		},
		patch: func(ctx context.Context, ns, name string, gen int) error {
			_, err := dyn.Resource(widgetGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, genPatch("spec", gen), metav1.PatchOptions{})
			return err
		},
		del: func(ctx context.Context, ns, name string) error {
			return dyn.Resource(widgetGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		},
		get: func(ctx context.Context, ns, name string) error {
			_, err := dyn.Resource(widgetGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
	}
}
