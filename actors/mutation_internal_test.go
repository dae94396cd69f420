package actors

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
)

// TestMutationDetectorChoice: which cache mutation detector an informer
// gets from KUBE_CACHE_MUTATION_DETECTOR and WithCacheMutationDetector.
// Off, there is none: nothing copies or checks, so nothing can stop the
// process. With the variable, client-go's, as client-go's informers get;
// with the option alone, indexer.MutationDetector (what it detects, on the
// fake clock: internal/sim's testdata/mutation_*.txt; that either one
// makes the process panic: TestCacheMutationDetector).
func TestMutationDetectorChoice(t *testing.T) {
	defer func(v bool) { mutationDetectionEnabled = v }(mutationDetectionEnabled)
	clientGo := reflect.TypeOf(cache.NewCacheMutationDetector("*v1.Pod"))
	ours := reflect.TypeOf(&indexer.MutationDetector{})
	on, off := true, false
	for _, c := range []struct {
		env    bool
		option *bool
		want   reflect.Type // nil: no detector
	}{
		{false, nil, nil},
		{false, &off, nil},
		{false, &on, ours},
		{true, nil, clientGo},
		{true, &on, clientGo},
		{true, &off, nil},
	} {
		mutationDetectionEnabled = c.env
		var o options
		if c.option != nil {
			WithCacheMutationDetector(*c.option).applyInformer(&o)
		}
		d := newMutationDetector(o, &corev1.Pod{})
		if got := reflect.TypeOf(d); got != c.want {
			t.Errorf("variable %v, option %v: detector %v, want %v", c.env, c.option != nil && *c.option, got, c.want)
		}
	}
}
