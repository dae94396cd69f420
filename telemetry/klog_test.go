package telemetry

import (
	"bytes"
	"flag"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// KlogLogger's With attributes and groups reach klog's output, with the
// caller's file and line (klog's own slog handler drops them).
func TestKlogLoggerKeepsWithAttributes(t *testing.T) {
	state := klog.CaptureState()
	defer state.Restore()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	var buf syncBuffer
	klog.SetOutput(&buf)
	log := KlogLogger().With("group", "g").With("member", "m#1")
	log.Info("joined", "ranges", 4)
	log.WithGroup("range").With("index", 2).Warn("acquired", "took", "5ms")
	KlogLogger().Info("plain", "k", "v")
	klog.Flush()
	out := buf.String()
	for _, want := range []string{
		`klog_test.go:`, `"joined" group="g" member="m#1" ranges=4`,
		`"acquired" group="g" member="m#1" range={"index":2,"took":"5ms"}`,
		`"plain" k="v"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("klog's output has no %s:\n%s", want, out)
		}
	}
}
