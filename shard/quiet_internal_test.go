package shard

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A list's logger drops the errors client-go logs once the list is
// cancelled (its range moved away), and keeps the others, attributed to
// their caller.
func TestQuietOnCancel(t *testing.T) {
	state := klog.CaptureState()
	defer state.Restore()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	var buf lockedBuffer
	klog.SetOutput(&buf)

	ctx, cancel := context.WithCancel(context.Background())
	logger := klog.FromContext(quietOnCancel(ctx))
	logger.Error(errors.New("boom"), "before the cancel")
	cancel()
	logger.Error(context.Canceled, "Unexpected error when reading response body")
	logger.WithValues("k", "v").Error(context.Canceled, "after the cancel, with values")
	klog.Flush()
	out := buf.String()
	if !strings.Contains(out, `quiet_internal_test.go:`) || !strings.Contains(out, `"before the cancel"`) {
		t.Errorf("the error before the cancel is missing or not attributed to its caller:\n%s", out)
	}
	if strings.Contains(out, "after the cancel") || strings.Contains(out, "reading response body") {
		t.Errorf("errors logged after the cancel:\n%s", out)
	}
}
