package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/shard"
)

// A member that cannot list its ranges says that the group's ranges are
// undelivered (Status and the gauge), and that none is once it delivers
// them.
func TestUndeliveredRanges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	src := &failingSource{memServer: newMemServer()}
	src.create("o1")
	src.fail.Store(true)
	r := newMember(t, test.NewInMemAgent(), src, shard.WithRanges(8), shard.WithInformerOptions(actors.WithMeterProvider(mp)))
	if u := r.inf.Status().Undelivered; u != nil {
		t.Errorf("Undelivered before Run: %v, want nil (not in the group)", u)
	}
	r.run()
	eventually(t, 30*time.Second, "every range undelivered while lists fail", func() string {
		if u := r.inf.Status().Undelivered; len(u) != 8 {
			return fmt.Sprintf("Undelivered %v, want the 8 ranges", u)
		}
		if v := gaugeSum(informertest.CollectMetrics(t, reader)["actorinformer.shard.group.undelivered"]); v != 8 {
			return fmt.Sprintf("actorinformer.shard.group.undelivered %d, want 8", v)
		}
		return ""
	})
	src.fail.Store(false)
	eventually(t, 60*time.Second, "no range undelivered once the member delivers them", func() string {
		if u := r.inf.Status().Undelivered; u == nil || len(u) != 0 {
			return fmt.Sprintf("Undelivered %v, want none", u)
		}
		m := informertest.CollectMetrics(t, reader)["actorinformer.shard.group.undelivered"]
		if len(pointAttrs(m)) != 1 || gaugeSum(m) != 0 {
			return fmt.Sprintf("actorinformer.shard.group.undelivered: %+v, want one point at 0", m.Data)
		}
		return ""
	})
}
