//go:build actorinformer_notrace

package ctrlruntime_test

const tracingCompiled = false
