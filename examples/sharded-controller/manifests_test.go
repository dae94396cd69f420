package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

const (
	namespace      = "sharded-controller"
	serviceAccount = "sharded-controller"
)

// manifests reads deploy/: the namespace first, then the RBAC, then the
// Deployment.
func manifests(t testing.TB) []byte {
	t.Helper()
	var all []byte
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "deployment.yaml"} {
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
// watches the cluster's pods; each range's informer lists and watches
// ConfigMaps), and the Lease verbs of the members' fencing.
var granted = []access{
	{"get", "", "pods", namespace},
	{"watch", "", "pods", namespace},
	{"patch", "", "pods", namespace},
	{"list", "", "configmaps", namespace},
	{"watch", "", "configmaps", namespace},
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
	{"get", "", "pods", "default"}, // another namespace
	{"watch", "", "configmaps", "default"},
	{"get", "", "configmaps", namespace},
	{"update", "", "configmaps", namespace},
	{"get", "", "secrets", namespace},
	{"patch", "coordination.k8s.io", "leases", namespace},
	{"get", "coordination.k8s.io", "leases", "kube-system"},
	{"list", "", "nodes", ""},
}

// The manifests apply to kube-apiserver v1.37 (server-side apply), and the
// controller's service account may do exactly what the controller and the
// provider need: every granted verb is allowed, the others denied, as
// SubjectAccessReviews answer.
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
	for _, k := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment"} {
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
	// Re-applied as a dry run: the server accepts the manifests as they are
	// (no conflict with what is stored).
	if _, err := testcluster.Apply(ctx, c.Config(), manifests(t), "sharded-controller-test", true); err != nil {
		t.Fatalf("dry run: %v", err)
	}

	user := "system:serviceaccount:" + namespace + ":" + serviceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	review := func(a access) (bool, string) {
		t.Helper()
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed, sar.Status.Reason
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
}
