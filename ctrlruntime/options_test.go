package ctrlruntime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/internal/usercheck"
)

// TestOptionsCompileOnlyWhereTheyTakeEffect: Informers and NewInformer name
// their informers after their kinds, so the informer-only options do not
// compile there; Tracing takes the only two things its queue uses.
func TestOptionsCompileOnlyWhereTheyTakeEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	src := func(misuse bool) string {
		s := `package zz

import (
	"log/slog"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
)

var (
	tp = sdktrace.NewTracerProvider()
	mp = sdkmetric.NewMeterProvider()
)

func ok() {
	_ = ctrlruntime.NewInformers(actors.WithTracerProvider(tp), actors.WithMeterProvider(mp), actors.WithLogger(slog.Default()), actors.WithActorSystem(nil))
	_ = ctrlruntime.NewInformer(actors.WithTracerProvider(tp), actors.WithTransform(nil))
	_ = ctrlruntime.NewTracing(tp, mp)
	_ = schema.GroupVersionResource{}
}
`
		if misuse {
			s += `
func misuse() {
	_ = ctrlruntime.NewInformers(actors.WithName("pods")) // want: actors.Option does not implement actors.SharedOption
	_ = ctrlruntime.NewInformer(actors.WithResource(schema.GroupVersionResource{})) // want: actors.Option does not implement actors.SharedOption
	_ = ctrlruntime.NewInformers(actors.WithNamespace("default")) // want: actors.FactoryOption does not implement actors.SharedOption
	_ = ctrlruntime.NewTracing(actors.WithTracerProvider(tp)) // want: not enough arguments
}
`
		}
		return s
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	usercheck.CheckCompileErrors(t, dir, "options_ok", src(false))
	if s := src(true); strings.Count(s, usercheck.Want) != 4 {
		t.Fatal("want 4 misuses")
	}
	usercheck.CheckCompileErrors(t, dir, "options_misuse", src(true))
}
