package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// startStopInformers is how many informers one iteration of
// BenchmarkStartStop starts, syncs and stops.
const startStopInformers = 200

// BenchmarkStartStop measures the fixed cost of an informer: one iteration
// creates startStopInformers informers over fake sources (one object each,
// a watch that stays silent), each with one no-op handler, starts them,
// waits until all have synced, stops them and waits until they have
// stopped. "standalone" runs informers made one by one (client-go's
// cache.NewSharedIndexInformer, ours actors.NewSharedIndexInformer),
// "factory" runs them through one factory over a dynamic client (client-go's
// dynamicinformer, ours actors.Factory.ForResource), each with its own
// resource, and "factories" through as many typed factories of one pod
// informer each (client-go's informers.SharedInformerFactory.InformerFor,
// ours actors.For), as unit tests do. Compare the implementations with
//
//	go test ./bench -run '^$' -bench StartStop -count 5 | tee out.txt
//	benchstat -col /impl out.txt
func BenchmarkStartStop(b *testing.B) {
	standalone := map[string]func(){
		"client-go": func() {
			startStopStandalone(func(lw cache.ListerWatcher) cache.SharedIndexInformer {
				return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
			})
		},
		"actors": func() {
			startStopStandalone(func(lw cache.ListerWatcher) cache.SharedIndexInformer {
				return actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
			})
		},
	}
	factory := map[string]func(){
		"client-go": startStopClientGoFactory,
		"actors":    startStopActorsFactory,
	}
	factories := map[string]func(){
		"client-go": startStopClientGoFactories,
		"actors":    startStopActorsFactories,
	}
	for _, group := range []struct {
		name  string
		impls map[string]func()
	}{{"standalone", standalone}, {"factory", factory}, {"factories", factories}} {
		for _, impl := range []string{"client-go", "actors"} {
			run := group.impls[impl]
			b.Run(group.name+"/impl="+impl, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					run()
				}
			})
		}
	}
}

var noopHandler = cache.ResourceEventHandlerFuncs{}

func startStopStandalone(newInformer func(cache.ListerWatcher) cache.SharedIndexInformer) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	checkers := make([]cache.DoneChecker, 0, startStopInformers)
	for i := range startStopInformers {
		inf := newInformer(startStopSource{name: fmt.Sprint("p", i)})
		if _, err := inf.AddEventHandler(noopHandler); err != nil {
			panic(err)
		}
		checkers = append(checkers, inf.HasSyncedChecker())
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitFor(ctx, "", checkers...) {
		panic("informers did not sync")
	}
	cancel()
	wg.Wait()
}

func startStopClientGoFactory() {
	f := dynamicinformer.NewDynamicSharedInformerFactory(startStopDynamic{}, 0)
	for i := range startStopInformers {
		if _, err := f.ForResource(startStopGVR(i)).Informer().AddEventHandler(noopHandler); err != nil {
			panic(err)
		}
	}
	stop := make(chan struct{})
	f.Start(stop)
	for gvr, ok := range f.WaitForCacheSync(stop) {
		if !ok {
			panic(fmt.Sprint(gvr, " did not sync"))
		}
	}
	close(stop)
	f.Shutdown()
}

func startStopActorsFactory() {
	// WithWatchList(false): client-go's dynamic informers learn from the
	// client (IsWatchListSemanticsUnSupported) that it cannot stream lists.
	f := actors.NewFactory(nil, 0, actors.WithDynamicClient(startStopDynamic{}), actors.WithWatchList(false))
	for i := range startStopInformers {
		if _, err := f.ForResource(startStopGVR(i)).AddEventHandler(noopHandler); err != nil {
			panic(err)
		}
	}
	stop := make(chan struct{})
	f.Start(stop)
	for gvr, ok := range f.WaitForCacheSync(stop) {
		if !ok {
			panic(fmt.Sprint(gvr, " did not sync"))
		}
	}
	close(stop)
	f.Shutdown()
}

func startStopClientGoFactories() {
	fs := make([]informers.SharedInformerFactory, startStopInformers)
	stop := make(chan struct{})
	for i := range fs {
		f := informers.NewSharedInformerFactory(nil, 0)
		inf := f.InformerFor(&corev1.Pod{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(startStopSource{name: fmt.Sprint("p", i)}, &corev1.Pod{}, 0,
				cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		})
		if _, err := inf.AddEventHandler(noopHandler); err != nil {
			panic(err)
		}
		f.Start(stop)
		fs[i] = f
	}
	for _, f := range fs {
		for typ, ok := range f.WaitForCacheSync(stop) {
			if !ok {
				panic(fmt.Sprint(typ, " did not sync"))
			}
		}
	}
	close(stop)
	for _, f := range fs {
		f.Shutdown()
	}
}

func startStopActorsFactories() {
	fs := make([]*actors.Factory, startStopInformers)
	stop := make(chan struct{})
	for i := range fs {
		// WithWatchList(false), as startStopSource tells client-go's.
		f := actors.NewFactory(nil, 0, actors.WithWatchList(false))
		pods := actors.For[*corev1.Pod](f, corev1.SchemeGroupVersion.WithResource("pods"),
			func(kubernetes.Interface, string) actors.ListWatchable[*corev1.PodList] {
				return startStopTyped{startStopSource{name: fmt.Sprint("p", i)}}
			})
		if _, err := pods.Informer().AddEventHandler(noopHandler); err != nil {
			panic(err)
		}
		f.Start(stop)
		fs[i] = f
	}
	for _, f := range fs {
		for gvr, ok := range f.WaitForCacheSync(stop) {
			if !ok {
				panic(fmt.Sprint(gvr, " did not sync"))
			}
		}
	}
	close(stop)
	for _, f := range fs {
		f.Shutdown()
	}
}

func startStopGVR(i int) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: fmt.Sprint("things", i)}
}

// startStopSource lists one pod and opens watches that stay silent until
// stopped.
type startStopSource struct{ name string }

func (startStopSource) IsWatchListSemanticsUnSupported() bool { return true }

func (s startStopSource) List(metav1.ListOptions) (runtime.Object, error) {
	return s.podList(), nil
}

func (startStopSource) Watch(metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

// startStopTyped is startStopSource as a typed client, for a factory's
// typed informer.
type startStopTyped struct{ src startStopSource }

func (s startStopTyped) List(context.Context, metav1.ListOptions) (*corev1.PodList, error) {
	return s.src.podList(), nil
}

func (startStopTyped) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

func (s startStopSource) podList() *corev1.PodList {
	return &corev1.PodList{
		ListMeta: metav1.ListMeta{ResourceVersion: "1"},
		Items:    []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.name, ResourceVersion: "1"}}},
	}
}

// startStopDynamic is a dynamic client whose resources list one object and
// open watches that stay silent until stopped. Only List, Watch and
// Namespace are implemented.
type startStopDynamic struct{ dynamic.Interface }

func (startStopDynamic) IsWatchListSemanticsUnSupported() bool { return true }

func (startStopDynamic) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return startStopResource{gvr: gvr}
}

type startStopResource struct {
	dynamic.NamespaceableResourceInterface
	gvr schema.GroupVersionResource
}

func (r startStopResource) Namespace(string) dynamic.ResourceInterface { return r }

func (r startStopResource) List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	u := unstructured.Unstructured{}
	u.SetAPIVersion(r.gvr.GroupVersion().String())
	u.SetKind("Thing")
	u.SetNamespace("default")
	u.SetName(r.gvr.Resource)
	u.SetResourceVersion("1")
	l := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{u}}
	l.SetResourceVersion("1")
	return l, nil
}

func (startStopResource) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}
