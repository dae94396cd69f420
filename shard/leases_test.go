package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// testLeases keeps a group's leases in a fake clientset of its own, with
// the API server's resourceVersion checks, and short lease timings.
func testLeases() []shard.Option {
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	return leasesOn(cs)
}

// leasesOn are testLeases' options, on the leases of cs.
func leasesOn(cs *fake.Clientset) []shard.Option {
	return []shard.Option{shard.WithLeases(cs.CoordinationV1(), "default"),
		shard.WithLeaseTimings(2*time.Second, 1500*time.Millisecond, 300*time.Millisecond)}
}

// defaultLeaseTimings replaces testLeases' timings with the defaults (5 s,
// 3 s, 1 s): for a test that a member fenced on a loaded machine (starved
// past testLeases' 1.5 s renew deadline) would fail.
func defaultLeaseTimings() shard.Option {
	return shard.WithLeaseTimings(shard.DefaultLeaseDuration, shard.DefaultRenewDeadline, shard.DefaultRetryPeriod)
}

// A group's leases are labelled with its name, which New checks is a label
// value: the longest name that is one selects them, one longer is refused.
func TestLeasesSelectableByGroupName(t *testing.T) {
	c, prov := startCluster(test.NewInMemAgent())
	defer stopCluster(c, prov)
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	opts := []shard.Option{shard.WithLeases(cs.CoordinationV1(), "default"), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler)))}
	if _, err := shard.New(c, strings.Repeat("g", 64), newMemServer(), &corev1.ConfigMap{}, opts...); err == nil || !strings.Contains(err.Error(), "not a label value") {
		t.Fatalf("New with a 64-character group name: %v; want it refused as no label value", err)
	}
	group := strings.Repeat("g", 63)
	inf, err := shard.New(c, group, newMemServer(), &corev1.ConfigMap{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, 30*time.Second, "the member's lease, selected by the group's name", func() string {
		l, err := cs.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: shard.LabelGroup + "=" + group})
		if err != nil {
			return err.Error()
		}
		for _, lease := range l.Items {
			if lease.Annotations[shard.AnnotationMember] == inf.Member() {
				return ""
			}
		}
		return fmt.Sprintf("%d leases selected, none of member %s", len(l.Items), inf.Member())
	})
}
