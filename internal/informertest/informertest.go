// Package informertest holds what the informer's tests share: a handler
// that records what it believes the cache holds (View), snapshots of caches
// as key → resourceVersion, their diff, and polling.
package informertest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/telemetry"
)

// NeedsTracing skips t in a build with tracing compiled out (-tags
// actorinformer_notrace), where no span and no OpenTelemetry metric is made
// whatever the providers: the tests of what they record do not apply there.
func NeedsTracing(t testing.TB) {
	t.Helper()
	if telemetry.CompiledOut {
		t.Skip("tracing and OpenTelemetry metrics are compiled out (-tags actorinformer_notrace)")
	}
}

// RV is obj's resourceVersion, looking through a tombstone; "?" without
// metadata.
func RV(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	return m.GetResourceVersion()
}

// Key is obj's cache key, tombstones included; "?" when it has none.
func Key(obj any) string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return "?"
	}
	return k
}

// View is what one handler believes the cache holds (key → resourceVersion),
// with counts and the inconsistencies of the event sequence it got: an add
// of a key it holds, an update or delete of one it does not, an update whose
// old object is not the one it holds. Its methods may be called by multiple
// goroutines simultaneously.
type View struct {
	mu         sync.Mutex
	objs       map[string]string
	deleted    map[string]int
	adds       int
	initial    int
	updates    int
	sameRV     int
	deletes    int
	tombstones int
	errs       []string
	// lenientDeletes accepts deletes of keys the handler does not hold.
	lenientDeletes bool
}

// NewView returns an empty view.
func NewView() *View { return &View{objs: map[string]string{}, deleted: map[string]int{}} }

// LenientDeletes makes v accept deletes of keys it does not hold, and
// returns v. client-go's informer (RealFIFO) hands on the delete of an
// object whose add it never saw (an add lost with a dropped watch event);
// ours drops it, as DeltaFIFO did.
func (v *View) LenientDeletes() *View {
	v.lenientDeletes = true
	return v
}

// Handler is the handler that feeds v.
func (v *View) Handler() cache.ResourceEventHandlerDetailedFuncs {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			v.mu.Lock()
			defer v.mu.Unlock()
			k := Key(obj)
			if _, ok := v.objs[k]; ok {
				v.errs = append(v.errs, "add of known key "+k)
			}
			v.objs[k] = RV(obj)
			v.adds++
			if initial {
				v.initial++
			}
		},
		UpdateFunc: func(old, obj any) {
			v.mu.Lock()
			defer v.mu.Unlock()
			k := Key(obj)
			if cur, ok := v.objs[k]; !ok {
				v.errs = append(v.errs, "update of unknown key "+k)
			} else if cur != RV(old) {
				v.errs = append(v.errs, fmt.Sprintf("update of %s: old rv %s, handler had %s", k, RV(old), cur))
			}
			if RV(old) == RV(obj) {
				v.sameRV++
			}
			v.objs[k] = RV(obj)
			v.updates++
		},
		DeleteFunc: func(obj any) {
			v.mu.Lock()
			defer v.mu.Unlock()
			k := Key(obj)
			if _, ok := v.objs[k]; !ok && !v.lenientDeletes {
				v.errs = append(v.errs, "delete of unknown key "+k)
			}
			if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				v.tombstones++
			}
			delete(v.objs, k)
			v.deleted[k]++
			v.deletes++
		},
	}
}

// Snapshot copies what the handler believes the cache holds.
func (v *View) Snapshot() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.objs))
	for k, r := range v.objs {
		out[k] = r
	}
	return out
}

// SawDelete reports whether the handler got a delete of key k.
func (v *View) SawDelete(k string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.deleted[k] > 0
}

// Counts are the handler's calls so far.
type Counts struct {
	Adds, Initial, Updates, SameRV, Deletes, Tombstones int
}

func (c Counts) String() string {
	return fmt.Sprintf("adds=%d (initial %d) updates=%d (same rv %d) deletes=%d tombstones=%d",
		c.Adds, c.Initial, c.Updates, c.SameRV, c.Deletes, c.Tombstones)
}

// Counts returns the handler's calls so far.
func (v *View) Counts() Counts {
	v.mu.Lock()
	defer v.mu.Unlock()
	return Counts{Adds: v.adds, Initial: v.initial, Updates: v.updates, SameRV: v.sameRV, Deletes: v.deletes, Tombstones: v.tombstones}
}

// Errors returns the inconsistencies seen so far.
func (v *View) Errors() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// StoreSnapshot is a cache's content as key → resourceVersion.
func StoreSnapshot(s cache.Store) map[string]string {
	out := map[string]string{}
	for _, obj := range s.List() {
		out[Key(obj)] = RV(obj)
	}
	return out
}

// Diff describes how got differs from want ("" when equal), at most ten
// lines of it.
func Diff(want, got map[string]string) string {
	var d []string
	for k, r := range want {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("%s: missing (want rv %q)", k, r))
		} else if g != r {
			d = append(d, fmt.Sprintf("%s: want rv %q, got %q", k, r, g))
		}
	}
	for k, r := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: unexpected (rv %q)", k, r))
		}
	}
	if len(d) == 0 {
		return ""
	}
	sort.Strings(d)
	if len(d) > 10 {
		d = append(d[:10], fmt.Sprintf("... %d more", len(d)-10))
	}
	return fmt.Sprint(d)
}

// Eventually polls cond every interval until it returns "" or timeout
// passes, then fails the test with cond's last answer.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, timeout, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: test context done: %s", what, last)
		case <-time.After(interval):
		}
	}
}

// CollectMetrics collects reader once and returns the metrics by name.
func CollectMetrics(t testing.TB, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}
