//go:build !race

package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/shard"
)

// A group of a typed kind (ConfigMaps, New's) and a CRD's objects through
// the dynamic client (unstructured Widgets, AddKind), hashed by namespace,
// on a real kube-apiserver: two members, then a third that joins, then
// one that leaves. Each time every namespace's ConfigMap and Widget are
// cached by one member, the caches add up to the server's objects, and the
// join copies both kinds from their deliverers (the Widgets decoded as
// unstructured objects) without listing either but for its scope check.
func TestShardKindsTypedAndDynamic(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	cs := clientFor(t, c.Config())
	dyn, err := dynamic.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	createWidgetCRD(t, dyn)
	ctx := t.Context()
	var namespaces []string
	for i := range 32 {
		namespaces = append(namespaces, fmt.Sprintf("kinds-%d-apps", i))
	}
	createNamespaces(t, cs, namespaces...)
	for _, ns := range namespaces {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "e2e.actorinformer.io/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "owned", "namespace": ns}}}
		if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	type member struct {
		c            *cluster.Cluster
		prov         *test.Provider
		cms, widgets *shard.Informer
		widgetLW     *recordingLW
		cancel       context.CancelFunc
		done         chan struct{}
	}
	agent := test.NewInMemAgent()
	start := func() *member {
		t.Helper()
		prov := test.NewTestProvider(agent, test.WithTestProviderServiceTTL(time.Second), test.WithTestProviderRefreshTTL(200*time.Millisecond))
		pc := cluster.New(actors.NewActorSystem(actors.SystemLogger(slog.New(slog.DiscardHandler))), cluster.Configure("kinds-test",
			prov, disthash.New(), remote.Configure("127.0.0.1", 0, shard.RemoteOption())))
		pc.StartMember()
		m := &member{c: pc, prov: prov, done: make(chan struct{}), widgetLW: &recordingLW{inner: listWatch(dyn.Resource(widgetGVR))}}
		m.cms, err = shard.New(pc, "kinds", listWatch(cs.CoreV1().ConfigMaps("")), &corev1.ConfigMap{}, shard.WithRanges(8),
			shard.WithHashField(shard.Namespace), shard.WithLeases(cs.CoordinationV1(), "default"),
			shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))
		if err != nil {
			t.Fatal(err)
		}
		if m.widgets, err = m.cms.AddKind(widgetGVR.GroupResource(), m.widgetLW, &unstructured.Unstructured{}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		go func() { defer close(m.done); m.widgets.RunWithContext(rctx) }() // Run of any kind runs the group
		return m
	}
	// stop stops a member's group, then its cluster member gracefully:
	// a remote stopped at once keeps the others' gRPC connections to it
	// reconnecting, goroutines the next tests' leak checks would find.
	stop := func(m *member) {
		m.cancel()
		<-m.done
		_ = m.prov.Shutdown(true)
		m.c.Shutdown(true)
	}
	// together is "" once every namespace's two objects are cached by one
	// member, and every object once.
	together := func(ms []*member) string {
		owner := map[string]int{}
		for i, m := range ms {
			if !m.cms.HasSynced() || !m.widgets.HasSynced() {
				return fmt.Sprintf("member %d not synced", i)
			}
			for _, inf := range []*shard.Informer{m.cms, m.widgets} {
				for _, k := range inf.GetIndexer().ListKeys() {
					ns, _, _ := strings.Cut(k, "/")
					if !strings.HasPrefix(ns, "kinds-") {
						continue
					}
					if o, ok := owner[inf.Kind()+" "+k]; ok {
						return fmt.Sprintf("%s %s cached by members %d and %d", inf.Kind(), k, o, i)
					}
					owner[inf.Kind()+" "+k] = i
					if o, ok := owner[ns]; ok && o != i {
						return fmt.Sprintf("namespace %s: members %d and %d cache its objects", ns, o, i)
					}
					owner[ns] = i
				}
			}
		}
		if len(owner) != 3*len(namespaces) {
			return fmt.Sprintf("%d of %d objects and namespaces known", len(owner), 3*len(namespaces))
		}
		return ""
	}
	ms := []*member{start(), start()}
	defer func() {
		for _, m := range ms {
			stop(m)
		}
	}()
	informertest.Eventually(t, 60*time.Second, 50*time.Millisecond, "two members cache both kinds, by namespace", func() string { return together(ms) })

	ms = append(ms, start())
	informertest.Eventually(t, 60*time.Second, 50*time.Millisecond, "three members after a join", func() string { return together(ms) })
	joiner := ms[2]
	if n := len(joiner.widgetLW.listCalls()); n != 1 {
		t.Errorf("the joining member listed Widgets %d times, want its scope check's alone", n)
	}
	if st := joiner.cms.Status(); st.WarmStarts == 0 || st.WarmFallbacks != 0 {
		t.Errorf("the joining member: %d warm starts, %d fallbacks", st.WarmStarts, st.WarmFallbacks)
	}
	for _, obj := range joiner.widgets.GetIndexer().List() {
		if u, ok := obj.(*unstructured.Unstructured); !ok || u.GetKind() != "Widget" {
			t.Fatalf("the joining member caches a %T %v, want unstructured Widgets", obj, obj)
		}
	}

	stop(ms[0])
	ms = ms[1:]
	informertest.Eventually(t, 60*time.Second, 50*time.Millisecond, "two members after a leave", func() string { return together(ms) })
}
