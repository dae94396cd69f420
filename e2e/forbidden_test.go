package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// TestForbidden runs both informers as a user without RBAC rights: each
// one's watch error handler gets a Forbidden error, and WaitForCacheSync
// with a timeout returns false instead of hanging.
func TestForbidden(t *testing.T) {
	c := startCluster(t, testcluster.Options{WatchCache: true})
	ucs := clientFor(t, c.UnprivilegedConfig())
	ours, ref := startPair(t, pairConfig{
		example: &corev1.ConfigMap{},
		newLW:   func() cache.ListerWatcherWithContext { return listWatch(ucs.CoreV1().ConfigMaps("default")) },
	})
	// Both wait at the same time, each with its own short timeout.
	synced := make([]bool, 2)
	waited := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for i, s := range []*side{ours, ref} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			start := time.Now()
			synced[i] = cache.WaitForCacheSync(ctx.Done(), s.inf.HasSynced)
			waited[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, s := range []*side{ours, ref} {
		if synced[i] {
			t.Fatalf("%s: WaitForCacheSync returned true for a forbidden resource", s.name)
		}
		t.Logf("%s: WaitForCacheSync returned false after %v", s.name, waited[i].Round(time.Millisecond))
	}
	for _, s := range []*side{ours, ref} {
		informertest.Eventually(t, 30*time.Second, 20*time.Millisecond, s.name+" watch error handler gets Forbidden", func() string {
			if errs := s.errs(); !slices.ContainsFunc(errs, apierrors.IsForbidden) {
				return "errors so far: " + errorsString(errs)
			}
			return ""
		})
		errs := s.errs()
		i := slices.IndexFunc(errs, apierrors.IsForbidden)
		t.Logf("%s: %d handler calls, first Forbidden: %v", s.name, len(errs), errs[i])
		if s.inf.HasSynced() {
			t.Errorf("%s: HasSynced is true", s.name)
		}
		if n := len(s.inf.GetStore().ListKeys()); n != 0 {
			t.Errorf("%s: %d objects cached", s.name, n)
		}
	}
	st := ours.ours.Stats()
	if st.WatchErrors == 0 {
		t.Errorf("ours: Stats().WatchErrors = 0")
	}
	t.Logf("ours: stats relists=%d watch errors=%d", st.Relists, st.WatchErrors)
}

func errorsString(errs []error) string {
	if len(errs) == 0 {
		return "none"
	}
	s := ""
	for i, e := range errs {
		if i > 0 {
			s += "; "
		}
		s += e.Error()
	}
	return s
}
