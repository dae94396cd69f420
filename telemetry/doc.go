// Package telemetry holds the tracing, metrics and logging state shared by the
// informer's stages (T), what their messages carry of it (DeltaTrace, Stamp)
// and the names of its spans, attributes, events and metrics: a contract, as
// docs/tracing.md documents it, that tools reading the traces may rely on.
// It never reads or sets OpenTelemetry globals: providers come from the
// informer's options and default to no-op.
//
// A delta is traced only when the tracer provider is not a no-op one and its
// sampler records the delta's root span; otherwise the delta carries a nil
// *DeltaTrace and every later stage skips all span work for it.
//
// Span names, attributes, events and metrics are listed in docs/tracing.md.
//
// # Compiling tracing out
//
// Built with the actorinformer_notrace tag (go build -tags
// actorinformer_notrace), [CompiledOut] is true: [T.Tracing] and
// [Metrics.Enabled] are constant false, so the compiler removes every span
// and OpenTelemetry metric code path guarded by them, and the providers given
// to the informer are ignored. The always-on [Counters] (the informer's
// Stats) and logging remain. The tag exists to measure what the tracing code
// costs when it is compiled in but unused (bench/tracing-cost.sh); a normal
// build with the default no-op providers is what users should run.
package telemetry
