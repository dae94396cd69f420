package ctrlruntime_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// A sharded informer's checks are controller-runtime healthz.Checkers: a
// manager's /readyz and /healthz (healthz.Handler) serve them, failing
// with the reason until the member delivers its ranges.
func TestShardHealthChecksInHealthz(t *testing.T) {
	client := fake.NewClientset()
	shardtest.InstallLeases(client)
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm%d", i), UID: uuid.NewUUID()}}
		if _, err := client.CoreV1().ConfigMaps("default").Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().ConfigMaps("default").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().ConfigMaps("default").Watch(ctx, o)
		},
	}
	provider := test.NewTestProvider(test.NewInMemAgent())
	c := cluster.New(actors.NewActorSystem(actors.SystemLogger(slog.New(slog.DiscardHandler))),
		cluster.Configure("healthz", provider, disthash.New(), remote.Configure("127.0.0.1", 0)))
	c.StartMember()
	defer func() {
		_ = provider.Shutdown(true)
		c.Shutdown(false)
	}()
	inf, err := shard.New(c, "configmaps", lw, &corev1.ConfigMap{}, shard.WithRanges(4),
		shard.WithLeases(client.CoordinationV1(), "default"),
		shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))
	if err != nil {
		t.Fatal(err)
	}
	// What mgr.AddHealthzCheck and mgr.AddReadyzCheck take.
	var live, ready healthz.Checker = inf.CheckLive, inf.CheckSynced
	readyz := &healthz.Handler{Checks: map[string]healthz.Checker{"shard": ready}}
	livez := &healthz.Handler{Checks: map[string]healthz.Checker{"shard": live}}
	get := func(h http.Handler) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?verbose=1", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(readyz); code != http.StatusInternalServerError || !strings.Contains(body, "[-]shard failed") {
		t.Errorf("readyz before Run: %d %q, want 500 with the shard check failed", code, body)
	}
	if code, body := get(livez); code != http.StatusOK || !strings.Contains(body, "[+]shard ok") {
		t.Errorf("healthz before Run: %d %q, want 200", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(readyz)
		if code == http.StatusOK && strings.Contains(body, "[+]shard ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz not ok within 30s: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(inf.GetIndexer().ListKeys()); n != 20 {
		t.Errorf("ready with %d of 20 ConfigMaps cached", n)
	}
}
