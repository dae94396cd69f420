/*
Copyright 2015 The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// This file is derived from k8s.io/client-go v0.37.2,
// tools/cache/controller_test.go. Each test runs as two subtests,
// "client-go" and "actorinformer", through forEachInformer. Tests written
// upstream against cache.NewInformer / cache.NewTransformingInformer keep
// those constructors on client-go's side; on ours they become
// actors.NewSharedIndexInformer with the transform set and the one handler
// added (informerImpl.NewTransformingInformer). Tests written upstream
// against cache.New(Config) with the unexported processDeltas wiring are
// ported onto the shared informer (cache.NewSharedIndexInformer on
// client-go's side): their subject is what the informer's handler and store
// observe. Every other change is said at the test; testify calls are
// replaced by the equivalent helpers of harness_test.go.
//
// Not ported:
//   - Example: a controller built from cache.New(Config) with its own
//     Process function reading the queue's Deltas and calling the unexported
//     fifo.keyOf: controller internals with no counterpart in ours.
//   - TestPanicPropagated: its subject is cache.NewInformer calling the
//     handler on the controller's own goroutine, so that a handler's panic
//     comes out of Run. A shared informer (client-go's or ours) calls
//     handlers on their own goroutines; and ours deliberately recovers a
//     handler's panic.
//   - TestDeletionHandlingObjectToName, TestDeletedObjectGetObjectName,
//     TestDeletedObjectGetKey: pure helpers (cache.DeletionHandlingObjectToName,
//     cache.DeletedObject), no informer involved.
//   - TestProcessDeltasInBatch: tests the unexported processDeltasInBatch
//     with a mock TransactionStore.
//   - TestStoreResourceVersionWithNonMetaTransform: it needs a queue and a
//     store with a custom key function and a transform to a non-object
//     (string); a shared informer's key function is fixed
//     (DeletionHandlingMetaNamespaceKeyFunc) and cannot key a string.
//   - ExampleNewInformer is ported as the test TestExampleNewInformer (an
//     example cannot run twice).

package fidelity

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	. "k8s.io/client-go/tools/cache" //nolint:staticcheck // keeps the ported code as upstream wrote it
	fcache "k8s.io/client-go/tools/cache/testing"
	"k8s.io/klog/v2/ktesting"

	"sigs.k8s.io/randfill"
)

// TestExampleNewInformer is upstream's ExampleNewInformer; the expected
// output (the three keys, sorted) is compared instead of printed.
func TestExampleNewInformer(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		// source simulates an apiserver object endpoint.
		source := fcache.NewFakeControllerSource()
		defer source.Shutdown()

		// Let's do threadsafe output to get predictable test results.
		deletionCounter := make(chan string, 1000)

		// Make a controller that immediately deletes anything added to it, and
		// logs anything deleted.
		_, controller := impl.NewInformer(
			source,
			&v1.Pod{},
			time.Millisecond*100,
			ResourceEventHandlerDetailedFuncs{
				AddFunc: func(obj interface{}, isInInitialList bool) {
					source.Delete(obj.(runtime.Object))
				},
				DeleteFunc: func(obj interface{}) {
					key, err := DeletionHandlingMetaNamespaceKeyFunc(obj)
					if err != nil {
						key = "oops something went wrong with the key"
					}

					// Report this deletion.
					deletionCounter <- key
				},
			},
		)

		// Run the controller and run it until we cancel.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// (Port: the informer is also waited for, so that the source's
		// Shutdown does not race with its watch; upstream lets the goroutine
		// end after the example.)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			controller.RunWithContext(ctx)
		}()
		defer wg.Wait()
		defer cancel()

		// Let's add a few objects to the source.
		testIDs := []string{"a-hello", "b-controller", "c-framework"}
		for _, name := range testIDs {
			// Note that these pods are not valid-- the fake source doesn't
			// call validation or anything.
			source.Add(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}

		// Let's wait for the controller to process the things we just added.
		outputSet := sets.Set[string]{}
		for range testIDs {
			select {
			case key := <-deletionCounter:
				outputSet.Insert(key)
			case <-time.After(wait.ForeverTestTimeout):
				t.Fatalf("timed out waiting for the deletions, got %v", sets.List(outputSet))
			}
		}

		// Output:
		// a-hello
		// b-controller
		// c-framework
		if got, want := sets.List(outputSet), []string{"a-hello", "b-controller", "c-framework"}; !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestHammerController(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		// This test executes a bunch of requests through the fake source and
		// controller framework to make sure there's no locking/threading
		// errors. If an error happens, it should hang forever or trigger the
		// race detector.

		// source simulates an apiserver object endpoint.
		source := newFakeControllerSource(t)

		// Let's do threadsafe output to get predictable test results.
		outputSetLock := sync.Mutex{}
		// map of key to operations done on the key
		outputSet := map[string][]string{}

		recordFunc := func(eventType string, obj interface{}) {
			key, err := DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				t.Errorf("something wrong with key: %v", err)
				key = "oops something went wrong with the key"
			}

			// Record some output when items are deleted.
			outputSetLock.Lock()
			defer outputSetLock.Unlock()
			outputSet[key] = append(outputSet[key], eventType)
		}

		// Make a controller which just logs all the changes it gets.
		_, controller := impl.NewInformer(
			source,
			&v1.Pod{},
			time.Millisecond*100,
			ResourceEventHandlerDetailedFuncs{
				AddFunc:    func(obj interface{}, isInInitialList bool) { recordFunc("add", obj) },
				UpdateFunc: func(oldObj, newObj interface{}) { recordFunc("update", newObj) },
				DeleteFunc: func(obj interface{}) { recordFunc("delete", obj) },
			},
		)

		if controller.HasSynced() {
			t.Errorf("Expected HasSynced() to return false before we started the controller")
		}

		// Run the controller and run it until we cancel.
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		var controllerWG sync.WaitGroup
		controllerWG.Add(1)
		go func() {
			defer controllerWG.Done()
			controller.RunWithContext(ctx)
		}()

		// Let's wait for the controller to do its initial sync
		wait.Poll(100*time.Millisecond, wait.ForeverTestTimeout, func() (bool, error) {
			return controller.HasSynced(), nil
		})
		if !controller.HasSynced() {
			t.Errorf("Expected HasSynced() to return true after the initial sync")
		}

		wg := sync.WaitGroup{}
		const threads = 3
		wg.Add(threads)
		for i := 0; i < threads; i++ {
			go func() {
				defer wg.Done()
				// Let's add a few objects to the source.
				currentNames := sets.Set[string]{}
				rs := rand.NewSource(rand.Int63())
				f := randfill.New().NilChance(.5).NumElements(0, 2).RandSource(rs)
				for i := 0; i < 100; i++ {
					var name string
					var isNew bool
					if currentNames.Len() == 0 || rand.Intn(3) == 1 {
						f.Fill(&name)
						isNew = true
					} else {
						l := sets.List(currentNames)
						name = l[rand.Intn(len(l))]
					}

					pod := &v1.Pod{}
					f.Fill(pod)
					pod.ObjectMeta.Name = name
					pod.ObjectMeta.Namespace = "default"
					// Add, update, or delete randomly.
					// Note that these pods are not valid-- the fake source doesn't
					// call validation or perform any other checking.
					if isNew {
						currentNames.Insert(name)
						source.Add(pod)
						continue
					}
					switch rand.Intn(2) {
					case 0:
						currentNames.Insert(name)
						source.Modify(pod)
					case 1:
						currentNames.Delete(name)
						source.Delete(pod)
					}
				}
			}()
		}
		wg.Wait()

		// Let's wait for the controller to finish processing the things we just added.
		// TODO: look in the queue to see how many items need to be processed.
		time.Sleep(100 * time.Millisecond)
		cancel()

		// Before we permanently lock this mutex, we have to be sure
		// that the controller has stopped running. At this point,
		// all goroutines should have stopped. Leak checking is
		// done by TestMain.
		controllerWG.Wait()

		outputSetLock.Lock()
		t.Logf("got: %d keys", len(outputSet)) // (Port: upstream logs the whole map.)
	})
}

type listWatchWithUnSupportedWatchListSemanticsWrapper struct {
	*ListWatch
}

func (lw listWatchWithUnSupportedWatchListSemanticsWrapper) IsWatchListSemanticsUnSupported() bool {
	return true
}

func toListWatcherWithUnSupportedWatchListSemantics(lw *ListWatch) ListerWatcher {
	return listWatchWithUnSupportedWatchListSemanticsWrapper{
		lw,
	}
}

func TestUpdate(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		// This test is going to exercise the various paths that result in a
		// call to update.

		// source simulates an apiserver object endpoint.
		source := newFakeControllerSource(t)

		const (
			FROM = "from"
			TO   = "to"
		)

		// These are the transitions we expect to see; because this is
		// asynchronous, there are a lot of valid possibilities.
		type pair struct{ from, to string }
		allowedTransitions := map[pair]bool{
			{FROM, TO}: true,

			// Because a resync can happen when we've already observed one
			// of the above but before the item is deleted.
			{TO, TO}: true,
			// Because a resync could happen before we observe an update.
			{FROM, FROM}: true,
		}

		pod := func(name, check string, final bool) *v1.Pod {
			p := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name:   name,
					Labels: map[string]string{"check": check},
				},
			}
			if final {
				p.Labels["final"] = "true"
			}
			return p
		}
		deletePod := func(p *v1.Pod) bool {
			return p.Labels["final"] == "true"
		}

		tests := []func(string){
			func(name string) {
				name = "a-" + name
				source.Add(pod(name, FROM, false))
				source.Modify(pod(name, TO, true))
			},
		}

		const threads = 3

		var testDoneWG sync.WaitGroup
		testDoneWG.Add(threads * len(tests))

		// Make a controller that deletes things once it observes an update.
		// It calls Done() on the wait group on deletions so we can tell when
		// everything we've added has been deleted.
		watchCh := make(chan struct{})
		_, controller := impl.NewInformer(
			toListWatcherWithUnSupportedWatchListSemantics(&ListWatch{
				WatchFunc: func(options metav1.ListOptions) (watch.Interface, error) {
					watch, err := source.Watch(options)
					close(watchCh)
					return watch, err
				},
				ListFunc: func(options metav1.ListOptions) (runtime.Object, error) {
					return source.List(options)
				},
			}),
			&v1.Pod{},
			0,
			ResourceEventHandlerFuncs{
				UpdateFunc: func(oldObj, newObj interface{}) {
					o, n := oldObj.(*v1.Pod), newObj.(*v1.Pod)
					from, to := o.Labels["check"], n.Labels["check"]
					if !allowedTransitions[pair{from, to}] {
						t.Errorf("observed transition %q -> %q for %v", from, to, n.Name)
					}
					if deletePod(n) {
						source.Delete(n)
					}
				},
				DeleteFunc: func(obj interface{}) {
					testDoneWG.Done()
				},
			},
		)

		// Run the controller and run it until we cancel.
		// Once Run() is called, calls to testDoneWG.Done() might start, so
		// all testDoneWG.Add() calls must happen before this point
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// (Port: the informer is also waited for before the test ends, so
		// that it is stopped before the source shuts down.)
		var controllerWG sync.WaitGroup
		controllerWG.Add(1)
		go func() {
			defer controllerWG.Done()
			controller.RunWithContext(ctx)
		}()
		defer controllerWG.Wait()
		defer cancel()
		<-watchCh

		// run every test a few times, in parallel
		var wg sync.WaitGroup
		wg.Add(threads * len(tests))
		for i := 0; i < threads; i++ {
			for j, f := range tests {
				go func(name string, f func(string)) {
					defer wg.Done()
					f(name)
				}(fmt.Sprintf("%v-%v", i, j), f)
			}
		}
		wg.Wait()

		// Let's wait for the controller to process the things we just added.
		testDoneWG.Wait()
	})
}

func TestTransformingInformer(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		// source simulates an apiserver object endpoint.
		source := newFakeControllerSource(t)

		makePod := func(name, generation string) *v1.Pod {
			return &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name:      name,
					Namespace: "namespace",
					Labels:    map[string]string{"generation": generation},
				},
				Spec: v1.PodSpec{
					Hostname:  "hostname",
					Subdomain: "subdomain",
				},
			}
		}
		expectedPod := func(name, generation string) *v1.Pod {
			pod := makePod(name, generation)
			pod.Spec.Hostname = "new-hostname"
			pod.Spec.Subdomain = ""
			pod.Spec.NodeName = "nodename"
			return pod
		}

		source.Add(makePod("pod1", "1"))
		source.Modify(makePod("pod1", "2"))

		type event struct {
			eventType watch.EventType
			previous  interface{}
			current   interface{}
		}
		events := make(chan event, 10)
		recordEvent := func(eventType watch.EventType, previous, current interface{}) {
			events <- event{eventType: eventType, previous: previous, current: current}
		}
		verifyEvent := func(eventType watch.EventType, previous, current interface{}) {
			select {
			case event := <-events:
				if event.eventType != eventType {
					t.Errorf("expected type %v, got %v", eventType, event.eventType)
				}
				if !apiequality.Semantic.DeepEqual(event.previous, previous) {
					t.Errorf("expected previous object %#v, got %#v", previous, event.previous)
				}
				if !apiequality.Semantic.DeepEqual(event.current, current) {
					t.Errorf("expected object %#v, got %#v", current, event.current)
				}
			case <-time.After(wait.ForeverTestTimeout):
				t.Errorf("failed to get event")
			}
		}

		podTransformer := func(obj interface{}) (interface{}, error) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return nil, fmt.Errorf("unexpected object type: %T", obj)
			}
			pod.Spec.Hostname = "new-hostname"
			pod.Spec.Subdomain = ""
			pod.Spec.NodeName = "nodename"

			// Clear out ResourceVersion to simplify comparisons.
			pod.ResourceVersion = ""

			return pod, nil
		}

		store, controller := impl.NewTransformingInformer(
			source,
			&v1.Pod{},
			0,
			ResourceEventHandlerDetailedFuncs{
				AddFunc:    func(obj interface{}, isInInitialList bool) { recordEvent(watch.Added, nil, obj) },
				UpdateFunc: func(oldObj, newObj interface{}) { recordEvent(watch.Modified, oldObj, newObj) },
				DeleteFunc: func(obj interface{}) { recordEvent(watch.Deleted, obj, nil) },
			},
			podTransformer,
		)

		verifyStore := func(expectedItems []interface{}) {
			items := store.List()
			if len(items) != len(expectedItems) {
				t.Errorf("unexpected items %v, expected %v", items, expectedItems)
			}
			for _, expectedItem := range expectedItems {
				found := false
				for _, item := range items {
					if apiequality.Semantic.DeepEqual(item, expectedItem) {
						found = true
					}
				}
				if !found {
					t.Errorf("expected item %v not found in %v", expectedItem, items)
				}
			}
		}

		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// (Port: the informer is also waited for before the test ends.)
		var controllerWG sync.WaitGroup
		controllerWG.Add(1)
		go func() {
			defer controllerWG.Done()
			controller.RunWithContext(ctx)
		}()
		defer controllerWG.Wait()
		defer cancel()

		verifyEvent(watch.Added, nil, expectedPod("pod1", "2"))
		verifyStore([]interface{}{expectedPod("pod1", "2")})

		source.Add(makePod("pod2", "1"))
		verifyEvent(watch.Added, nil, expectedPod("pod2", "1"))
		verifyStore([]interface{}{expectedPod("pod1", "2"), expectedPod("pod2", "1")})

		source.Add(makePod("pod3", "1"))
		verifyEvent(watch.Added, nil, expectedPod("pod3", "1"))

		source.Modify(makePod("pod2", "2"))
		verifyEvent(watch.Modified, expectedPod("pod2", "1"), expectedPod("pod2", "2"))

		source.Delete(makePod("pod1", "2"))
		verifyEvent(watch.Deleted, expectedPod("pod1", "2"), nil)
		verifyStore([]interface{}{expectedPod("pod2", "2"), expectedPod("pod3", "1")})
	})
}

// Port: upstream resyncs every 5 ms (cache.NewTransformingInformer has no
// minimum). A shared informer's handler resyncs at most once a second, so on
// ours the 5 ms period becomes 1 s and the 1 s window below sees at most one
// resync; the subject (a resync does not run the transform again, and
// reading the store races with nothing) is unchanged.
func TestTransformingInformerRace(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		_, ctx := ktesting.NewTestContext(t)
		// Canceled *only* when the test is done.
		testCtx, testCancel := context.WithCancel(ctx) // (Port: named testCancel, see below.)
		defer testCancel()
		// Canceled *also* during the test.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()

		// source simulates an apiserver object endpoint.
		source := newFakeControllerSource(t)

		label := "to-be-transformed"
		makePod := func(name string) *v1.Pod {
			return &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name:      name,
					Namespace: "namespace",
					Labels:    map[string]string{label: "true"},
				},
				Spec: v1.PodSpec{
					Hostname: "hostname",
				},
			}
		}

		badTransform := atomic.Bool{}
		podTransformer := func(obj interface{}) (interface{}, error) {
			pod, ok := obj.(*v1.Pod)
			if !ok {
				return nil, fmt.Errorf("unexpected object type: %T", obj)
			}
			if pod.ObjectMeta.Labels[label] != "true" {
				badTransform.Store(true)
				return nil, fmt.Errorf("object already transformed: %#v", obj)
			}
			pod.ObjectMeta.Labels[label] = "false"
			return pod, nil
		}

		numObjs := 5
		for i := 0; i < numObjs; i++ {
			source.Add(makePod(fmt.Sprintf("pod-%d", i)))
		}

		type event struct{}
		events := make(chan event, numObjs)
		recordEvent := func(eventType watch.EventType, previous, current interface{}) {
			select {
			case events <- event{}:
			case <-testCtx.Done():
				// Don't block forever in the write above when test is already done.
			}
		}
		checkEvents := func(count int) {
			for i := 0; i < count; i++ {
				<-events
			}
		}
		store, controller := impl.NewTransformingInformer(
			source,
			&v1.Pod{},
			5*time.Millisecond,
			ResourceEventHandlerDetailedFuncs{
				AddFunc:    func(obj interface{}, isInInitialList bool) { recordEvent(watch.Added, nil, obj) },
				UpdateFunc: func(oldObj, newObj interface{}) { recordEvent(watch.Modified, oldObj, newObj) },
				DeleteFunc: func(obj interface{}) { recordEvent(watch.Deleted, obj, nil) },
			},
			podTransformer,
		)

		// (Port: the informer is also waited for at the end, after testCtx
		// is cancelled so that a handler blocked in recordEvent returns.)
		var controllerWG sync.WaitGroup
		controllerWG.Add(1)
		go func() {
			defer controllerWG.Done()
			controller.RunWithContext(ctx)
		}()
		defer func() {
			cancel()
			testCancel()
			controllerWG.Wait()
		}()

		checkEvents(numObjs)

		// Periodically fetch objects to ensure no access races.
		wg := sync.WaitGroup{}
		errors := make(chan error, numObjs)
		for i := 0; i < numObjs; i++ {
			wg.Add(1)
			go func(index int) {
				defer wg.Done()
				key := fmt.Sprintf("namespace/pod-%d", index)
				for {
					select {
					case <-ctx.Done():
						return
					default:
					}

					obj, ok, err := store.GetByKey(key)
					if !ok || err != nil {
						errors <- fmt.Errorf("couldn't get the object for %v", key)
						return
					}
					pod := obj.(*v1.Pod)
					if pod.ObjectMeta.Labels[label] != "false" {
						errors <- fmt.Errorf("unexpected object: %#v", pod)
						return
					}
				}
			}(i)
		}

		// Let resyncs to happen for some time.
		time.Sleep(time.Second)

		cancel()
		wg.Wait()
		close(errors)
		for err := range errors {
			t.Error(err)
		}

		if badTransform.Load() {
			t.Errorf("unexpected transformation happened")
		}
	})
}

// sortedListWatcher lists the source's objects sorted by key, as an
// apiserver does (the fake source lists them in map order), and declares no
// WatchList support (as upstream's tests do for ListWatch wrappers). Its
// list and watch wait while a test holds gate.
func sortedListWatcher(source *fcache.FakeControllerSource, gate *sync.RWMutex) ListerWatcher {
	return toListWatcherWithUnSupportedWatchListSemantics(&ListWatch{
		ListFunc: func(options metav1.ListOptions) (runtime.Object, error) {
			gate.RLock()
			obj, err := source.List(options)
			gate.RUnlock()
			if err != nil {
				return nil, err
			}
			items, err := meta.ExtractList(obj)
			if err != nil {
				return nil, err
			}
			sort.Slice(items, func(i, j int) bool {
				keyI, _ := DeletionHandlingMetaNamespaceKeyFunc(items[i])
				keyJ, _ := DeletionHandlingMetaNamespaceKeyFunc(items[j])
				return keyI < keyJ
			})
			if err := meta.SetList(obj, items); err != nil {
				return nil, err
			}
			return obj, nil
		},
		WatchFunc: func(options metav1.ListOptions) (watch.Interface, error) {
			gate.RLock()
			defer gate.RUnlock()
			return source.Watch(options)
		},
	})
}

// TestReplaceEvents: upstream drives a controller built from cache.New with
// a RealFIFO (atomic and not) and the unexported processDeltas, and calls the
// queue's Add and Replace directly. The port drives a shared informer through
// its source: the initial objects are added through the watch, the replace
// is a relist (the source is changed without telling the watch — the
// *DropWatch calls — then ResetWatch forces a 410 and a relist, whose list
// is sortedListWatcher's, sorted by key like the replaced items). The source
// sets resource versions itself, so the expected RVs are the source's: a
// delete carries the RV the object had before the relist (StoreRV ""), an
// update or add the RV it has in the relist (StoreRV the same). The store is
// compared by key and RV. The informer's queue mode is whatever the
// informer uses (the atomic/non-atomic loop is upstream's queue option).
// The relists make this test slow (several seconds of reflector backoff).
func TestReplaceEvents(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		source := newFakeControllerSource(t)
		var gate sync.RWMutex
		informer := impl.NewSharedInformer(sortedListWatcher(source, &gate), &v1.Pod{}, 0)
		store := informer.GetStore()
		recorder := newEventRecorder(store, DeletionHandlingMetaNamespaceKeyFunc)
		_, err := informer.AddEventHandler(recorder)
		requireNoError(t, err)
		var wg wait.Group
		wg.StartWithContext(ctx, informer.RunWithContext)
		defer wg.Wait()
		defer cancel()
		if !WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatal("Timed out waiting for cache sync")
		}
		testReplaceEvents(t, ctx, source, &gate, recorder, store)
	})
}

func testReplaceEvents(t *testing.T, ctx context.Context, source *fcache.FakeControllerSource, gate *sync.RWMutex, m *eventRecorder, store Store) {
	tcs := []struct {
		name            string
		initialObjs     []metav1.Object
		replacedItems   []interface{}
		replaceRV       string
		expectedHistory []eventRecord
	}{
		{
			name: "Create with no initial objects",
			replacedItems: []interface{}{
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-1", Namespace: "default", ResourceVersion: "1"}},
			},
			expectedHistory: []eventRecord{
				{Action: "add", Key: "default/pod-1", EventRV: "1", StoreRV: "1"},
			},
			replaceRV: "1",
		},
		{
			name: "Delete all objects",
			initialObjs: []metav1.Object{
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-1", Namespace: "default", ResourceVersion: "1"}},
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-3", Namespace: "default", ResourceVersion: "2"}},
			},
			replacedItems: []interface{}{},
			expectedHistory: []eventRecord{
				{Action: "delete", Key: "default/pod-1", EventRV: "1", StoreRV: ""},
				{Action: "delete", Key: "default/pod-3", EventRV: "2", StoreRV: ""},
			},
			replaceRV: "2",
		},
		{
			name: "Create, update, delete",
			initialObjs: []metav1.Object{
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-1", Namespace: "default", ResourceVersion: "1"}},
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-2", Namespace: "default", Labels: map[string]string{"ver": "1"}, ResourceVersion: "2"}},
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-3", Namespace: "default", ResourceVersion: "3"}},
			},
			replacedItems: []interface{}{
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-1", Namespace: "default", ResourceVersion: "4"}},
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-2", Namespace: "default", Labels: map[string]string{"ver": "2"}, ResourceVersion: "5"}},
				&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-4", Namespace: "default", ResourceVersion: "6"}},
			},
			expectedHistory: []eventRecord{
				{Action: "delete", Key: "default/pod-3", EventRV: "3", StoreRV: ""},
				{Action: "update", Key: "default/pod-1", EventRV: "4", StoreRV: "4"},
				{Action: "update", Key: "default/pod-2", EventRV: "5", StoreRV: "5"},
				{Action: "add", Key: "default/pod-4", EventRV: "6", StoreRV: "6"},
			},
			replaceRV: "6",
		},
	}

	for _, tc := range tcs {
		testName := tc.name
		t.Run(testName, func(t *testing.T) {
			// Clear history to ensure we don't count events from previous tests
			m.clearHistory()

			for _, obj := range tc.initialObjs {
				source.Add(obj.(runtime.Object).DeepCopyObject()) // upstream: fifo.Add(obj)
			}

			// Wait for all create events to appear (upstream: 5 s; here the
			// adds go through a watch that may still be in the reflector's
			// backoff after the previous case's relist, on either informer).
			requireNoError(t, m.waitForEventCount(ctx, len(tc.initialObjs), 30*time.Second), "Controller failed to receive initial setup all events, got: %v", m.getHistory())

			// Clear history so we only compare what happens during the RESYNC/REPLACE
			m.clearHistory()

			// Run replace (upstream: fifo.Replace(tc.replacedItems, tc.replaceRV)).
			// Atomic, as upstream's Replace is: the reflector's list and
			// watch wait at the gate until the source has every change and
			// its watch was reset. (Once under load, a watch started mid-way
			// replayed the source's first change, unsent but kept in its
			// history, and the informer saw an extra update.)
			var before, after map[string]string
			func() {
				gate.Lock()
				defer gate.Unlock()
				before = sourceRVs(t, source)
				replaced := map[string]bool{}
				for _, item := range tc.replacedItems {
					key, _ := DeletionHandlingMetaNamespaceKeyFunc(item)
					replaced[key] = true
					obj := item.(runtime.Object).DeepCopyObject()
					if _, ok := before[key]; ok {
						source.ModifyDropWatch(obj)
					} else {
						source.AddDropWatch(obj)
					}
				}
				for _, obj := range sourceObjects(t, source) {
					if key, _ := DeletionHandlingMetaNamespaceKeyFunc(obj); !replaced[key] {
						source.DeleteDropWatch(obj.(runtime.Object))
					}
				}
				after = sourceRVs(t, source)
				source.ResetWatch()
			}()

			// Wait for all expected events to be received. (Port: 30 s
			// instead of 5 s: the relist comes after the reflector's backoff,
			// which grows with each ResetWatch — up to 6.4 s on the third.)
			requireNoError(t, m.waitForEventCount(ctx, len(tc.expectedHistory), 30*time.Second), "Controller failed to receive all events, got: %v", m.getHistory())

			items := sortItemsByKey(store.List(), DeletionHandlingMetaNamespaceKeyFunc)
			if got, want := keysAndRVs(items), keysAndRVs(sortItemsByKey(sourceObjects(t, source), DeletionHandlingMetaNamespaceKeyFunc)); !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("store: expected %v, got %v", want, got)
			}
			expected := make([]eventRecord, 0, len(tc.expectedHistory))
			for _, e := range tc.expectedHistory {
				if e.Action == "delete" {
					e.EventRV, e.StoreRV = before[e.Key], ""
				} else {
					e.EventRV, e.StoreRV = after[e.Key], after[e.Key]
				}
				expected = append(expected, e)
			}
			// synthetic delete events from a replace are not ordered, sort by key to make the test deterministic
			history := sortDeleteEventsByKey(m.getHistory())
			if !apiequality.Semantic.DeepEqual(expected, history) {
				t.Errorf("history:\nexpected %+v\n     got %+v", expected, history)
			}
		})
	}
}

// sourceObjects returns the objects the source holds.
func sourceObjects(t *testing.T, source *fcache.FakeControllerSource) []any {
	t.Helper()
	list, err := source.List(metav1.ListOptions{})
	requireNoError(t, err)
	objs, err := meta.ExtractList(list)
	requireNoError(t, err)
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

// sourceRVs returns the resource version of each object of the source, by
// key.
func sourceRVs(t *testing.T, source *fcache.FakeControllerSource) map[string]string {
	t.Helper()
	rvs := map[string]string{}
	for _, obj := range sourceObjects(t, source) {
		key, _ := DeletionHandlingMetaNamespaceKeyFunc(obj)
		rvs[key] = obj.(metav1.Object).GetResourceVersion()
	}
	return rvs
}

// keysAndRVs lists "key@rv" for each object.
func keysAndRVs(objs []any) []string {
	out := make([]string, 0, len(objs))
	for _, obj := range objs {
		key, _ := DeletionHandlingMetaNamespaceKeyFunc(obj)
		out = append(out, key+"@"+obj.(metav1.Object).GetResourceVersion())
	}
	return out
}

// TestResetWatch: upstream drives a controller built from cache.New with a
// RealFIFO (atomic and not) and the unexported processDeltas; the port runs
// the same steps on a shared informer with the recorder as its handler.
func TestResetWatch(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		source := fcache.NewFakeControllerSource()
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:      "pod-1",
				Namespace: "default",
			},
		}
		source.Add(pod)
		t.Cleanup(func() {
			source.Shutdown()
		})

		informer := impl.NewSharedInformer(source, &v1.Pod{}, 0)
		recorder := newEventRecorder(informer.GetStore(), DeletionHandlingMetaNamespaceKeyFunc)
		_, err := informer.AddEventHandler(recorder)
		requireNoError(t, err)
		var wg wait.Group
		wg.StartWithContext(ctx, informer.RunWithContext)
		defer wg.Wait()
		defer cancel()
		if !WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatal("Timed out waiting for cache sync")
		}
		testResetWatch(t, ctx, source, recorder)
	})
}

func testResetWatch(t *testing.T, ctx context.Context, source *fcache.FakeControllerSource, recorder *eventRecorder) {
	// The first event should be the initial add.
	requireNoError(t, recorder.waitForEventCount(ctx, 1, 5*time.Second), "Controller failed to receive initial setup all events, got: %v", recorder.getHistory())
	history := recorder.getHistory()
	expectEqual(t, 1, len(history), "history length")
	expectEqual(t, "add", history[0].Action, "action")
	expectEqual(t, "default/pod-1", history[0].Key, "key")
	expectEqual(t, true, history[0].IsInInitialList, "isInInitialList")

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "pod-1",
			Namespace: "default",
		},
	}
	pod2 := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "pod-2",
			Namespace: "default",
		},
	}

	recorder.clearHistory()
	source.ModifyDropWatch(pod)
	source.AddDropWatch(pod2)
	source.ResetWatch()

	// We should get an add for the second pod and update for the initial pod on reset.
	requireNoError(t, recorder.waitForEventCount(ctx, 2, 5*time.Second), "Controller failed to receive initial setup all events, got: %v", recorder.getHistory())
	history = recorder.getHistory()
	expectEqual(t, 2, len(history), "history length")

	var addEvent eventRecord
	var updateEvent eventRecord
	for _, event := range history {
		switch event.Action {
		case "update":
			updateEvent = event
		case "add":
			addEvent = event
		}
	}
	expectEqual(t, "default/pod-1", updateEvent.Key, "update key")
	expectEqual(t, false, updateEvent.IsInInitialList, "update isInInitialList")
	expectEqual(t, "default/pod-2", addEvent.Key, "add key")
	expectEqual(t, false, addEvent.IsInInitialList, "add isInInitialList")
}

// TestStoreResourceVersion: upstream drives a controller built from
// cache.New with an atomic RealFIFO and the unexported processDeltas; the
// port runs the same steps on a shared informer, reading the resource
// version of its store (GetStore().LastStoreSyncResourceVersion()).
func TestStoreResourceVersion(t *testing.T) {
	forEachInformer(t, func(t *testing.T, impl informerImpl) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		source := fcache.NewFakeControllerSource()
		source.Add(&v1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:      "pod-1",
				Namespace: "default",
			},
		})
		t.Cleanup(func() {
			source.Shutdown()
		})

		informer := impl.NewSharedInformer(source, &v1.Pod{}, 0)
		store := informer.GetStore()
		recorder := newEventRecorder(store, DeletionHandlingMetaNamespaceKeyFunc)
		_, err := informer.AddEventHandler(recorder)
		requireNoError(t, err)
		var wg wait.Group
		wg.StartWithContext(ctx, informer.RunWithContext)
		defer wg.Wait()
		defer cancel()
		if !WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatal("Timed out waiting for cache sync")
		}
		testResourceVersion(t, ctx, source, recorder, store)
	})
}

func testResourceVersion(t *testing.T, ctx context.Context, source *fcache.FakeControllerSource, recorder *eventRecorder, store Store) {
	// The first event should be the initial add.
	requireNoError(t, recorder.waitForEventCount(ctx, 1, 5*time.Second), "Controller failed to receive initial setup all events, got: %v", recorder.getHistory())
	history := recorder.getHistory()
	expectEqual(t, 1, len(history), "history length")
	expectEqual(t, "add", history[0].Action, "action")
	expectEqual(t, "default/pod-1", history[0].Key, "key")
	expectEqual(t, true, history[0].IsInInitialList, "isInInitialList")

	recorder.clearHistory()
	// Update the pod labels to increment the resource version.
	source.Modify(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "pod-1",
			Namespace: "default",
			Labels: map[string]string{
				"foo": "bar",
			},
		},
	})
	requireNoError(t, recorder.waitForEventCount(ctx, 1, 5*time.Second), "Controller failed to receive update event, got: %v", recorder.getHistory())
	history = recorder.getHistory()
	// The stored resource version should have changed.
	expectEqual(t, history[0].EventRV, store.LastStoreSyncResourceVersion(), "store resource version after the update")

	recorder.clearHistory()
	// Delete the pod.
	source.Delete(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "pod-1",
			Namespace: "default",
		},
	})
	requireNoError(t, recorder.waitForEventCount(ctx, 1, 5*time.Second), "Controller failed to receive delete event, got: %v", recorder.getHistory())
	history = recorder.getHistory()
	// The stored resource version should have changed.
	expectEqual(t, history[0].EventRV, store.LastStoreSyncResourceVersion(), "store resource version after the delete")
}

// expectEqual is assert.Equal.
func expectEqual[T comparable](t *testing.T, expected, actual T, what string) bool {
	t.Helper()
	if expected != actual {
		t.Errorf("%s: expected %v, got %v", what, expected, actual)
		return false
	}
	return true
}

type eventRecord struct {
	Action          string
	Key             string
	EventRV         string
	StoreRV         string
	IsInInitialList bool
}

type eventRecorder struct {
	historyLock sync.Mutex
	history     []eventRecord
	store       Store
	keyFunc     KeyFunc

	updateCh chan bool
}

func newEventRecorder(store Store, keyFunc KeyFunc) *eventRecorder {
	return &eventRecorder{
		store:    store,
		updateCh: make(chan bool, 1),
		keyFunc:  keyFunc,
	}
}

func (m *eventRecorder) OnAdd(obj interface{}, isInInitialList bool) {
	m.record("add", obj, isInInitialList)
}
func (m *eventRecorder) OnUpdate(_, obj interface{}) {
	m.record("update", obj, false)
}
func (m *eventRecorder) OnDelete(obj interface{}) {
	m.record("delete", obj, false)
}

func (m *eventRecorder) record(action string, obj interface{}, isInInitialList bool) {
	m.historyLock.Lock()
	defer m.historyLock.Unlock()
	key, _ := m.keyFunc(obj)

	if deleted, ok := obj.(DeletedFinalStateUnknown); ok {
		obj = deleted.Obj
	}

	eventRV := ""
	if accessor, err := meta.Accessor(obj); err == nil {
		eventRV = accessor.GetResourceVersion()
	}

	storeRV := ""
	if storeObj, exists, err := m.store.GetByKey(key); err == nil && exists {
		if accessor, err := meta.Accessor(storeObj); err == nil {
			storeRV = accessor.GetResourceVersion()
		}
	}

	m.history = append(m.history, eventRecord{
		Action:          action,
		Key:             key,
		EventRV:         eventRV,
		StoreRV:         storeRV,
		IsInInitialList: isInInitialList,
	})
	select {
	case m.updateCh <- true:
	default:
	}
}

func (m *eventRecorder) clearHistory() {
	m.historyLock.Lock()
	defer m.historyLock.Unlock()
	m.history = []eventRecord{}
}

func (m *eventRecorder) getHistory() []eventRecord {
	m.historyLock.Lock()
	historyCopy := make([]eventRecord, len(m.history))
	copy(historyCopy, m.history)
	m.historyLock.Unlock()

	return historyCopy
}

func (m *eventRecorder) waitForEventCount(ctx context.Context, count int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	for {
		m.historyLock.Lock()
		currentCount := len(m.history)
		m.historyLock.Unlock()

		if currentCount >= count {
			return nil
		}

		select {
		case <-m.updateCh:
			continue
		case <-ctx.Done():
			return fmt.Errorf("context canceled waiting for %d events, currently have %d", count, currentCount)
		}
	}
}

func sortItemsByKey(items []interface{}, keyFunc KeyFunc) []interface{} {
	sort.Slice(items, func(i, j int) bool {
		keyI, _ := keyFunc(items[i])
		keyJ, _ := keyFunc(items[j])
		return keyI < keyJ
	})
	return items
}

func sortDeleteEventsByKey(events []eventRecord) []eventRecord {
	sort.Slice(events, func(i, j int) bool {
		eventI := events[i]
		eventJ := events[j]
		// sort delete events for different objects by key
		if eventI.Action == "delete" && eventJ.Action == "delete" && eventI.Key != eventJ.Key {
			return eventI.Key < eventJ.Key
		}
		// keep existing order otherwise
		return i < j
	})
	return events
}
