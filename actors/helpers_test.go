package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/actorinformer/actorinformer/internal/informertest"
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
		out[informertest.Key(obj)] = informertest.RV(obj)
	}
	return out
}

// eventually polls cond until it returns "" or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	informertest.Eventually(t, timeout, 10*time.Millisecond, what, cond)
}

func waitSynced(t testing.TB, ctx context.Context, fns ...cache.InformerSynced) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), fns...) {
		t.Fatal("caches did not sync")
	}
}
