package workqueue

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

// client-go's queues start goroutines (the delaying queue's waiting loop,
// the metrics' unfinished-work loop) that end when they are shut down.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
