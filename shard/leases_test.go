package shard_test

import (
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// testLeases keeps a group's leases in a fake clientset of its own, with
// the API server's resourceVersion checks, and short lease timings.
func testLeases() []shard.Option {
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	return []shard.Option{shard.WithLeases(cs.CoordinationV1(), "default"),
		shard.WithLeaseTimings(2*time.Second, 1500*time.Millisecond, 300*time.Millisecond)}
}

// defaultLeaseTimings replaces testLeases' timings with the defaults (5 s,
// 3 s, 1 s): for a test that a member fenced on a loaded machine (starved
// past testLeases' 1.5 s renew deadline) would fail.
func defaultLeaseTimings() shard.Option {
	return shard.WithLeaseTimings(shard.DefaultLeaseDuration, shard.DefaultRenewDeadline, shard.DefaultRetryPeriod)
}
