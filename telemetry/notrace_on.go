//go:build actorinformer_notrace

package telemetry

// CompiledOut is true when the library is built with the
// actorinformer_notrace tag: see the package documentation.
const CompiledOut = true
