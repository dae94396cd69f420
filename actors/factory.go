package actors

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Factory creates and runs informers that share one actor system, without
// generated code: typed informers through For (and shortcuts such as Pods),
// custom resources through ForResource. Unlike client-go's factory it can
// stop a single informer (StopInformer), for instance after its
// CustomResourceDefinition is deleted.
//
// All methods may be called by multiple goroutines simultaneously.
type Factory struct {
	client        kubernetes.Interface
	defaultResync time.Duration
	opts          options
	informerOpts  []Option
	sys           *actor.ActorSystem
	ownSystem     bool

	mu           sync.Mutex
	informers    map[schema.GroupVersionResource]*factoryEntry
	shuttingDown bool
	wg           sync.WaitGroup
	sysDown      sync.Once
}

type factoryEntry struct {
	inf    *SharedIndexInformer
	cancel context.CancelFunc
	done   chan struct{}
}

// NewFactory creates a factory. client may be nil when only ForResource is
// used (with WithDynamicClient). Of opts, the SharedOptions apply to every
// informer (tracing, metrics, logger, transform...; the actor system is
// the one they share) and the factory-only ones to the factory (namespace,
// list tweak, dynamic client).
func NewFactory(client kubernetes.Interface, defaultResync time.Duration, opts ...FactoryOption) *Factory {
	o, shared := buildFactoryOptions(opts)
	f := &Factory{
		client:        client,
		defaultResync: defaultResync,
		opts:          o,
		informers:     map[schema.GroupVersionResource]*factoryEntry{},
	}
	f.sys, f.ownSystem = systemFor(o, loggerOrDiscard(o.logger))
	f.informerOpts = append(shared, WithActorSystem(f.sys))
	return f
}

// ActorSystem is the actor system the factory's informers share: the one
// given with WithActorSystem, one of the factory's own if it was given
// WithLogger, else the process-wide one of the informers that need none of
// their own. Do not shut it down.
func (f *Factory) ActorSystem() *actor.ActorSystem { return f.sys }

// ListWatchable is what a typed client-go resource client offers, e.g.
// client.CoreV1().Pods(namespace).
type ListWatchable[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Typed is a typed view of one of a factory's informers, or of one made by
// NewTyped. It is a cache.TypedSharedIndexInformer[T] (see typed.go).
type Typed[T Object] struct {
	*SharedIndexInformer
	gvr schema.GroupVersionResource
}

// Informer returns the informer.
func (t Typed[T]) Informer() *SharedIndexInformer { return t.SharedIndexInformer }

// Lister returns a typed lister over the informer's cache.
func (t Typed[T]) Lister() listers.ResourceIndexer[T] {
	return listers.New[T](t.GetIndexer(), t.gvr.GroupResource())
}

// For returns the factory's informer for T, creating it on first use.
// clientFor returns the typed client of T's resource for a namespace
// ("" for all namespaces or a cluster-scoped resource).
func For[T Object, L runtime.Object](f *Factory, gvr schema.GroupVersionResource, clientFor func(c kubernetes.Interface, namespace string) ListWatchable[L]) Typed[T] {
	inf := f.informerFor(gvr, func() (cache.ListerWatcher, runtime.Object) {
		c := clientFor(f.client, f.opts.namespace)
		return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				f.tweak(&o)
				return c.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				f.tweak(&o)
				return c.Watch(ctx, o)
			},
		}, watchListSemantics{f.client, c}), newObject[T]()
	})
	return Typed[T]{SharedIndexInformer: inf, gvr: gvr}
}

// Pods is For[*corev1.Pod].
func Pods(f *Factory) Typed[*corev1.Pod] {
	return For[*corev1.Pod](f, corev1.SchemeGroupVersion.WithResource("pods"),
		func(c kubernetes.Interface, ns string) ListWatchable[*corev1.PodList] { return c.CoreV1().Pods(ns) })
}

// ConfigMaps is For[*corev1.ConfigMap].
func ConfigMaps(f *Factory) Typed[*corev1.ConfigMap] {
	return For[*corev1.ConfigMap](f, corev1.SchemeGroupVersion.WithResource("configmaps"),
		func(c kubernetes.Interface, ns string) ListWatchable[*corev1.ConfigMapList] {
			return c.CoreV1().ConfigMaps(ns)
		})
}

