package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorinformer/actorinformer/ctrlruntime"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// controller-runtime's client logs through its global logger: klog's,
// as the program's.
func init() { ctrllog.SetLogger(klog.NewKlogr()) }

const (
	namespace      = "sharded-controller"
	serviceAccount = "sharded-controller"
)

// manifests reads deploy/: the namespace first, then the CRD, the RBAC,
// the Deployment, its HorizontalPodAutoscaler and the adapter's rule.
func manifests(t testing.TB) []byte {
	t.Helper()
	var all []byte
	for _, f := range []string{"namespace.yaml", "crd.yaml", "rbac.yaml", "deployment.yaml", "hpa.yaml", "adapter-rules.yaml"} {
		b, err := os.ReadFile(filepath.Join("deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, b...), "\n---\n"...)
	}
	return all
}

// A verb the controller's service account is checked for.
type access struct {
	verb, group, resource, namespace string
}

// granted are the calls the controller and protoactor's k8s provider make
// (read in their code: the provider gets and patches its own pod and
// watches the cluster's pods; each range's informers list and watch
// Bundles and ConfigMaps, in every namespace; the reconciler creates and
// updates ConfigMaps, controllerutil.CreateOrUpdate patches none but a
// patch is what an edit of it would do), the Lease verbs of the members'
// fencing, and the owner's finalizers that a blockOwnerDeletion
// ownerReference needs where OwnerReferencesPermissionEnforcement admits.
var granted = []access{
	{"get", "", "pods", namespace},
	{"watch", "", "pods", namespace},
	{"patch", "", "pods", namespace},
	{"list", "example.actorinformer.io", "bundles", ""},
	{"watch", "example.actorinformer.io", "bundles", ""},
	{"get", "example.actorinformer.io", "bundles", "team-1-apps"},
	{"update", "example.actorinformer.io", "bundles/finalizers", "team-1-apps"},
	{"list", "", "configmaps", ""},
	{"watch", "", "configmaps", ""},
	{"get", "", "configmaps", "team-1-apps"},
	{"create", "", "configmaps", "team-1-apps"},
	{"update", "", "configmaps", "team-1-apps"},
	{"patch", "", "configmaps", "team-1-apps"},
	{"get", "coordination.k8s.io", "leases", namespace},
	{"list", "coordination.k8s.io", "leases", namespace},
	{"watch", "coordination.k8s.io", "leases", namespace},
	{"create", "coordination.k8s.io", "leases", namespace},
	{"update", "coordination.k8s.io", "leases", namespace},
	{"delete", "coordination.k8s.io", "leases", namespace},
	// The access check at the start (shard.WithAccessCheck): every
	// authenticated user may (system:basic-user), no Role needed.
	{"create", "authorization.k8s.io", "selfsubjectaccessreviews", ""},
}

// denied are verbs nothing of the controller uses: least privilege.
var denied = []access{
	{"list", "", "pods", namespace}, // the provider only watches
	{"delete", "", "pods", namespace},
	{"update", "", "pods", namespace},
	{"create", "", "pods", namespace},
	{"get", "", "pods", "default"},              // another namespace
	{"delete", "", "configmaps", "team-1-apps"}, // the garbage collector deletes them
	{"create", "example.actorinformer.io", "bundles", "team-1-apps"},
	{"update", "example.actorinformer.io", "bundles", "team-1-apps"},
	{"delete", "example.actorinformer.io", "bundles", "team-1-apps"},
	{"update", "example.actorinformer.io", "bundles/status", "team-1-apps"},
	{"get", "", "secrets", namespace},
	{"patch", "coordination.k8s.io", "leases", namespace},
	{"get", "coordination.k8s.io", "leases", "kube-system"},
	{"list", "", "nodes", ""},
	{"update", "apps", "deployments/scale", namespace}, // the HPA scales, not the controller
}

// hpaController is the HorizontalPodAutoscaler controller's service
// account (kube-controller-manager's, with --use-service-account-credentials).
const hpaController = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"

// hpaGranted are the calls of the HPA controller for deploy/hpa.yaml:
// the metric from the adapter's custom metrics API, and the Deployment's
// scale. The cluster's bootstrap roles grant them.
var hpaGranted = []access{
	{"get", "custom.metrics.k8s.io", "pods", namespace},
	{"list", "custom.metrics.k8s.io", "pods", namespace},
	{"get", "apps", "deployments/scale", namespace},
	{"update", "apps", "deployments/scale", namespace},
}

// The manifests apply to kube-apiserver v1.37 (server-side apply), the
// CRD is established and serves Bundles, and the controller's service account may do exactly what the controller and the
// provider need: every granted verb is allowed, the others denied, as
// SubjectAccessReviews answer. The HorizontalPodAutoscaler scales the
// Deployment on a metric the adapter's rule serves from the program's
// /metrics (checkHPA), and the HPA controller may read it and scale.
func TestManifests(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	ctx := context.Background()
	objs, err := testcluster.Apply(ctx, c.Config(), manifests(t), "sharded-controller-test", false)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
		"Deployment", "HorizontalPodAutoscaler", "ConfigMap"} {
		if !kinds[k] {
			t.Errorf("no %s among the applied objects", k)
		}
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, "sharded-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != serviceAccount || len(pod.Containers) != 1 {
		t.Fatalf("pod template: service account %q, %d containers", pod.ServiceAccountName, len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet == nil || ctr.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		ctr.LivenessProbe == nil || ctr.LivenessProbe.HTTPGet == nil || ctr.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: readiness %+v, liveness %+v; want /readyz and /healthz", ctr.ReadinessProbe, ctr.LivenessProbe)
	}
	if pod.HostNetwork {
		t.Error("hostNetwork: the provider takes the hostname for the pod's name")
	}
	checkCRD(t, c.Config())
	// Re-applied as a dry run: the server accepts the manifests as they are
	// (no conflict with what is stored).
	if _, err := testcluster.Apply(ctx, c.Config(), manifests(t), "sharded-controller-test", true); err != nil {
		t.Fatalf("dry run: %v", err)
	}

	checkHPA(t, cs)

	user := "system:serviceaccount:" + namespace + ":" + serviceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	review := func(a access) (bool, string) {
		t.Helper()
		return reviewAccess(t, cs, user, groups, a)
	}
	for _, a := range granted {
		if ok, why := review(a); !ok {
			t.Errorf("%s may not %s %s.%s in %q (%s); the controller needs it", user, a.verb, a.resource, a.group, a.namespace, why)
		}
	}
	for _, a := range denied {
		if ok, why := review(a); ok {
			t.Errorf("%s may %s %s.%s in %q (%s); nothing of the controller does", user, a.verb, a.resource, a.group, a.namespace, why)
		}
	}
	for _, a := range hpaGranted {
		if ok, why := reviewAccess(t, cs, hpaController, []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}, a); !ok {
			t.Errorf("%s may not %s %s.%s in %q (%s); deploy/hpa.yaml needs it", hpaController, a.verb, a.resource, a.group, a.namespace, why)
		}
	}
}

// reviewAccess asks the API server whether user may do a, and why.
func reviewAccess(t *testing.T, cs kubernetes.Interface, user string, groups []string, a access) (bool, string) {
	t.Helper()
	resource, subresource, _ := strings.Cut(a.resource, "/")
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: resource, Subresource: subresource, Namespace: a.namespace}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed, sar.Status.Reason
}

