package shard_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// Member is known from New (the in-memory provider lists a member as soon
// as it started), stays the same once Run has joined, and carries the
// member's name: WithMemberName's, made to fit, or the host's.
func TestMemberKnownFromNewWithItsName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []shard.Option
		want string
	}{
		{[]shard.Option{shard.WithMemberName("pod a#1")}, "#pod-a-1-"},
		{nil, "#" + host + "-"},
	} {
		c, prov := startCluster(test.NewInMemAgent())
		opts := append(append(testLeases(), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler)))), tc.opts...)
		inf, err := shard.New(c, "configmaps", newMemServer(), &corev1.ConfigMap{}, opts...)
		if err != nil {
			stopCluster(c, prov)
			t.Fatal(err)
		}
		id := inf.Member()
		if !strings.HasPrefix(id, c.ActorSystem.ID+tc.want) || inf.Status().Member != id {
			t.Errorf("Member after New: %q (status %q); want %s%s…", id, inf.Status().Member, c.ActorSystem.ID, tc.want)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
			t.Error("not synced")
		}
		if got := inf.Member(); got != id {
			t.Errorf("Member once joined: %q, after New %q", got, id)
		}
		if view := inf.Status().View; len(view) != 1 || view[0] != id {
			t.Errorf("view %v, want [%s]", view, id)
		}
		cancel()
		<-done
		stopCluster(c, prov)
	}
}