// Secrets is For[*corev1.Secret].
func Secrets(f *Factory) Typed[*corev1.Secret] {
	return For[*corev1.Secret](f, corev1.SchemeGroupVersion.WithResource("secrets"),
		func(c kubernetes.Interface, ns string) ListWatchable[*corev1.SecretList] {
			return c.CoreV1().Secrets(ns)
		})
}

// Services is For[*corev1.Service].
func Services(f *Factory) Typed[*corev1.Service] {
	return For[*corev1.Service](f, corev1.SchemeGroupVersion.WithResource("services"),
		func(c kubernetes.Interface, ns string) ListWatchable[*corev1.ServiceList] {
			return c.CoreV1().Services(ns)
		})
}

// Namespaces is For[*corev1.Namespace] (cluster-scoped).
func Namespaces(f *Factory) Typed[*corev1.Namespace] {
	return For[*corev1.Namespace](f, corev1.SchemeGroupVersion.WithResource("namespaces"),
		func(c kubernetes.Interface, _ string) ListWatchable[*corev1.NamespaceList] {
			return c.CoreV1().Namespaces()
		})
}

// Nodes is For[*corev1.Node] (cluster-scoped).
func Nodes(f *Factory) Typed[*corev1.Node] {
	return For[*corev1.Node](f, corev1.SchemeGroupVersion.WithResource("nodes"),
		func(c kubernetes.Interface, _ string) ListWatchable[*corev1.NodeList] { return c.CoreV1().Nodes() })
}

// Deployments is For[*appsv1.Deployment].
func Deployments(f *Factory) Typed[*appsv1.Deployment] {
	return For[*appsv1.Deployment](f, appsv1.SchemeGroupVersion.WithResource("deployments"),
		func(c kubernetes.Interface, ns string) ListWatchable[*appsv1.DeploymentList] {
			return c.AppsV1().Deployments(ns)
		})
}

// ForResource returns the factory's informer for a resource served by the
// dynamic client (custom resources included), with objects as
// *unstructured.Unstructured. It panics if the factory has no dynamic client.
func (f *Factory) ForResource(gvr schema.GroupVersionResource) *SharedIndexInformer {
	if f.opts.dynamic == nil {
		panic("actorinformer: Factory.ForResource needs WithDynamicClient")
	}
	return f.informerFor(gvr, func() (cache.ListerWatcher, runtime.Object) {
		var ri = f.opts.dynamic.Resource(gvr)
		var c interface {
			List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error)
			Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
		} = ri
		if f.opts.namespace != "" {
			c = ri.Namespace(f.opts.namespace)
		}
		return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				f.tweak(&o)
				return c.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				f.tweak(&o)
				return c.Watch(ctx, o)
			},
		}, watchListSemantics{f.opts.dynamic, c}), &unstructured.Unstructured{}
	})
}

// watchListSemantics tells the reflector that the clients cannot stream
// lists (WatchList) if either says so, as client-go's fake clientsets do.
// client-go's generated informers ask the clientset; a factory's typed
// client (For's clientFor) may also be a fake of its own, so it is asked
// too. Without this the reflector would wait for the bookmark that ends a
// WatchList stream, which the fakes never send.
type watchListSemantics struct{ client, resourceClient any }

func (w watchListSemantics) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(w.client) ||
		watchlist.DoesClientNotSupportWatchListSemantics(w.resourceClient)
}

func (f *Factory) tweak(o *metav1.ListOptions) {
	if f.opts.tweak != nil {
		f.opts.tweak(o)
	}
}

func newObject[T runtime.Object]() T {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer {
		panic(fmt.Sprintf("actorinformer: %T is not a pointer to an object type", zero))
	}
	return reflect.New(t.Elem()).Interface().(T)
}

func (f *Factory) informerFor(gvr schema.GroupVersionResource, build func() (cache.ListerWatcher, runtime.Object)) *SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.informers[gvr]; ok {
		return e.inf
	}
	lw, example := build()
	opts := append(append([]Option(nil), f.informerOpts...), WithResource(gvr), WithName(resourceName(gvr)))
	inf := NewSharedIndexInformer(lw, example, f.defaultResync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, opts...)
	f.informers[gvr] = &factoryEntry{inf: inf}
	return inf
}

