package ctrlruntime_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

func init() { ctrl.SetLogger(logr.Discard()) }

const waitTimeout = 60 * time.Second

// observation is what a reconciler saw for one request.
type observation struct {
	exists bool
	data   map[string]string
	span   trace.SpanContext // trace.SpanFromContext(ctx) in Reconcile
}

type recorder struct {
	mu   sync.Mutex
	last map[string]observation // by object name
	all  []observation
}

func (r *recorder) record(name string, o observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]observation{}
	}
	r.last[name] = o
	r.all = append(r.all, o)
}

func (r *recorder) get(name string) (observation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.last[name]
	return o, ok
}

func (r *recorder) observations() []observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observation(nil), r.all...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestManager runs a manager with two controllers against a real
// kube-apiserver: "configmaps" (For ConfigMaps) records what the manager's
// client reads for each ConfigMap; "secrets" watches Secrets through
// ctrlruntime.Kind, maps each to the ConfigMap of the same name and copies
// the Secret's "v" into the ConfigMap's "fromSecret" (removing it when the
// Secret is gone). Both use ctrlruntime.Tracing. The same steps run with
// actorinformer's informers and with controller-runtime's default ones.
func TestManager(t *testing.T) {
	cfg := startCluster(t)
	for _, impl := range []string{"actorinformer", "client-go"} {
		t.Run(impl, func(t *testing.T) { testManager(t, cfg, impl) })
	}
}

func testManager(t *testing.T, cfg *rest.Config, impl string) {
	ours := impl == "actorinformer"
	leaks := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := "ctrlruntime-" + impl
	if err := direct.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	opts := manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Controller names are unique per process: let -count=N rerun.
		Controller: config.Controller{SkipNameValidation: &skipNameValidation},
	}
	var informers *ctrlruntime.Informers
	if ours {
		informers = ctrlruntime.NewInformers(actors.WithTracerProvider(tp))
		opts.NewCache = informers.NewCache
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}

	var cms, secrets recorder
	cmName, secretName := "configmaps-"+impl, "secrets-"+impl

	cmTracing := ctrlruntime.NewTracing(tp, nil)
	err = builder.ControllerManagedBy(mgr).Named(cmName).
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{NewQueue: cmTracing.NewQueue}).
		Complete(cmTracing.Reconciler(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Namespace != ns {
				return reconcile.Result{}, nil
			}
			var cm corev1.ConfigMap
			err := mgr.GetClient().Get(ctx, req.NamespacedName, &cm)
			if err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, err
			}
			cms.record(req.Name, observation{exists: err == nil, data: maps.Clone(cm.Data), span: trace.SpanContextFromContext(ctx)})
			return reconcile.Result{}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}

	secretTracing := ctrlruntime.NewTracing(tp, nil)
	toConfigMap := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *corev1.Secret) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
	})
	err = builder.ControllerManagedBy(mgr).Named(secretName).
		WatchesRawSource(ctrlruntime.Kind(secretTracing, mgr.GetCache(), &corev1.Secret{}, toConfigMap)).
		WithOptions(controller.Options{NewQueue: secretTracing.NewQueue}).
		Complete(secretTracing.Reconciler(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Namespace != ns {
				return reconcile.Result{}, nil
			}
			c := mgr.GetClient()
			var s corev1.Secret
			serr := c.Get(ctx, req.NamespacedName, &s)
			if serr != nil && !apierrors.IsNotFound(serr) {
				return reconcile.Result{}, serr
			}
			secrets.record(req.Name, observation{exists: serr == nil, span: trace.SpanContextFromContext(ctx)})
			var cm corev1.ConfigMap
			if err := c.Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			v, has := string(s.Data["v"]), serr == nil
			if cur, ok := cm.Data["fromSecret"]; ok == has && cur == v {
				return reconcile.Result{}, nil
			}
			if has {
				if cm.Data == nil {
					cm.Data = map[string]string{}
				}
				cm.Data["fromSecret"] = v
			} else {
				delete(cm.Data, "fromSecret")
			}
			return reconcile.Result{}, c.Update(ctx, &cm)
		})))
	if err != nil {
		t.Fatal(err)
	}

	stop := startManager(t, ctx, mgr)
	defer stop()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	// The manager's cache (and so its client) is made of our informers, or
	// of client-go's.
	cmInf, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	secretInf, err := mgr.GetCache().GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	ourCM, isOurs := cmInf.(*actors.SharedIndexInformer)
	if isOurs != ours {
		t.Fatalf("ConfigMap informer is %T", cmInf)
	}

	configMap := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}, Data: data}
	}
	seen := func(what string, want func(observation) bool) {
		t.Helper()
		waitFor(t, what, func() bool { o, ok := cms.get("a"); return ok && want(o) })
	}

	// Create, then update, a ConfigMap.
	cm := configMap(map[string]string{"x": "1"})
	if err := direct.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	seen("the created ConfigMap", func(o observation) bool { return o.exists && o.data["x"] == "1" })
	if ours {
		if _, exists, err := ourCM.GetStore().GetByKey(ns + "/a"); err != nil || !exists {
			t.Fatalf("our informer's store does not hold %s/a: %v", ns, err)
		}
	}
	cm.Data["x"] = "2"
	if err := direct.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	seen("the updated ConfigMap", func(o observation) bool { return o.exists && o.data["x"] == "2" })

	// A Secret of the same name: the secrets controller copies it in.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}, Data: map[string][]byte{"v": []byte("s1")}}
	if err := direct.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	seen("the Secret's first value", func(o observation) bool { return o.data["fromSecret"] == "s1" && o.data["x"] == "2" })
	secret.Data["v"] = []byte("s2")
	if err := direct.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	seen("the Secret's second value", func(o observation) bool { return o.data["fromSecret"] == "s2" })
	if err := direct.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	seen("the Secret's value removed", func(o observation) bool { _, ok := o.data["fromSecret"]; return o.exists && !ok })
	waitFor(t, "the secrets controller to see the Secret gone", func() bool { o, ok := secrets.get("a"); return ok && !o.exists })
	if err := direct.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	seen("the ConfigMap deleted", func(o observation) bool { return !o.exists })

	// Handler names: ours says which controller it belongs to;
	// controller-runtime's own (For, Owns, Watches) are all one Go type.
	if ours {
		names := func(inf any) []string {
			var ns []string
			for _, h := range inf.(*actors.SharedIndexInformer).Stats().Handlers {
				ns = append(ns, h.Name)
			}
			return ns
		}
		t.Logf("ConfigMap informer %q handlers: %q", ourCM.Name(), names(cmInf))
		t.Logf("Secret informer %q handlers: %q", secretInf.(*actors.SharedIndexInformer).Name(), names(secretInf))
		if got, want := names(secretInf), []string{secretName + "/Secret.v1"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Secret informer handlers %q, want %q", got, want)
		}
		if got := names(cmInf); len(got) != 1 || !strings.HasPrefix(got[0], "sigs.k8s.io/controller-runtime/pkg/internal/source.EventHandler") {
			t.Errorf("ConfigMap informer handlers %q, want controller-runtime's EventHandler", got)
		}
	}

	stop()
	if ours && !informers.ActorSystem().IsStopped() {
		t.Error("the informers' actor system is still running after the manager stopped")
	}
	checkTraces(t, exp, ours, cms.observations(), secrets.observations(), secretName+"/Secret.v1")

	if err := direct.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Errorf("deleting namespace: %v", err)
	}
	if err := goleak.Find(leakOptions(leaks)...); err != nil {
		t.Errorf("goroutines left after the manager stopped: %v", err)
	}
}

