package actors_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// mutationChildEnv names the informer a child process of
// TestCacheMutationDetector runs (see mutationChild).
const mutationChildEnv = "ACTORINFORMER_MUTATION_CHILD"

// mutationSurvived is what a child prints when nothing stopped it.
const mutationSurvived = "child survived the mutation"

// mutationWait is how long a child waits for its detector to stop it
// after the mutation: ten of its periods (1 s).
const mutationWait = 10 * time.Second

// mutationChild runs one informer whose handler changes the object it is
// given, the cached object itself, then waits for the mutation detector to
// panic, and if it does not within mutationWait, reports that it survived.
// mode is the informer: client-go's, ours with default options, or ours
// with WithCacheMutationDetector(true).
func mutationChild(mode string) int {
	src, lw := newSource()
	var inf cache.SharedIndexInformer
	switch mode {
	case "client-go":
		inf = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	case "actors":
		inf = actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	case "actors-option-on":
		inf = actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{}, actors.WithCacheMutationDetector(true))
	default:
		fmt.Println("unknown mode", mode)
		return 3
	}
	mutated := make(chan struct{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		obj.(*corev1.Pod).Labels = map[string]string{"changed": "by a handler"}
		close(mutated)
	}}); err != nil {
		fmt.Println(err)
		return 3
	}
	src.Add(pod("ns", "p", 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	select {
	case <-mutated:
	case <-time.After(30 * time.Second):
		fmt.Println("the handler was not called")
		return 3
	}
	<-time.After(mutationWait)
	fmt.Println(mutationSurvived)
	return 0
}

// TestCacheMutationDetector runs a handler that changes a cached object in
// child processes (this test binary, re-executed): with
// KUBE_CACHE_MUTATION_DETECTOR=true, client-go's informer and ours make the
// process panic with the same message, and so does ours with
// WithCacheMutationDetector(true) alone. Real time: a process that dies,
// and client-go's detector, side by side, checks on the real clock. Which
// detector the variable and the option give, none included:
// TestMutationDetectorChoice; what the detector finds, on the fake clock:
// internal/sim's testdata/mutation_*.txt.
func TestCacheMutationDetector(t *testing.T) {
	const failure = "panic: cache *v1.Pod modified"
	cases := []struct{ mode, env string }{
		{"client-go", "true"},
		{"actors", "true"},
		{"actors-option-on", ""},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/KUBE_CACHE_MUTATION_DETECTOR=%s", c.mode, c.env), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(os.Environ(), mutationChildEnv+"="+c.mode, "KUBE_CACHE_MUTATION_DETECTOR="+c.env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			if err == nil || !strings.Contains(string(out), failure) {
				t.Fatalf("the child did not fail with %q (%v):\n%s", failure, err, out)
			}
		})
	}
}
