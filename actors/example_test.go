package actors_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// The one-line swap: where client-go's cache.NewSharedIndexInformer was,
// call actors.NewSharedIndexInformer with the same arguments. A generated
// lister reads the cache directly.
func ExampleNewSharedIndexInformer() {
	src, lw := newSource()
	defer src.Shutdown()
	src.Add(pod("default", "web-1", 1))
	src.Add(pod("default", "web-2", 2))
	src.Add(pod("kube-system", "dns", 3))

	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)

	lister := corev1listers.NewPodLister(inf.GetIndexer())
	pods, _ := lister.Pods("default").List(labels.Everything())
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	fmt.Println(names)
	// Output: [web-1 web-2]
}

// A custom index: pods by IP, the informer index from the classic
// "writing a controller" articles.
func Example_indexByPodIP() {
	src, lw := newSource()
	defer src.Shutdown()
	p := pod("default", "web", 1)
	p.Status.PodIP = "10.0.0.7"
	src.Add(p)

	byIP := cache.Indexers{"byPodIP": func(obj any) ([]string, error) {
		if ip := obj.(*corev1.Pod).Status.PodIP; ip != "" {
			return []string{ip}, nil
		}
		return nil, nil
	}}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, byIP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)

	objs, _ := inf.GetIndexer().ByIndex("byPodIP", "10.0.0.7")
	for _, o := range objs {
		fmt.Println(o.(*corev1.Pod).Name)
	}
	// Output: web
}

// Plugging our informer into client-go's SharedInformerFactory: InformerFor
// takes any cache.SharedIndexInformer, so the generated typed informers and
// listers of the factory then read our cache. InformerFor returns ours (the
// typed informer's Informer() returns client-go's typed wrapper around it):
// keep it for AddContextEventHandler and Stats. The ListWatch says whether
// the client can stream lists, as client-go's generated informers do, so
// over the fake clientset the informer lists and watches (docs/integration.md).
func Example_sharedInformerFactoryInformerFor() {
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api", ResourceVersion: "1"}})
	tp := sdktrace.NewTracerProvider()

	// doc:begin docs/integration.md
	factory := informers.NewSharedInformerFactory(client, 30*time.Second)
	pods := factory.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			},
		}, c) // c tells whether it can stream lists (WatchList); a fake clientset cannot
		return actors.NewSharedIndexInformer(lw, &corev1.Pod{}, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			actors.WithTracerProvider(tp))
	}).(*actors.SharedIndexInformer) // ours: AddContextEventHandler, Stats...
	podLister := factory.Core().V1().Pods().Lister() // reads our cache
	// doc:end

	added := make(chan string, 1)
	_, _ = pods.AddContextEventHandler(actors.ContextEventHandlerFuncs{
		AddFunc: func(_ context.Context, obj any, _ bool) { added <- obj.(*corev1.Pod).Name },
	})
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	p, err := podLister.Pods("default").Get("api")
	fmt.Println(p.Name, err, <-added)
	close(stop)
	factory.Shutdown()
	// Output: api <nil> api
}

// README.md's one-line swap: the same arguments build client-go's informer
// and ours, and the rest of the code does not change.
func Example_oneLineSwap() {
	src, lw := newSource()
	defer src.Shutdown()
	src.Add(pod("default", "web", 1))
	const resync = 0
	before := func() cache.SharedIndexInformer {
		// doc:begin README.md
		inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		// doc:end
		return inf
	}
	after := func() cache.SharedIndexInformer {
		// doc:begin README.md
		inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		// doc:end
		return inf
	}
	for _, inf := range []cache.SharedIndexInformer{before(), after()} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { inf.RunWithContext(ctx); close(done) }()
		cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
		pods, _ := corev1listers.NewPodLister(inf.GetIndexer()).Pods("default").List(labels.Everything())
		fmt.Printf("%T: %d pod(s)\n", inf, len(pods))
		cancel()
		<-done
	}
	// Output:
	// *cache.sharedIndexInformer: 1 pod(s)
	// *actors.SharedIndexInformer: 1 pod(s)
}

// A handler slower than the stream: wrapped in actors.Coalesced, its
// listener keeps at most one pending notification per key, so while the
// handler is busy a burst of changes to one pod costs one notification,
// and the handler then gets the latest object, its update's old object
// being the one it last saw.
func ExampleCoalesced() {
	src, lw := newSource()
	defer src.Shutdown()
	src.Add(pod("default", "web", 0))

	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	var mu sync.Mutex
	seen, consistent := "0", true
	_, _ = inf.AddEventHandler(actors.Coalesced(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			mu.Lock()
			defer mu.Unlock()
			seen = obj.(*corev1.Pod).Labels["gen"]
		},
		UpdateFunc: func(oldObj, newObj any) {
			time.Sleep(10 * time.Millisecond) // a slow handler
			mu.Lock()
			defer mu.Unlock()
			consistent = consistent && oldObj.(*corev1.Pod).Labels["gen"] == seen
			seen = newObj.(*corev1.Pod).Labels["gen"]
		},
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)

	for gen := 1; gen <= 100; gen++ {
		src.Modify(pod("default", "web", gen))
	}
	// Wait for the slow handler to catch up (in real time: an example).
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		last := seen
		mu.Unlock()
		if last == "100" {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("handler ends with gen", seen, "- every update's old object was the one it had:", consistent)
	// Output: handler ends with gen 100 - every update's old object was the one it had: true
}
