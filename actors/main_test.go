package actors_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(mutationChildEnv); mode != "" {
		// A child process of TestCacheMutationDetector.
		os.Exit(mutationChild(mode))
	}
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
