//go:build tools

// Package jaegerbin pins the Jaeger (v2, OpenTelemetry-collector based)
// all-in-one binary that the actorinformer tracing tests send spans to. It is
// its own module so that the library's go.mod never sees Jaeger's
// dependencies.
//
// Build with ../build-binaries.sh jaeger.
package jaegerbin

import (
	_ "github.com/jaegertracing/jaeger/cmd/jaeger"
)
