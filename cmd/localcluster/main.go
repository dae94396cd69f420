// Command localcluster runs a local Kubernetes API server for trying
// actorinformer and its sharding on a real server: etcd and kube-apiserver
// v1.37 with the ShardedListAndWatch feature gate on, from the binaries
// hack/build-binaries.sh builds, on loopback. It writes a kubeconfig,
// prints how to use it, and runs until Ctrl-C (SIGINT) or SIGTERM; then it
// stops kube-apiserver and etcd (SIGTERM, SIGKILL after 15 s), and removes
// their data directory and the kubeconfig.
//
//	hack/build-binaries.sh kube       # once: kube-apiserver and etcd
//	go run ./cmd/localcluster --pods 1000
//	go run ./cmd/demo --members 3 --kubeconfig .cache/localcluster/kubeconfig
//
// There is no controller-manager, scheduler or kubelet: Pods stay Pending,
// which an informer does not mind. Should localcluster itself be killed
// (SIGKILL), the kernel kills both servers (Linux) but the data directory
// stays in the system's temporary directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	kubeconfig   string
	gate         bool
	featureGates string
	pods         int
	namespace    string
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprint(errOut, `Usage: localcluster [flags]

Runs etcd and kube-apiserver v1.37 on loopback (binaries from
hack/build-binaries.sh kube, in $ACTORINFORMER_BIN_DIR or .cache/bin), writes
a kubeconfig for an admin user, and runs until Ctrl-C or SIGTERM; then stops
both and removes their data and the kubeconfig.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "where to write the kubeconfig (default .cache/localcluster/kubeconfig in the repository, else in the data directory)")
	fs.BoolVar(&cfg.gate, "sharded-list-and-watch", true, "turn the ShardedListAndWatch feature gate on (the server applies shard selectors); false: members filter on the client")
	fs.StringVar(&cfg.featureGates, "feature-gates", "", "more kube-apiserver feature gates, e.g. WatchList=true")
	fs.IntVar(&cfg.pods, "pods", 0, "Pods to create once the server is ready (they stay Pending: no scheduler or kubelet runs)")
	fs.StringVar(&cfg.namespace, "namespace", "demo", "the namespace of --pods")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if cfg.pods < 0 {
		return cfg, errors.New("--pods must not be negative")
	}
	return cfg, nil
}

func (cfg config) gates() string {
	g := ""
	if cfg.gate {
		g = "ShardedListAndWatch=true"
	}
	if cfg.featureGates != "" {
		if g != "" {
			g += ","
		}
		g += cfg.featureGates
	}
	return g
}

func run(args []string, out, errOut io.Writer) error {
	cfg, err := parseFlags(args, errOut)
	if err != nil {
		return err
	}
	// Signals first: a Ctrl-C during the start still stops what started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "actorinformer-localcluster-")
	if err != nil {
		return err
	}
	kubeconfig := cfg.kubeconfig
	if kubeconfig == "" {
		kubeconfig = filepath.Join(dir, "kubeconfig")
		if root, err := testcluster.RepoRoot(); err == nil {
			kubeconfig = filepath.Join(root, ".cache", "localcluster", "kubeconfig")
		}
	}
	started := time.Now()
	c, err := testcluster.Launch(dir, testcluster.Options{WatchCache: true, FeatureGates: cfg.gates()})
	if err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	cleanup := func() error {
		stopping := time.Now()
		err := c.Stop()
		err = errors.Join(err, os.RemoveAll(dir))
		if rmErr := os.Remove(kubeconfig); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			err = errors.Join(err, rmErr)
		}
		fmt.Fprintf(out, "localcluster: stopped kube-apiserver and etcd in %v; removed %s and %s\n",
			time.Since(stopping).Round(time.Millisecond), dir, kubeconfig)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return errors.Join(err, cleanup())
	}
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		return errors.Join(err, cleanup())
	}
	etcdTook, apiTook := c.ReadyAfter()
	apiPID, etcdPID := c.PIDs()
	gates := cfg.gates()
	if gates == "" {
		gates = "none"
	}
	fmt.Fprintf(out, "localcluster: ready in %v: etcd %s (pid %d, ready in %v), kube-apiserver v1.37 %s (pid %d, ready in %v), feature gates %s\n",
		time.Since(started).Round(time.Millisecond), c.EtcdURL(), etcdPID, etcdTook.Round(time.Millisecond),
		c.Host(), apiPID, apiTook.Round(time.Millisecond), gates)
	fmt.Fprintf(out, "localcluster: data and logs in %s\n", dir)
	fmt.Fprintf(out, "localcluster: kubeconfig %s (user %s, group system:masters); for example:\n", kubeconfig, testcluster.AdminUser)
	fmt.Fprintf(out, "  go run ./cmd/demo --members 3 --kubeconfig %s\n", kubeconfig)
	if cfg.pods > 0 {
		start := time.Now()
		if err := createPods(ctx, c, cfg.namespace, cfg.pods); err != nil {
			return errors.Join(fmt.Errorf("creating pods: %w", err), cleanup())
		}
		fmt.Fprintf(out, "localcluster: created %d pods in namespace %s in %v\n", cfg.pods, cfg.namespace, time.Since(start).Round(time.Millisecond))
	}
	fmt.Fprintln(out, "localcluster: running; Ctrl-C or SIGTERM stops it")
	<-ctx.Done()
	stop() // a second Ctrl-C ends localcluster at once; the servers then get SIGKILL from the kernel
	fmt.Fprintln(out, "localcluster: stopping")
	return cleanup()
}

// createPods creates n Pods in ns, 8 at a time.
func createPods(ctx context.Context, c *testcluster.Cluster, ns string, n int) error {
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": "localcluster"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
				}
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
