package shard

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// atLog runs a function inside the handler of each log record.
type atLog struct {
	slog.Handler
	mu   sync.Mutex
	msgs []string
	do   func()
}

func (h *atLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *atLog) Handle(ctx context.Context, r slog.Record) error {
	h.do()
	var why string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			why = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, why)
	h.mu.Unlock()
	return nil
}

// A server that refuses shardSelector: the refusal is the logged reason.
// While it is being logged, the member's range informers still send the
// selector, so none of them can list without it, find other ranges'
// objects, and log that reason first (a race CI once lost).
func TestRefusalIsLoggedBeforeSelectorsStop(t *testing.T) {
	f := &filter{field: UID}
	var lw *rangeLW
	selectorAtLog := ""
	h := &atLog{Handler: slog.DiscardHandler, do: func() {
		selectorAtLog = lw.options(metav1.ListOptions{}).ShardSelector
	}}
	f.log = slog.New(h)
	lw = newRangeLW(&cache.ListWatch{
		ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if o.ShardSelector != "" {
				return nil, apierrors.NewBadRequest("unknown query parameter shardSelector")
			}
			return &corev1.ConfigMapList{}, nil
		},
	}, Range{Index: 0, Count: 2}, f)
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(h.msgs) != 1 || !strings.Contains(h.msgs[0], "rejects shardSelector") {
		t.Fatalf("logged %q, want one line saying the server rejects shardSelector", h.msgs)
	}
	if selectorAtLog == "" {
		t.Fatal("the selectors had stopped before the refusal was logged")
	}
	if lw.options(metav1.ListOptions{}).ShardSelector != "" {
		t.Fatal("a selector is still sent after the refusal")
	}
}

// A list judged once the refusal is known (sent before it was, or after
// it without a selector) leaves the mode and its reason as they are.
func TestJudgeAfterTheRefusal(t *testing.T) {
	h := &atLog{Handler: slog.DiscardHandler, do: func() {}}
	f := &filter{field: UID, log: slog.New(h)}
	lw := newRangeLW(&cache.ListWatch{}, Range{Index: 0, Count: 2}, f)
	f.reject.Store(true)
	lw.judge(&corev1.ConfigMapList{}, 3, 1)
	if len(h.msgs) != 0 {
		t.Fatalf("logged %q after the refusal, want nothing", h.msgs)
	}
}
