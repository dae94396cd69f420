package usercheck

import (
	"strings"
	"testing"
)

// optionsSource uses every option where it takes effect and, with misuse,
// also where it would do nothing: those calls must not compile.
func optionsSource(misuse bool) string {
	src := `package zz

import (
	"log/slog"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/actorinformer/actorinformer/actors"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

var (
	tp = sdktrace.NewTracerProvider()
	mp = sdkmetric.NewMeterProvider()
	lw = &cache.ListWatch{}
	gvr = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

func informerOptions() {
	_ = actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil,
		actors.WithTracerProvider(tp), actors.WithMeterProvider(mp), actors.WithLogger(slog.Default()),
		actors.WithName("pods"), actors.WithResource(gvr), actors.WithTransform(nil),
		actors.WithWatchList(false), actors.WithPageSize(10), actors.WithMaxBatch(10))
	_ = actors.NewTyped[*corev1.Pod](lw, cache.SharedIndexInformerOptions{}, actors.WithName("pods"))
}

func factoryOptions() {
	_ = actors.NewFactory(fake.NewClientset(), 0,
		actors.WithTracerProvider(tp), actors.WithMeterProvider(mp), actors.WithTransform(nil),
		actors.WithNamespace("default"), actors.WithTweakListOptions(func(*metav1.ListOptions) {}),
		actors.WithDynamicClient(nil))
}

func queues() {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	_ = aiworkqueue.New(q, tp)
	_ = aiworkqueue.NewRateLimitingQueue("pods", workqueue.DefaultTypedControllerRateLimiter[string](), tp, mp)
}
`
	if misuse {
		src += `
func misuse() {
	_ = actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithNamespace("default")) // want: actors.FactoryOption does not implement actors.Option
	_ = actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithTweakListOptions(nil)) // want: actors.FactoryOption does not implement actors.Option
	_ = actors.NewTyped[*corev1.Pod](lw, cache.SharedIndexInformerOptions{}, actors.WithDynamicClient(nil)) // want: actors.FactoryOption does not implement actors.Option
	_ = actors.NewFactory(fake.NewClientset(), 0, actors.WithName("pods")) // want: actors.Option does not implement actors.FactoryOption
	_ = actors.NewFactory(fake.NewClientset(), 0, actors.WithResource(gvr)) // want: actors.Option does not implement actors.FactoryOption
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	_ = aiworkqueue.New(q, actors.WithMeterProvider(mp)) // want: does not implement "go.opentelemetry.io/otel/trace".TracerProvider
	_ = aiworkqueue.NewRateLimitingQueue("pods", workqueue.DefaultTypedControllerRateLimiter[string](), actors.WithTracerProvider(tp)) // want: not enough arguments
}
`
	}
	return src
}

// TestOptionsCompileOnlyWhereTheyTakeEffect: an option passed where it
// would do nothing (a factory's namespace to a single informer, the
// informer's name to a factory, a meter provider to a queue wrapped as
// built) does not compile; the same options where they work do.
func TestOptionsCompileOnlyWhereTheyTakeEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	root := RepoRoot(t)
	CheckCompileErrors(t, root, "options_ok", optionsSource(false))
	src := optionsSource(true)
	if strings.Count(src, Want) != 7 {
		t.Fatalf("%d misuses, want 7", strings.Count(src, Want))
	}
	CheckCompileErrors(t, root, "options_misuse", src)
}