// checkTraces checks, once the manager has stopped (every span ended), that
// every Reconcile ran inside a workqueue.process span, and that those of the
// secrets controller link to the handler spans of its ctrlruntime.Kind
// source when the informers are ours; controller-runtime's For source adds
// without the delta's context, so nothing links there.
func checkTraces(t *testing.T, exp *tracetest.InMemoryExporter, ours bool, cms, secrets []observation, handlerName string) {
	t.Helper()
	if !tracingCompiled {
		return
	}
	type spanID struct {
		trace.TraceID
		trace.SpanID
	}
	id := func(sc trace.SpanContext) spanID { return spanID{sc.TraceID(), sc.SpanID()} }
	spans := map[spanID]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[id(s.SpanContext)] = s
	}
	process := func(o observation) tracetest.SpanStub {
		t.Helper()
		s, ok := spans[id(o.span)]
		if !o.span.IsValid() || !ok || s.Name != aiworkqueue.SpanProcess {
			t.Fatalf("Reconcile's span %v is not a recorded %s span (%q)", o.span, aiworkqueue.SpanProcess, s.Name)
		}
		return s
	}
	for _, o := range cms {
		if s := process(o); len(s.Links) != 0 {
			t.Errorf("a configmaps reconcile links to %d spans; controller-runtime's For source cannot link", len(s.Links))
		}
	}
	linked := 0
	for _, o := range secrets {
		for _, l := range process(o).Links {
			h, ok := spans[id(l.SpanContext)]
			if !ok || h.Name != "handler" {
				t.Errorf("a secrets reconcile links to %v, not to a recorded handler span (%q)", l.SpanContext, h.Name)
				continue
			}
			if got := attr(h.Attributes, "actorinformer.handler.name"); got != handlerName {
				t.Errorf("linked handler span of handler %q, want %q", got, handlerName)
			}
			linked++
		}
	}
	t.Logf("%d configmaps reconciles, %d secrets reconciles, %d links from secrets reconciles to handler spans", len(cms), len(secrets), linked)
	if ours && linked == 0 {
		t.Error("no secrets reconcile links to a delta's handler span")
	}
	if !ours && linked != 0 {
		t.Errorf("%d links with controller-runtime's informers, which carry no context", linked)
	}
}

func attr(kvs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// startManager starts mgr and returns the function that stops it (once,
// however often it is called) and waits for its Start to return.
func startManager(t *testing.T, ctx context.Context, mgr manager.Manager) func() {
	t.Helper()
	mgrDone := make(chan error, 1)
	mgrCtx, stopMgr := context.WithCancel(ctx)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			stopMgr()
			select {
			case err := <-mgrDone:
				if err != nil {
					t.Errorf("manager: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("the manager did not stop")
			}
		})
	}
}
