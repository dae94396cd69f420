package fidelity

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

// TestMain checks, as client-go's own TestMain does for these tests, that no
// goroutine outlives the package's tests (TestShutdown relies on it).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