// checkHPA: the applied HorizontalPodAutoscaler scales the Deployment on a
// metric that the adapter's rule serves from a series that the program's
// /metrics has, with the label its selector names.
func checkHPA(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	hpa, err := cs.AutoscalingV2().HorizontalPodAutoscalers(namespace).Get(ctx, "sharded-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != "sharded-controller" || ref.APIVersion != "apps/v1" {
		t.Errorf("the HPA scales %+v, want the Deployment sharded-controller", ref)
	}
	if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Pods == nil {
		t.Fatalf("the HPA's metrics: %+v, want one of type Pods", hpa.Spec.Metrics)
	}
	m := hpa.Spec.Metrics[0].Pods
	if m.Target.Type != autoscalingv2.AverageValueMetricType || m.Target.AverageValue == nil || m.Target.AverageValue.Sign() <= 0 {
		t.Errorf("the HPA's target %+v, want a positive average value", m.Target)
	}

	// The adapter's rule: its series and name are the HPA's metric.
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, "sharded-controller-adapter-rules", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Rules []struct {
			SeriesQuery string `json:"seriesQuery"`
			Resources   struct {
				Overrides map[string]struct {
					Resource string `json:"resource"`
				} `json:"overrides"`
			} `json:"resources"`
			Name struct {
				Matches string `json:"matches"`
				As      string `json:"as"`
			} `json:"name"`
			MetricsQuery string `json:"metricsQuery"`
		} `json:"rules"`
	}
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(cm.Data["config.yaml"]), 4096).Decode(&rules); err != nil {
		t.Fatalf("the adapter's rules: %v", err)
	}
	if len(rules.Rules) != 1 {
		t.Fatalf("%d adapter rules, want 1", len(rules.Rules))
	}
	r := rules.Rules[0]
	series, _, _ := strings.Cut(r.SeriesQuery, "{")
	if r.Name.As != m.Metric.Name || !regexp.MustCompile(r.Name.Matches).MatchString(series) {
		t.Errorf("the adapter serves %q as %q (matching %q); the HPA asks for %q", series, r.Name.As, r.Name.Matches, m.Metric.Name)
	}
	if r.Resources.Overrides["pod"].Resource != "pod" || r.Resources.Overrides["namespace"].Resource != "namespace" ||
		!strings.Contains(r.MetricsQuery, "<<.Series>>") || !strings.Contains(r.MetricsQuery, "<<.LabelMatchers>>") {
		t.Errorf("the adapter's rule does not map the series to pods: %+v", r)
	}

	// The program's /metrics: the queue's series, with the selector's label.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = meters.Shutdown(ctx) }()
	// The controller's queue, as main makes it.
	queue := ctrlruntime.NewTracing(nil, meters).NewQueue(queueName, workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	queue.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "a"}})
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() != series {
			continue
		}
		for _, p := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range p.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			matches := true
			for k, v := range m.Metric.Selector.MatchLabels {
				matches = matches && labels[k] == v
			}
			found = found || matches
		}
	}
	if !found {
		names := []string{}
		for _, f := range families {
			names = append(names, f.GetName())
		}
		t.Errorf("/metrics has no %s with the labels %v of the HPA's selector; it has %v", series, m.Metric.Selector.MatchLabels, names)
	}
}

// bundleClient is a controller-runtime client with the program's scheme,
// once the API server serves Bundles (the CRD is established).
func bundleClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var l BundleList
		err := c.List(context.Background(), &l, client.Limit(1))
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("Bundles not served 30s after the CRD was applied: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkCRD: a Bundle's spec.data is kept by the server (the CRD's schema
// does not prune it) and read back through the program's Go type.
func checkCRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	ctx := context.Background()
	c := bundleClient(t, cfg)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-1-apps"}}); err != nil {
		t.Fatal(err)
	}
	b := &Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: "team-1-apps", Name: "b"}, Spec: BundleSpec{Data: map[string]string{"k": "v"}}}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	var got Bundle
	if err := c.Get(ctx, client.ObjectKeyFromObject(b), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Data["k"] != "v" || len(got.Spec.Data) != 1 || got.UID == "" {
		t.Errorf("the Bundle read back: %+v, want spec.data {k: v}", got)
	}
}
