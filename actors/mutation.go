package actors

import (
	"fmt"
	"os"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/indexer"
)

// mutationDetectionEnabled is KUBE_CACHE_MUTATION_DETECTOR, read once as
// client-go reads it.
var mutationDetectionEnabled, _ = strconv.ParseBool(os.Getenv("KUBE_CACHE_MUTATION_DETECTOR"))

// newMutationDetector returns the cache mutation detector of an informer of
// example's objects, or nil when detection is off (the default).
// KUBE_CACHE_MUTATION_DETECTOR turns it on unless WithCacheMutationDetector
// says otherwise. client-go's detector is used when the variable is set;
// client-go offers no way to turn it on otherwise, so WithCacheMutationDetector(true)
// without the variable gets indexer.MutationDetector, which does the same.
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
	return indexer.NewMutationDetector(name, clock.RealClock{})
}
