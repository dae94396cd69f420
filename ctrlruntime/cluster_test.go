package ctrlruntime_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Environment variables shared with the core module's real-cluster tests
// (internal/testcluster, which another module cannot import).
const (
	envBinDir         = "ACTORINFORMER_BIN_DIR"
	envRequireCluster = "ACTORINFORMER_REQUIRE_CLUSTER"
)

// binDir returns the folder holding kube-apiserver and etcd:
// $ACTORINFORMER_BIN_DIR (relative to the repository root, the parent of
// this module, when relative), else the first of <repo>/.cache/bin (where
// hack/build-binaries.sh puts them) and ~/.cache/actorinformer/bin that
// holds both. It skips the test when there is none, or fails it when
// $ACTORINFORMER_REQUIRE_CLUSTER is set.
func binDir(t *testing.T) string {
	t.Helper()
	var candidates []string
	if dir := os.Getenv(envBinDir); dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", dir)
		}
		candidates = append(candidates, dir)
	} else {
		candidates = append(candidates, filepath.Join("..", ".cache", "bin"))
		if home, err := os.UserHomeDir(); err == nil {
			candidates = append(candidates, filepath.Join(home, ".cache", "actorinformer", "bin"))
		}
	}
	for _, dir := range candidates {
		if isFile(filepath.Join(dir, "kube-apiserver")) && isFile(filepath.Join(dir, "etcd")) {
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	msg := "no kube-apiserver and etcd in any of " + filepath.Join(candidates...) + " (hack/build-binaries.sh builds them)"
	if os.Getenv(envRequireCluster) != "" {
		t.Fatalf("%s; %s is set, so this is a failure, not a skip", msg, envRequireCluster)
	}
	t.Skipf("%s; set %s to make this a failure", msg, envRequireCluster)
	return ""
}

var skipNameValidation = true

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// startCluster starts kube-apiserver and etcd with envtest and stops them
// when the test ends.
func startCluster(t *testing.T) *rest.Config {
	t.Helper()
	env := &envtest.Environment{BinaryAssetsDirectory: binDir(t)}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	})
	return cfg
}

// leakOptions are the core module's internal/leakcheck options (copied:
// another module cannot import internal packages), plus the idle keep-alive
// connections of client-go's shared HTTP transports, which outlive a
// manager by design (the transport cache is process-wide).
func leakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*Broadcaster).loop"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	}, extra...)
}