func resourceName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource
	}
	return gvr.Resource + "." + gvr.Group
}

// Start runs every informer created so far that is not running yet. They
// stop when stopCh is closed, StopInformer is called, or Shutdown.
func (f *Factory) Start(stopCh <-chan struct{}) {
	f.StartWithContext(wait.ContextForChannel(stopCh))
}

// StartWithContext runs every informer created so far that is not running
// yet. They stop when ctx is cancelled, StopInformer is called, or
// Shutdown. It does not block.
func (f *Factory) StartWithContext(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shuttingDown {
		return
	}
	for _, e := range f.informers {
		if e.cancel != nil {
			continue
		}
		ictx, cancel := context.WithCancel(ctx)
		e.cancel, e.done = cancel, make(chan struct{})
		f.wg.Go(func() {
			defer close(e.done)
			defer cancel()
			e.inf.RunWithContext(ictx)
		})
	}
}

// started returns the informers started so far.
func (f *Factory) started() map[schema.GroupVersionResource]*SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	started := map[schema.GroupVersionResource]*SharedIndexInformer{}
	for gvr, e := range f.informers {
		if e.cancel != nil {
			started[gvr] = e.inf
		}
	}
	return started
}

// waitFor waits, without polling, until every informer of infs has synced
// or ctx is done.
func waitFor(ctx context.Context, infs map[schema.GroupVersionResource]*SharedIndexInformer) {
	checkers := make([]cache.DoneChecker, 0, len(infs))
	for _, inf := range infs {
		checkers = append(checkers, inf.HasSyncedChecker())
	}
	cache.WaitFor(ctx, "", checkers...)
}

// WaitForCacheSync waits until every started informer has synced or stopCh
// is closed, and reports each one's state.
func (f *Factory) WaitForCacheSync(stopCh <-chan struct{}) map[schema.GroupVersionResource]bool {
	started := f.started()
	waitFor(wait.ContextForChannel(stopCh), started)
	res := make(map[schema.GroupVersionResource]bool, len(started))
	for gvr, inf := range started {
		res[gvr] = inf.HasSynced()
	}
	return res
}

// WaitForCacheSyncWithContext waits until every started informer has synced
// or ctx is done, like client-go's SharedInformerFactory method of that
// name. Synced is keyed by the type of the informers' objects: the
// informers of ForResource all hold *unstructured.Unstructured and share
// one entry, true only if all of them have synced (WaitForCacheSync reports
// them one by one). Err is context.Cause(ctx) if an informer has not synced.
func (f *Factory) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	started := f.started()
	waitFor(ctx, started)
	res := cache.SyncResult{Synced: make(map[reflect.Type]bool, len(started))}
	failed := false
	for _, inf := range started {
		t := reflect.TypeOf(inf.example)
		synced := inf.HasSynced()
		if prev, ok := res.Synced[t]; ok {
			synced = synced && prev
		}
		res.Synced[t] = synced
		failed = failed || !synced
	}
	if failed {
		res.Err = context.Cause(ctx)
	}
	return res
}

// StopInformer stops one informer, waits for its actors to end and forgets
// it: a later For or ForResource creates a new one. It reports whether the
// factory had that informer.
func (f *Factory) StopInformer(gvr schema.GroupVersionResource) bool {
	f.mu.Lock()
	e, ok := f.informers[gvr]
	if ok {
		delete(f.informers, gvr)
	}
	f.mu.Unlock()
	if !ok {
		return false
	}
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	return true
}

// Shutdown stops every informer, waits for them, and shuts the factory's own
// actor system down. The factory starts nothing afterwards. Calling it again
// does nothing.
func (f *Factory) Shutdown() {
	f.mu.Lock()
	f.shuttingDown = true
	for _, e := range f.informers {
		if e.cancel != nil {
			e.cancel()
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
	if f.ownSystem {
		f.sysDown.Do(f.sys.Shutdown)
	}
}
