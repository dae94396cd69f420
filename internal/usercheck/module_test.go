package usercheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// consumerMain uses both modules as a controller author would: an informer
// over client-go's fake clientset, the traced workqueue, and ctrlruntime's
// informers and tracing (built, not run: they need a cluster).
const consumerMain = `package main

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/ctrlruntime"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

func main() {
	tp := sdktrace.NewTracerProvider()
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}})
	f := actors.NewFactory(client, 0, actors.WithTracerProvider(tp))
	pods := actors.Pods(f)
	queue := aiworkqueue.NewRateLimitingQueue("pods", workqueue.DefaultTypedControllerRateLimiter[string](), tp, nil)
	defer queue.ShutDown()
	_, _ = pods.AddContextEventHandler(actors.ContextEventHandlerFuncs{
		AddFunc: func(ctx context.Context, obj any, _ bool) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				queue.AddCtx(ctx, key)
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	if err := f.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
		panic(err)
	}
	_, key, _ := queue.GetCtx()
	queue.Done(key)
	cancel()
	f.Shutdown()

	informers := ctrlruntime.NewInformers(actors.WithTracerProvider(tp))
	_ = ctrl.Options{NewCache: informers.NewCache}
	_ = ctrlruntime.NewTracing(tp, nil)
	fmt.Println("reconciled", key)
}
`

// TestCtrlruntimeModuleFromOutside consumes the ctrlruntime module from a
// module outside the repository, with the exact go.mod lines of
// docs/integration.md ("Consuming the ctrlruntime module"): a temporary
// folder holds the consumer's module and, beside it, a link to this
// checkout named as the lines expect; go mod tidy, then the program is
// built and run, as a user would. go mod tidy also resolves the modules of
// the tests of the consumer's dependencies: the first run may fetch a few
// through the module proxy (GOPROXY as set, as for the rest of the build).
func TestCtrlruntimeModuleFromOutside(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command on a scratch module")
	}
	root := RepoRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "docs", "integration.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := ParseBlocks("docs/integration.md", string(text))
	var lines []string
	for _, b := range blocks {
		if strings.Contains(b.Skip, "TestCtrlruntimeModuleFromOutside") {
			lines = append(lines, b.Text)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("docs/integration.md has %d blocks marked as built by this test, want 1", len(lines))
	}
	if !strings.Contains(lines[0], "=> ../actorinformer") {
		t.Fatalf("the go.mod lines do not replace the modules with ../actorinformer:\n%s", lines[0])
	}

	tmp := t.TempDir()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(tmp, "actorinformer")); err != nil {
		t.Fatal(err)
	}
	consumer := filepath.Join(tmp, "consumer")
	if err := os.Mkdir(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	goMod := "module example.com/consumer\n\ngo 1.26.0\n\n" + lines[0] + "\n"
	for name, content := range map[string]string{
		"go.mod":  goMod,
		"main.go": consumerMain,
	} {
		if err := os.WriteFile(filepath.Join(consumer, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", "consumer", "."}} {
		if out, err := GoCommand(t, consumer, nil, args...); err != nil {
			t.Fatalf("go %s in the consumer module:\n%s\ngo.mod:\n%s", strings.Join(args, " "), out, goMod)
		}
	}
	out, err := exec.Command(filepath.Join(consumer, "consumer")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "reconciled default/web" {
		t.Fatalf("the consumer's program: %v\n%s", err, out)
	}
	tidied, _ := os.ReadFile(filepath.Join(consumer, "go.mod"))
	t.Logf("the consumer's go.mod after go mod tidy:\n%s", tidied)
}
