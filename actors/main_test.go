package actors_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
