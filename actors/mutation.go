package actors

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/tools/cache"
)

// mutationDetectionEnabled is KUBE_CACHE_MUTATION_DETECTOR, read once as
// client-go reads it.
var mutationDetectionEnabled, _ = strconv.ParseBool(os.Getenv("KUBE_CACHE_MUTATION_DETECTOR"))

// newMutationDetector returns the cache mutation detector of an informer of
// example's objects, or nil when detection is off (the default).
// KUBE_CACHE_MUTATION_DETECTOR turns it on unless WithCacheMutationDetector
// says otherwise. client-go's detector is used when the variable is set;
// client-go offers no way to turn it on otherwise, so WithCacheMutationDetector(true)
// without the variable gets forcedMutationDetector, which does the same.
func newMutationDetector(o options, example runtime.Object) cache.MutationDetector {
	enabled := mutationDetectionEnabled
	if o.detectMutation != nil {
		enabled = *o.detectMutation
	}
	if !enabled {
		return nil
	}
	name := fmt.Sprintf("%T", example) // as client-go names it
	if mutationDetectionEnabled {
		return cache.NewCacheMutationDetector(name)
	}
	return &forcedMutationDetector{name: name, period: time.Second, retain: 2 * time.Minute}
}

// forcedMutationDetector is client-go's defaultCacheMutationDetector (not
// exported) in short: it keeps a deep copy of every object added and, every
// period, panics if one no longer equals its copy. Objects are kept for at
// least retain.
type forcedMutationDetector struct {
	name           string
	period, retain time.Duration

	mu       sync.Mutex
	added    []cachedCopy
	cached   []cachedCopy // compared by Run only
	retained []cachedCopy
}

type cachedCopy struct{ cached, copied any }

func (d *forcedMutationDetector) AddObject(obj any) {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return
	}
	if o, ok := obj.(runtime.Object); ok {
		c := cachedCopy{cached: o, copied: o.DeepCopyObject()}
		d.mu.Lock()
		d.added = append(d.added, c)
		d.mu.Unlock()
	}
}

func (d *forcedMutationDetector) Run(stopCh <-chan struct{}) {
	rotated := time.Now()
	t := time.NewTicker(d.period)
	defer t.Stop()
	for {
		if time.Since(rotated) > d.retain {
			d.retained, d.cached, rotated = d.cached, nil, time.Now()
		}
		d.mu.Lock()
		d.cached = append(d.cached, d.added...)
		d.added = nil
		d.mu.Unlock()
		altered := false
		for _, objs := range [][]cachedCopy{d.cached, d.retained} {
			for i, c := range objs {
				if !reflect.DeepEqual(c.cached, c.copied) {
					fmt.Printf("CACHE %s[%d] ALTERED!\n%s\n", d.name, i, diff.Diff(c.copied, c.cached))
					altered = true
				}
			}
		}
		if altered {
			// Deliberately not recovered, as in client-go: the cache
			// cannot be trusted any more.
			panic(fmt.Sprintf("cache %s modified", d.name))
		}
		select {
		case <-stopCh:
			return
		case <-t.C:
		}
	}
}
