package fidelity

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/actorinformer/actorinformer/actors"
)

// informerImpl is one of the two informers every ported test runs on. Only
// the constructors differ; the test body is the same.
type informerImpl struct {
	name string
	// ours is true for actorinformer.
	ours bool
	// newSharedIndexInformer is cache.NewSharedIndexInformer's signature.
	newSharedIndexInformer func(lw cache.ListerWatcher, exampleObject runtime.Object, defaultEventHandlerResyncPeriod time.Duration, indexers cache.Indexers) cache.SharedIndexInformer
	// newTransformingInformer stands for cache.NewTransformingInformer (and
	// cache.NewInformer, which is the same with no transform), used by
	// client-go's controller tests: an informer with one handler whose
	// resync period is the informer's, returning its store and something to
	// run. client-go's side calls client-go's constructor; ours builds a
	// shared informer, sets the transform and adds the handler.
	newTransformingInformer func(lw cache.ListerWatcher, objType runtime.Object, resyncPeriod time.Duration, h cache.ResourceEventHandler, transformer cache.TransformFunc) (cache.Store, cache.Controller)
}

var impls = []informerImpl{
	{
		name: "client-go",
		newSharedIndexInformer: func(lw cache.ListerWatcher, exampleObject runtime.Object, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(lw, exampleObject, resync, indexers)
		},
		newTransformingInformer: func(lw cache.ListerWatcher, objType runtime.Object, resync time.Duration, h cache.ResourceEventHandler, transformer cache.TransformFunc) (cache.Store, cache.Controller) {
			return cache.NewTransformingInformer(lw, objType, resync, h, transformer)
		},
	},
	{
		name: "actorinformer",
		ours: true,
		newSharedIndexInformer: func(lw cache.ListerWatcher, exampleObject runtime.Object, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
			return actors.NewSharedIndexInformer(lw, exampleObject, resync, indexers)
		},
		newTransformingInformer: func(lw cache.ListerWatcher, objType runtime.Object, resync time.Duration, h cache.ResourceEventHandler, transformer cache.TransformFunc) (cache.Store, cache.Controller) {
			inf := actors.NewSharedIndexInformer(lw, objType, resync, cache.Indexers{})
			if transformer != nil {
				if err := inf.SetTransform(transformer); err != nil {
					panic(err) // cannot happen: the informer has not started
				}
			}
			if _, err := inf.AddEventHandler(h); err != nil {
				panic(err) // cannot happen: the informer has not stopped
			}
			return inf.GetStore(), inf
		},
	},
}

// NewSharedInformer is cache.NewSharedInformer on this implementation.
func (i informerImpl) NewSharedInformer(lw cache.ListerWatcher, exampleObject runtime.Object, defaultEventHandlerResyncPeriod time.Duration) cache.SharedIndexInformer {
	return i.newSharedIndexInformer(lw, exampleObject, defaultEventHandlerResyncPeriod, cache.Indexers{})
}

// NewInformer is cache.NewInformer on this implementation.
func (i informerImpl) NewInformer(lw cache.ListerWatcher, objType runtime.Object, resyncPeriod time.Duration, h cache.ResourceEventHandler) (cache.Store, cache.Controller) {
	return i.newTransformingInformer(lw, objType, resyncPeriod, h, nil)
}

// NewTransformingInformer is cache.NewTransformingInformer on this
// implementation.
func (i informerImpl) NewTransformingInformer(lw cache.ListerWatcher, objType runtime.Object, resyncPeriod time.Duration, h cache.ResourceEventHandler, transformer cache.TransformFunc) (cache.Store, cache.Controller) {
	return i.newTransformingInformer(lw, objType, resyncPeriod, h, transformer)
}

// forEachInformer runs test once per implementation, as the subtests
// "client-go" and "actorinformer".
func forEachInformer(t *testing.T, test func(t *testing.T, impl informerImpl)) {
	t.Helper()
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) { test(t, impl) })
	}
}

// newFakeControllerSource is client-go's test helper of the same name
// (tools/cache/util_test.go).
func newFakeControllerSource(tb testing.TB) *fcache.FakeControllerSource {
	source := fcache.NewFakeControllerSource()
	tb.Cleanup(source.Shutdown)
	return source
}

// threadSafeBuffer is client-go's test helper of the same name
// (tools/cache/util_test.go): a thread-safe wrapper around bytes.Buffer.
type threadSafeBuffer struct {
	buffer bytes.Buffer
	mu     sync.Mutex
}

func (b *threadSafeBuffer) Write(p []byte) (n int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buffer.Write(p)
}

func (b *threadSafeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buffer.String()
}

// The helpers below stand in for the few testify functions client-go's
// tests use (testify is not a dependency of this module).

// eventually is require.Eventually / assert.Eventually: it polls cond every
// tick until it holds or waitFor has passed, and reports whether it held.
func eventually(cond func() bool, waitFor, tick time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-ticker.C:
		}
	}
}

// requireEventually fails the test at once if cond does not hold in time.
func requireEventually(t *testing.T, cond func() bool, waitFor, tick time.Duration, msg string) {
	t.Helper()
	if !eventually(cond, waitFor, tick) {
		t.Fatalf("condition never satisfied: %s", msg)
	}
}

// assertEventually reports a failure and goes on if cond does not hold in
// time.
func assertEventually(t *testing.T, cond func() bool, waitFor, tick time.Duration, msg string) bool {
	t.Helper()
	if !eventually(cond, waitFor, tick) {
		t.Errorf("condition never satisfied: %s", msg)
		return false
	}
	return true
}

// noError is assert.NoError.
func noError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// requireNoError is require.NoError.
func requireNoError(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		if len(msgAndArgs) > 0 {
			t.Fatalf("unexpected error: %v: "+msgAndArgs[0].(string), append([]any{err}, msgAndArgs[1:]...)...)
		}
		t.Fatalf("unexpected error: %v", err)
	}
}
