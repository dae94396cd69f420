package actors

import (
	"strconv"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/internal/telemetry"
)

// BenchmarkListenerDeliver measures a listener's plain core delivering a
// batch of 256 updates to a counting handler, with the default (no-op)
// telemetry; one op is one notification. Run under both builds (with and
// without -tags actorinformer_notrace) it shows what the tracing and
// metrics checks cost this stage when nothing is recorded.
func BenchmarkListenerDeliver(b *testing.B) {
	const batch = 256
	var n atomic.Int64
	h := plainHandler{h: cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if _, ok := obj.(*corev1.Pod); ok {
			n.Add(1)
		}
	}}}
	var halted atomic.Bool
	l := newListener(1, h, "count", 0, telemetry.Nop(), &halted)
	items := make([]indexer.Notification, batch)
	for i := range items {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p" + strconv.Itoa(i), ResourceVersion: "2"}}
		items[i] = indexer.Notification{Type: indexer.NotifyUpdate, Old: p, New: p}
	}
	notes := &indexer.Notifications{Items: items}
	b.ReportAllocs()
	for i := 0; i < b.N; i += batch {
		l.backlog.N.Add(batch)
		l.deliver(notes)
	}
	if n.Load() == 0 {
		b.Fatal("handler not called")
	}
}
