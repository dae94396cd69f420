package actors_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
)

// noWatchList wraps a FakeControllerSource so that both client-go's informer
// and ours know it cannot stream lists (WatchList) and list instead.
type noWatchList struct{ *fcache.FakeControllerSource }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// newSource returns a fake source and its ListerWatcher. When t is not nil
// the source is shut down at cleanup; register it before starting informers
// on it so that they stop first (Shutdown leaves the source locked).
func newSource(t ...testing.TB) (*fcache.FakeControllerSource, cache.ListerWatcher) {
	src := fcache.NewFakeControllerSource()
	if len(t) > 0 {
		t[0].Cleanup(src.Shutdown)
	}
	return src, noWatchList{src}
}

func pod(ns, name string, gen int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			Labels: map[string]string{"gen": fmt.Sprint(gen)}},
		Status: corev1.PodStatus{PodIP: fmt.Sprintf("10.0.%d.%d", gen%250, len(name))},
	}
}

// view is what one handler believes the cache holds: key → resourceVersion.
type view struct {
	mu      sync.Mutex
	objs    map[string]string
	adds    int
	updates int
	deletes int
	errs    []string
	initial int
}

func newView() *view { return &view{objs: map[string]string{}} }

func rv(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	return m.GetResourceVersion()
}

func key(obj any) string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return "?"
	}
	return k
}

func (v *view) handler() cache.ResourceEventHandlerDetailedFuncs {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			v.mu.Lock()
			defer v.mu.Unlock()
			k := key(obj)
			if _, ok := v.objs[k]; ok {
				v.errs = append(v.errs, "add of known key "+k)
			}
			v.objs[k] = rv(obj)
			v.adds++
			if initial {
				v.initial++
			}
		},
		UpdateFunc: func(old, obj any) {
			v.mu.Lock()
			defer v.mu.Unlock()
			k := key(obj)
			if cur, ok := v.objs[k]; !ok {
				v.errs = append(v.errs, "update of unknown key "+k)
			} else if cur != rv(old) {
				v.errs = append(v.errs, fmt.Sprintf("update of %s: old rv %s, handler had %s", k, rv(old), cur))
			}
			v.objs[k] = rv(obj)
			v.updates++
		},
		DeleteFunc: func(obj any) {
			v.mu.Lock()
			defer v.mu.Unlock()
			delete(v.objs, key(obj))
			v.deletes++
		},
	}
}

func (v *view) snapshot() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.objs))
	for k, r := range v.objs {
		out[k] = r
	}
	return out
}

func storeSnapshot(s cache.Store) map[string]string {
	out := map[string]string{}
	for _, obj := range s.List() {
		out[key(obj)] = rv(obj)
	}
	return out
}

func sourceSnapshot(t testing.TB, lw cache.ListerWatcher) map[string]string {
	t.Helper()
	list, err := lw.List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, obj := range items {
		out[key(obj)] = rv(obj)
	}
	return out
}

func diff(want, got map[string]string) string {
	var d []string
	for k, r := range want {
		if got[k] != r {
			d = append(d, fmt.Sprintf("%s: want rv %q, got %q", k, r, got[k]))
		}
	}
	for k, r := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: unexpected (rv %q)", k, r))
		}
	}
	sort.Strings(d)
	if len(d) > 10 {
		d = append(d[:10], fmt.Sprintf("... %d more", len(d)-10))
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

// eventually polls cond until it returns "" or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not reached within %v: %s", what, timeout, last)
}

func waitSynced(t testing.TB, ctx context.Context, fns ...cache.InformerSynced) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), fns...) {
		t.Fatal("caches did not sync")
	}
}
