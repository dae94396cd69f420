// Package bench measures actorinformer's SharedIndexInformer against
// client-go's, side by side, on the same synthetic stream of pods.
//
// A Source is a ListerWatcher serving pre-built lists and watch events, so
// that neither informer pays for building objects while it is measured. A
// Scenario (InitialSync, Watch, SlowHandler, Relist) runs one informer through
// the cache.SharedIndexInformer interface with Counter handlers and returns
// its Metrics; Compare alternates runs of both informers in one process and
// reports medians and ratios. The benchmarks of this package and the program
// in bench/cmd/compare are thin drivers over these; docs/performance.md holds
// the figures.
//
// Sizes are small by default so that the CI smoke run stays short; Full
// gives the sizes of issue 5.
package bench
