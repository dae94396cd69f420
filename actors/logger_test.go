package actors_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/actors"
)

// An informer given no logger logs where client-go's informer does, through
// klog: a dropped object is not lost silently.
// Real time: klog's output from a real informer.
func TestDefaultLogIsKlog(t *testing.T) {
	out := captureKlog(t)
	src, lw := newSource(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithName("pods-klog"), actors.WithWatchList(false))
	ctx, stop := running(t, inf)
	defer stop()
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "not-a-pod"}})
	eventually(t, 10*time.Second, "the dropped object in klog's output", func() string {
		s := out.String()
		if strings.Contains(s, "reflector dropped an object") && strings.Contains(s, "pods-klog") && strings.Contains(s, "wrong_type") {
			return ""
		}
		return "klog has: " + s
	})
}
