//go:build !actorinformer_notrace

package ctrlruntime_test

// tracingCompiled is false in the build with tracing compiled out, where no
// span is recorded.
const tracingCompiled = true
