// Package fidelity holds no code: its tests are client-go v0.37.2's own
// black-box informer tests (tools/cache/shared_informer_test.go and
// tools/cache/controller_test.go), ported so that each one runs, with only
// the constructor swapped, on client-go's informer and on ours
// (actors.NewSharedIndexInformer).
//
// A ported test that fails on ours calls knownDifference in its
// "actorinformer" subtest: the subtest is skipped unless the environment
// variable ACTORINFORMER_FIDELITY_STRICT is set (non-empty), in which case it
// runs and fails until the difference is fixed:
//
//	ACTORINFORMER_FIDELITY_STRICT=1 go test -race ./internal/fidelity/
package fidelity
