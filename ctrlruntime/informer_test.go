package ctrlruntime_test

import (
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
)

// TestInformerNames checks the names informers get from the kind of their
// example object, as controller-runtime's cache passes it: typed objects
// through the scheme, metadata-only and unstructured ones by the kind in
// their TypeMeta, and a count for the next informers of one kind (one per
// namespace with DefaultNamespaces).
func TestInformerNames(t *testing.T) {
	metadata := &metav1.PartialObjectMetadata{}
	metadata.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))

	simple := ctrlruntime.NewInformer()
	informers := ctrlruntime.NewInformers()
	defer informers.Shutdown()
	for _, tc := range []struct {
		name   string
		newInf ctrlruntime.NewInformerFunc
		obj    runtime.Object
		want   string
	}{
		{"typed", simple, &corev1.ConfigMap{}, "ConfigMap.v1"},
		{"typed, second of its kind", simple, &corev1.ConfigMap{}, "ConfigMap.v1#2"},
		{"group", simple, &appsv1.Deployment{}, "Deployment.v1.apps"},
		{"metadata", simple, metadata, "Secret.v1/metadata"},
		{"unstructured", simple, u, "Deployment.v1.apps/unstructured"},
		{"shared system", informers.NewInformer, &corev1.ConfigMap{}, "ConfigMap.v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lw := &toolscache.ListWatch{}
			inf := tc.newInf(lw, tc.obj, 0, toolscache.Indexers{})
			if got := inf.(*actors.SharedIndexInformer).Name(); got != tc.want {
				t.Errorf("name %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInformersWithActorSystem: given actors.WithActorSystem, Informers runs
// its informers in that system and its Shutdown leaves it running; without
// it, Informers has a system of its own, which Shutdown shuts down.
func TestInformersWithActorSystem(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	given := ctrlruntime.NewInformers(actors.WithActorSystem(sys))
	if got := given.ActorSystem(); got != sys {
		t.Fatalf("ActorSystem() = %p, want the given system %p", got, sys)
	}
	given.Shutdown()
	if sys.IsStopped() {
		t.Fatal("Shutdown stopped the given actor system")
	}

	own := ctrlruntime.NewInformers()
	ownSys := own.ActorSystem()
	if ownSys == sys {
		t.Fatal("an Informers without WithActorSystem uses another's system")
	}
	own.Shutdown()
	if !ownSys.IsStopped() {
		t.Fatal("Shutdown left the Informers' own system running")
	}
}
