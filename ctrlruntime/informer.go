package ctrlruntime

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// NewInformerFunc is the type of controller-runtime's cache.Options.NewInformer.
type NewInformerFunc = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// NewInformer returns a function for controller-runtime's
// cache.Options.NewInformer that builds actorinformer's informers with opts,
// each named after its kind (see [Informers.NewInformer]). Kinds are looked
// up in client-go's scheme (k8s.io/client-go/kubernetes/scheme) and resources
// guessed from kinds; use [Informers] for a scheme and REST mapper of your
// own.
//
// Unless opts hold actors.WithActorSystem, each informer runs its own actor
// system, shut down when the informer stops. With actors.WithActorSystem the
// informers share that system and nothing here shuts it down: [Informers]
// shares one system and shuts it down when the manager's cache stops.
//
// opts are actors.SharedOptions: the informers are named after their kinds
// here, so actors.WithName and actors.WithResource do not compile.
func NewInformer(opts ...actors.SharedOption) NewInformerFunc {
	n := &namer{}
	base := informerOptions(opts)
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		return actors.NewSharedIndexInformer(lw, obj, resync, idx, append(base[:len(base):len(base)], n.options(obj)...)...)
	}
}

func informerOptions(opts []actors.SharedOption) []actors.Option {
	out := make([]actors.Option, 0, len(opts)+2)
	for _, o := range opts {
		out = append(out, o)
	}
	return out
}

// Informers builds the informers of one controller-runtime cache (a
// manager's) in one shared actor system, and shuts that system down when the
// cache stops. Give a manager [Informers.NewCache] as manager.Options.NewCache;
// or give [Informers.NewInformer] to cache.Options.NewInformer and call
// [Informers.Shutdown] once the cache has stopped. Use one Informers per
// manager (cache): the system is shut down when its cache stops.
//
// Its methods may be called by multiple goroutines simultaneously.
type Informers struct {
	opts []actors.Option
	n    namer

	mu       sync.Mutex
	sys      *actor.ActorSystem
	ownSys   bool // sys was created here: Shutdown shuts it down
	shutdown bool
}

// NewInformers returns an Informers whose informers are built with opts
// (tracing, metrics, logger...). With actors.WithActorSystem they run in
// that system, which Shutdown leaves running; without it, in one system of
// the Informers' own. opts are actors.SharedOptions: the informers are named
// after their kinds here, so actors.WithName and actors.WithResource do not
// compile.
func NewInformers(opts ...actors.SharedOption) *Informers {
	i := &Informers{opts: informerOptions(opts)}
	if sys := actors.ActorSystemOf(i.opts...); sys != nil {
		i.sys = sys
	}
	return i
}

// NewInformer is controller-runtime's cache.Options.NewInformer. The informer
// runs in the shared actor system and is named after its kind:
// Kind.version[.group], with "/metadata" or "/unstructured" for metadata-only
// and unstructured informers and "#2", "#3"... for the next informers of the
// same name (controller-runtime makes one per namespace with
// cache.Options.DefaultNamespaces). The group, version and resource are set
// for span and metric attributes.
func (i *Informers) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
	opts := append(i.opts[:len(i.opts):len(i.opts)], i.n.options(obj)...)
	return actors.NewSharedIndexInformer(lw, obj, resync, idx, append(opts, actors.WithActorSystem(i.ActorSystem()))...)
}

// ActorSystem returns the actor system the informers run in, created on
// first use.
func (i *Informers) ActorSystem() *actor.ActorSystem {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.sys == nil {
		discard := slog.New(slog.DiscardHandler)
		i.sys = actors.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return discard }))
		i.ownSys = true
	}
	return i.sys
}

// Shutdown shuts the actor system down, unless it was given with
// actors.WithActorSystem. Call it only once every informer has stopped
// (NewCache's cache does, when it stops); later calls do nothing.
func (i *Informers) Shutdown() {
	i.mu.Lock()
	sys := i.sys
	done := i.shutdown || !i.ownSys
	i.shutdown = true
	i.mu.Unlock()
	if sys != nil && !done {
		sys.Shutdown()
	}
}

// NewCache is a cache.NewCacheFunc (manager.Options.NewCache): it builds
// controller-runtime's cache with [Informers.NewInformer] as its
// NewInformer, kinds named through opts.Scheme and resources through
// opts.Mapper. The cache's Start, once every informer has stopped, shuts the
// actor system down.
func (i *Informers) NewCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	i.n.set(opts.Scheme, opts.Mapper)
	opts.NewInformer = i.NewInformer
	c, err := cache.New(config, opts)
	if err != nil {
		return nil, err
	}
	return &stoppingCache{Cache: c, i: i}, nil
}

// stoppingCache shuts the actor system down after the cache's Start, which
// waits for every informer to stop, returns.
type stoppingCache struct {
	cache.Cache
	i *Informers
}

func (c *stoppingCache) Start(ctx context.Context) error {
	defer c.i.Shutdown()
	return c.Cache.Start(ctx)
}

// namer names informers after the kind of their example object.
type namer struct {
	mu     sync.Mutex
	scheme *runtime.Scheme
	mapper meta.RESTMapper
	seen   map[string]int
}

func (n *namer) set(s *runtime.Scheme, m meta.RESTMapper) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.scheme, n.mapper = s, m
}

// options returns WithName and, when the kind is known, WithResource for
// obj's informer.
func (n *namer) options(obj runtime.Object) []actors.Option {
	n.mu.Lock()
	s, m := n.scheme, n.mapper
	n.mu.Unlock()
	gvk, variant := kindOf(obj, s)
	var opts []actors.Option
	base := ""
	if gvk.Kind != "" {
		base = gvkName(gvk)
		opts = append(opts, actors.WithResource(resourceOf(gvk, m)))
	} else {
		base = fmt.Sprintf("%T", obj)
	}
	if variant != "" {
		base += "/" + variant
	}
	n.mu.Lock()
	if n.seen == nil {
		n.seen = map[string]int{}
	}
	n.seen[base]++
	k := n.seen[base]
	n.mu.Unlock()
	name := base
	if k > 1 {
		name = fmt.Sprintf("%s#%d", base, k)
	}
	return append(opts, actors.WithName(name))
}

// kindOf returns obj's kind: from its TypeMeta for metadata-only and
// unstructured objects (variant "metadata", "unstructured"), else from the
// scheme (client-go's when s is nil).
func kindOf(obj runtime.Object, s *runtime.Scheme) (gvk schema.GroupVersionKind, variant string) {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return o.GroupVersionKind(), "metadata"
	case *unstructured.Unstructured:
		return o.GroupVersionKind(), "unstructured"
	}
	if s == nil {
		s = scheme.Scheme
	}
	if gvks, _, err := s.ObjectKinds(obj); err == nil && len(gvks) > 0 {
		return gvks[0], ""
	}
	return obj.GetObjectKind().GroupVersionKind(), ""
}

// gvkName is Kind.version.group, or Kind.version for the core group.
func gvkName(gvk schema.GroupVersionKind) string {
	parts := []string{gvk.Kind}
	if gvk.Version != "" {
		parts = append(parts, gvk.Version)
	}
	if gvk.Group != "" {
		parts = append(parts, gvk.Group)
	}
	return strings.Join(parts, ".")
}

// resourceOf maps gvk to its resource through m, or guesses it (lower-case
// plural) when there is no mapper or it does not know the kind.
func resourceOf(gvk schema.GroupVersionKind, m meta.RESTMapper) schema.GroupVersionResource {
	if m != nil {
		if mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			return mapping.Resource
		}
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	return gvr
}
