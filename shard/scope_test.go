package shard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/actorinformer/actorinformer/shard"
)

// Hashing a cluster-scoped kind by namespace would put every object in one
// range: the member refuses it at its start, with a clear reason (Err), and
// Run returns. A namespaced kind starts as before.
func TestNamespaceHashOfAClusterScopedKindIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, namespace string
		refused         bool
	}{{"cluster-scoped", "", true}, {"namespaced", "team-a", false}} {
		t.Run(tc.name, func(t *testing.T) {
			lw := &cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.ConfigMap{
						{ObjectMeta: metav1.ObjectMeta{Name: "o1", Namespace: tc.namespace, UID: "u1", ResourceVersion: "5"}}}}, nil
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					return watch.NewFake(), nil
				},
			}
			r := runMember(t, test.NewInMemAgent(), lw, shard.WithHashField(shard.Namespace))
			if !tc.refused {
				eventually(t, 30*time.Second, "the member to sync", func() string {
					if r.inf.HasSynced() {
						return ""
					}
					return "not synced; Err: " + r.inf.Err()
				})
				return
			}
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return")
			}
			if err := r.inf.Err(); !strings.Contains(err, "cluster-scoped") || !strings.Contains(err, "WithHashField(UID)") {
				t.Fatalf("Err() = %q; want the refusal, naming the remedy", err)
			}
		})
	}
}
