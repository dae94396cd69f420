package indexer

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// The mutation detector's timing, client-go's: it checks every
// MutationCheckPeriod and keeps an object's copy for MutationRetain to
// twice that.
const (
	MutationCheckPeriod = time.Second
	MutationRetain      = 2 * time.Minute
)

// MutationDetector is client-go's cache mutation detector (its
// defaultCacheMutationDetector, which client-go builds only when
// KUBE_CACHE_MUTATION_DETECTOR is set) on a clock: it keeps a deep copy of
// every object given to AddObject (Config.MutationDetector gets every
// object the core writes) and Check compares each with its copy. It is a
// cache.MutationDetector.
type MutationDetector struct {
	name  string
	clock clock.Clock

	mu    sync.Mutex // guards added (AddObject runs on the indexer's goroutine)
	added []cachedCopy

	// Check's own, as client-go's: what was added since the last rotation,
	// and what was added in the rotation before.
	cached, retained []cachedCopy
	rotated          time.Time
}

type cachedCopy struct{ cached, copied any }

var _ cache.MutationDetector = (*MutationDetector)(nil)

// NewMutationDetector returns a detector of the cache of name's objects
// (client-go names it after the informer's example type, "*v1.Pod"), on
// clk (nil: the real clock).
func NewMutationDetector(name string, clk clock.Clock) *MutationDetector {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &MutationDetector{name: name, clock: clk}
}

// AddObject keeps a deep copy of obj to compare it with later; a
// cache.DeletedFinalStateUnknown or an object that is not a runtime.Object
// is not kept (as in client-go).
func (d *MutationDetector) AddObject(obj any) {
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

// MutationError is what Check returns when a kept object changed.
type MutationError struct {
	// Name is the detector's.
	Name string
	// Diffs are, for each object that changed, client-go's report of it:
	// "CACHE <name>[<i>] ALTERED!" and the difference.
	Diffs []string
}

// Error is client-go's panic message: "cache <name> modified".
func (e *MutationError) Error() string { return fmt.Sprintf("cache %s modified", e.Name) }

// Check compares every object kept with its copy, as client-go's
// detector does at each period: first, once MutationRetain has passed
// since the last rotation, the objects kept before it are dropped and
// those since become the retained ones. It returns a *MutationError when
// an object changed, nil otherwise. Calls must not overlap.
func (d *MutationDetector) Check() error {
	switch now := d.clock.Now(); {
	case d.rotated.IsZero():
		d.rotated = now
	case now.Sub(d.rotated) > MutationRetain:
		d.retained, d.cached, d.rotated = d.cached, nil, now
	}
	d.mu.Lock()
	d.cached = append(d.cached, d.added...)
	d.added = nil
	d.mu.Unlock()
	var err *MutationError
	for _, objs := range [][]cachedCopy{d.cached, d.retained} {
		for i, c := range objs {
			if !reflect.DeepEqual(c.cached, c.copied) {
				if err == nil {
					err = &MutationError{Name: d.name}
				}
				err.Diffs = append(err.Diffs, fmt.Sprintf("CACHE %s[%d] ALTERED!\n%s", d.name, i, diff.Diff(c.copied, c.cached)))
			}
		}
	}
	if err == nil {
		return nil
	}
	return err
}

// Run checks at once and then every MutationCheckPeriod of its clock until
// stop is closed. A change is printed (each of the MutationError's Diffs)
// and panics with client-go's message, deliberately not recovered, as in
// client-go: the cache cannot be trusted any more.
func (d *MutationDetector) Run(stop <-chan struct{}) {
	for {
		if err := d.Check(); err != nil {
			fmt.Println(strings.Join(err.(*MutationError).Diffs, "\n"))
			panic(err.Error())
		}
		select {
		case <-stop:
			return
		case <-d.clock.After(MutationCheckPeriod):
		}
	}
}
