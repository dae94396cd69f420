package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// verifyNoLeaks registers a goroutine-leak check that runs after every other
// cleanup of the test (cleanups run last-in first-out), i.e. once the
// processes are killed, so client connections to them have ended too.
func verifyNoLeaks(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t, leakcheck.Options()...)
	})
}

func newClient(t *testing.T, c *testcluster.Cluster) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

func TestCluster(t *testing.T) {
	verifyNoLeaks(t)
	c := testcluster.Start(t, testcluster.Options{})
	cs := newClient(t, c)
	ctx := t.Context()

	t.Run("Informers", func(t *testing.T) {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("before-sync", map[string]string{"a": "1"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
		cmInformer := factory.Core().V1().ConfigMaps()
		podInformer := factory.Core().V1().Pods()
		added := make(chan string, 100)
		if _, err := cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { added <- obj.(*corev1.ConfigMap).Name },
		}); err != nil {
			t.Fatal(err)
		}
		_ = podInformer.Informer()
		stop := make(chan struct{})
		defer factory.Shutdown()
		defer close(stop)
		factory.Start(stop)

		syncCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				t.Fatalf("informer for %v did not sync", typ)
			}
		}
		if _, err := cmInformer.Lister().ConfigMaps("default").Get("before-sync"); err != nil {
			t.Fatalf("lister after sync: %v", err)
		}

		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("after-sync", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pending"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod (ServiceAccount admission should be off): %v", err)
		}
		waitFor(t, 10*time.Second, "after-sync add event", func() bool {
			for {
				select {
				case n := <-added:
					if n == "after-sync" {
						return true
					}
				default:
					return false
				}
			}
		})
		waitFor(t, 10*time.Second, "pod in informer", func() bool {
			p, err := podInformer.Lister().Pods("default").Get("pending")
			return err == nil && p.Status.Phase != corev1.PodRunning // no scheduler, no kubelet
		})
	})

	t.Run("UnprivilegedIsForbidden", func(t *testing.T) {
		ucs, err := kubernetes.NewForConfig(c.UnprivilegedConfig())
		if err != nil {
			t.Fatal(err)
		}
		_, err = ucs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("list as %s: want 403 Forbidden, got %v", testcluster.UnprivilegedUser, err)
		}
		_, err = ucs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("watch as %s: want 403 Forbidden, got %v", testcluster.UnprivilegedUser, err)
		}
		// The admin can.
		if _, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CompactExpiresOldWatch", func(t *testing.T) {
		cmi := cs.CoreV1().ConfigMaps("default")
		cm, err := cmi.Create(ctx, configMap("compact-me", map[string]string{"v": "0"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldRV := cm.ResourceVersion
		for i := 1; i <= 3; i++ {
			cm.Data["v"] = fmt.Sprint(i)
			if cm, err = cmi.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Before the compaction, the old RV is fine.
		w, err := cmi.Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				t.Fatalf("watch before compaction: %v", apierrors.FromObject(ev.Object))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event from watch before compaction")
		}
		w.Stop()

		rev := c.Compact(t)
		if rev < mustAtoi(t, cm.ResourceVersion) {
			t.Fatalf("compacted at %d, before the last write %s", rev, cm.ResourceVersion)
		}
		if got := c.EtcdRevision(t); got < rev {
			t.Fatalf("EtcdRevision %d < compacted %d", got, rev)
		}
		err = watchError(ctx, cs, oldRV)
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from %s after Compact: want 410, got %v", oldRV, err)
		}
		t.Logf("watch from compacted rv %s: %v", oldRV, err)
		// A list at the old exact RV is expired too.
		_, err = cmi.List(ctx, metav1.ListOptions{ResourceVersion: oldRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("exact list at %s after Compact: want 410, got %v", oldRV, err)
		}
	})

	t.Run("ProxyCutBreaksWatch", func(t *testing.T) {
		p := c.NewProxy(t)
		pcs, err := kubernetes.NewForConfig(c.ProxyConfig(p))
		if err != nil {
			t.Fatal(err)
		}
		list, err := pcs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := pcs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("through-proxy", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev := nextEvent(t, w); ev.Type != watch.Added {
			t.Fatalf("want ADDED, got %v", ev.Type)
		}
		if n := p.CutAll(); n == 0 {
			t.Fatal("CutAll cut no connection")
		}
		select {
		case ev, ok := <-w.ResultChan():
			if ok && ev.Type != watch.Error {
				t.Fatalf("after CutAll: want the watch to end, got %v", ev.Type)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("watch still open 10s after CutAll")
		}
		// The proxy still accepts new connections.
		if _, err := pcs.CoreV1().ConfigMaps("default").Get(ctx, "through-proxy", metav1.GetOptions{}); err != nil {
			t.Fatalf("request after CutAll: %v", err)
		}
		if p.Cuts() == 0 {
			t.Fatal("Cuts() = 0")
		}

		p.SetBlocked(true)
		// client-go retries a GET after a reset, so bound it short.
		shortCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = pcs.CoreV1().ConfigMaps("default").Get(shortCtx, "through-proxy", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Fatal("request through a blocked proxy succeeded")
		}
		p.SetBlocked(false)
		if _, err := pcs.CoreV1().ConfigMaps("default").Get(ctx, "through-proxy", metav1.GetOptions{}); err != nil {
			t.Fatalf("request after unblock: %v", err)
		}
	})

	t.Run("ProxyChaos", func(t *testing.T) {
		p := c.NewProxy(t)
		pcs, err := kubernetes.NewForConfig(c.ProxyConfig(p))
		if err != nil {
			t.Fatal(err)
		}
		p.StartChaos(20*time.Millisecond, 60*time.Millisecond)
		deadline := time.Now().Add(time.Second)
		var ok, failed int
		for time.Now().Before(deadline) {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := pcs.CoreV1().ConfigMaps("default").List(rctx, metav1.ListOptions{})
			cancel()
			if err != nil {
				failed++
			} else {
				ok++
			}
		}
		p.Stop()
		cuts := p.Cuts()
		t.Logf("chaos: %d requests ok, %d failed, %d connections cut, %d accepted", ok, failed, cuts, p.Accepted())
		if cuts == 0 {
			t.Fatal("chaos cut no connection")
		}
		if ok == 0 {
			t.Fatal("no request got through during chaos")
		}
		// Stopped: nothing is cut any more.
		if _, err := pcs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		if p.Cuts() != cuts {
			t.Fatalf("cuts went on after Stop: %d -> %d", cuts, p.Cuts())
		}
	})

	// Last: these break every client connection.
	t.Run("RestartKeepsData", func(t *testing.T) {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("survivor", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		addr := c.APIServerAddr()
		c.RestartAPIServer(t)
		if c.APIServerAddr() != addr {
			t.Fatalf("address changed: %s -> %s", addr, c.APIServerAddr())
		}
		got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Data["k"] != "v" {
			t.Fatalf("data after restart: %v", got.Data)
		}

		c.StopAPIServer(t)
		if c.APIServerRunning() {
			t.Fatal("APIServerRunning after Stop")
		}
		shortCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = cs.CoreV1().ConfigMaps("default").Get(shortCtx, "survivor", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Fatal("request to a stopped apiserver succeeded")
		}
		c.StartAPIServer(t)
		if !c.APIServerRunning() {
			t.Fatal("not running after StartAPIServer")
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("EtcdRestartKeepsData", func(t *testing.T) {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("etcd-survivor", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rev := c.EtcdRevision(t)
		url := c.EtcdURL()
		c.StopEtcd(t)
		if c.EtcdRunning() {
			t.Fatal("EtcdRunning after Stop")
		}
		shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cs.CoreV1().ConfigMaps("default").Get(shortCtx, "etcd-survivor", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Fatal("a read with etcd stopped succeeded")
		}
		c.StartEtcd(t)
		if !c.EtcdRunning() || c.EtcdURL() != url {
			t.Fatalf("after StartEtcd: running %v, URL %s (was %s)", c.EtcdRunning(), c.EtcdURL(), url)
		}
		if got := c.EtcdRevision(t); got < rev {
			t.Fatalf("etcd revision %d after the restart, %d before", got, rev)
		}
		// The apiserver reconnects by itself.
		waitFor(t, 30*time.Second, "the apiserver reads through the restarted etcd", func() bool {
			got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "etcd-survivor", metav1.GetOptions{})
			return err == nil && got.Data["k"] == "v"
		})
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("after-etcd-restart", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClusterWatchCache starts a server with the watch cache on and checks
// that an informer syncs from it.
func TestClusterWatchCache(t *testing.T) {
	verifyNoLeaks(t)
	c := testcluster.Start(t, testcluster.Options{WatchCache: true})
	cs := newClient(t, c)
	ctx := t.Context()
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap("cached", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().ConfigMaps()
	_ = inf.Informer()
	ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer factory.Shutdown()
	defer cancel()
	factory.StartWithContext(ictx)
	if !cache.WaitForCacheSync(ictx.Done(), inf.Informer().HasSynced) {
		t.Fatal("configmap informer did not sync")
	}
	if _, err := inf.Lister().ConfigMaps("default").Get("cached"); err != nil {
		t.Fatal(err)
	}
}

func TestJaeger(t *testing.T) {
	verifyNoLeaks(t)
	start := time.Now()
	j := testcluster.StartJaeger(t)
	t.Logf("jaeger ready in %v: otlp http %s, otlp grpc %s, query %s",
		time.Since(start), j.OTLPHTTPEndpoint(), j.OTLPGRPCEndpoint(), j.QueryURL())
	ctx := t.Context()

	const service = "testcluster-harness"
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTPEndpoint()), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	_, span := tp.Tracer("testcluster_test").Start(ctx, "harness-span")
	span.SetAttributes(attribute.String("harness.key", "harness-value"))
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("tracer provider shutdown (export): %v", err)
	}

	traces := j.WaitForTraces(t, service, 20*time.Second, func(ts []testcluster.JaegerTrace) bool {
		return len(ts) > 0
	})
	sp := traces[0].Spans[0]
	if sp.OperationName != "harness-span" {
		t.Fatalf("span name %q", sp.OperationName)
	}
	if v, ok := sp.Tag("harness.key"); !ok || v != "harness-value" {
		t.Fatalf("tag harness.key = %v, %v; tags %v", v, ok, sp.Tags)
	}
	services, err := j.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(services, service) {
		t.Fatalf("services %v lack %q", services, service)
	}
}

// TestMissingBinaries checks the skip-or-fail rule without real binaries.
func TestMissingBinaries(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(testcluster.EnvBinDir, empty)

	if d, err := testcluster.BinDir(); err != nil || d != empty {
		t.Fatalf("BinDir = %q, %v; want %q", d, err, empty)
	}
	err := testcluster.Available()
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") || !strings.Contains(err.Error(), "build-binaries.sh") {
		t.Fatalf("Available: %v", err)
	}
	if err := testcluster.JaegerAvailable(); err == nil || !strings.Contains(err.Error(), "jaeger") {
		t.Fatalf("JaegerAvailable: %v", err)
	}

	for _, tc := range []struct {
		name    string
		require string
		want    string
	}{
		{"unset", "", "skip"},
		{"set", "1", "fatal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(testcluster.EnvRequireCluster, tc.require)
			if tc.require == "" {
				os.Unsetenv(testcluster.EnvRequireCluster)
			}
			for name, start := range map[string]func(testing.TB){
				"Start":           func(tb testing.TB) { testcluster.Start(tb, testcluster.Options{}) },
				"StartJaeger":     func(tb testing.TB) { testcluster.StartJaeger(tb) },
				"RequireBinaries": func(tb testing.TB) { testcluster.RequireBinaries(tb) },
			} {
				got, msg := runRecording(t, start)
				if got != tc.want {
					t.Errorf("%s with %s=%q: got %s (%s), want %s", name, testcluster.EnvRequireCluster, tc.require, got, msg, tc.want)
				}
				if !strings.Contains(msg, testcluster.EnvRequireCluster) {
					t.Errorf("%s: message %q does not mention %s", name, msg, testcluster.EnvRequireCluster)
				}
			}
		})
	}
}

func TestBinDirDefault(t *testing.T) {
	t.Setenv(testcluster.EnvBinDir, "")
	os.Unsetenv(testcluster.EnvBinDir)
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	d, err := testcluster.BinDir()
	if err != nil || d != filepath.Join(root, ".cache", "bin") {
		t.Fatalf("BinDir = %q, %v", d, err)
	}
	t.Setenv(testcluster.EnvBinDir, "some/rel")
	if d, _ := testcluster.BinDir(); d != filepath.Join(root, "some", "rel") {
		t.Fatalf("relative BinDir = %q", d)
	}
}

// recordingTB turns Skip/Fatal into a recorded outcome (then ends the
// goroutine, as the real ones do).
type recordingTB struct {
	testing.TB
	mu      sync.Mutex
	outcome string
	msg     string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) record(outcome, msg string) {
	r.mu.Lock()
	r.outcome, r.msg = outcome, msg
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recordingTB) Skipf(f string, a ...any)  { r.record("skip", fmt.Sprintf(f, a...)) }
func (r *recordingTB) Skip(a ...any)             { r.record("skip", fmt.Sprint(a...)) }
func (r *recordingTB) Fatalf(f string, a ...any) { r.record("fatal", fmt.Sprintf(f, a...)) }
func (r *recordingTB) Fatal(a ...any)            { r.record("fatal", fmt.Sprint(a...)) }

func runRecording(t *testing.T, f func(testing.TB)) (outcome, msg string) {
	r := &recordingTB{TB: t, outcome: "returned"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome, r.msg
}

// watchError opens a watch from rv and returns the error it ends with:
// the Watch call's own error or the first ERROR event as an API error.
func watchError(ctx context.Context, cs kubernetes.Interface, rv string) error {
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return err
	}
	defer w.Stop()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch closed without an error event")
			}
			if ev.Type == watch.Error {
				return apierrors.FromObject(ev.Object)
			}
		case <-timeout:
			return errors.New("no error event within 10s")
		}
	}
}

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return watch.Event{}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
