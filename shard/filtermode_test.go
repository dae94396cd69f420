package shard_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// runLW runs one member on any source, until the returned stop.
func runLW(t *testing.T, lw cache.ListerWatcher, example runtime.Object, opts ...shard.Option) (*shard.Informer, func()) {
	t.Helper()
	c, prov := startCluster(newGroup(t, nil).agent)
	opts = append(append(testLeases(), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler)))), opts...)
	inf, err := shard.New(c, "configmaps", lw, example, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return inf, runUntilStop(t, inf, c, prov)
}

// The filter mode is known from the first list, empty or not: a server
// that applied the selector says so in the list's shardInfo; one that
// ignored it sends none.
func TestFilterModeFromAnEmptyList(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter bool
		want   shard.FilterMode
	}{
		{"server applies selectors", true, shard.FilterServer},
		{"server ignores selectors", false, shard.FilterClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newMemServer()
			src.filter = tc.filter
			inf, stop := runLW(t, src, &corev1.ConfigMap{}, shard.WithRanges(4))
			defer stop()
			if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
				t.Fatal("not synced")
			}
			if st := inf.Status(); st.Mode != tc.want {
				t.Fatalf("mode %s after every range's list answered (empty), want %s", st.Mode, tc.want)
			}
		})
	}
}

// With WatchList (client-go v0.37's default), the ranges' lists are
// streams, which say nothing of the selector: one list of one object does.
func TestFilterModeWithWatchList(t *testing.T) {
	for _, tc := range []struct {
		name    string
		filter  bool
		objects int
		want    shard.FilterMode
	}{
		{"server applies selectors, empty", true, 0, shard.FilterServer},
		{"server ignores selectors, empty", false, 0, shard.FilterClient},
		{"server applies selectors", true, 30, shard.FilterServer},
		{"server ignores selectors", false, 30, shard.FilterClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newMemServer()
			src.filter = tc.filter
			src.watchList = true
			for i := range tc.objects {
				src.create(fmt.Sprintf("o%d", i))
			}
			inf, stop := runLW(t, src, &corev1.ConfigMap{}, shard.WithRanges(4),
				shard.WithInformerOptions(actors.WithWatchList(true)))
			defer stop()
			if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
				t.Fatal("not synced")
			}
			if st := inf.Status(); st.Mode != tc.want {
				t.Fatalf("mode %s, want %s", st.Mode, tc.want)
			}
			if n := len(inf.GetIndexer().ListKeys()); n != tc.objects {
				t.Fatalf("%d cached, want %d", n, tc.objects)
			}
		})
	}
}

// A dynamic client's lists are unstructured: their metadata.shardInfo
// tells too.
func TestFilterModeFromAnUnstructuredList(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter bool
		want   shard.FilterMode
	}{
		{"server applies selectors", true, shard.FilterServer},
		{"server ignores selectors", false, shard.FilterClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newMemServer()
			src.filter = tc.filter
			inf, stop := runLW(t, unstructuredLW{src}, &unstructured.Unstructured{}, shard.WithRanges(4))
			defer stop()
			if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
				t.Fatal("not synced")
			}
			if st := inf.Status(); st.Mode != tc.want {
				t.Fatalf("mode %s, want %s", st.Mode, tc.want)
			}
		})
	}
}

// unstructuredLW serves a memServer's ConfigMaps as a dynamic client
// would: unstructured lists and objects.
type unstructuredLW struct{ s *memServer }

func (lw unstructuredLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	list, err := lw.s.List(opts)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(list)
	if err != nil {
		return nil, err
	}
	out := &unstructured.UnstructuredList{}
	out.SetUnstructuredContent(m)
	return out, nil
}

func (lw unstructuredLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.s.Watch(opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e.Object)
		if err != nil {
			return e, false
		}
		e.Object = &unstructured.Unstructured{Object: m}
		return e, true
	}), nil
}

func (lw unstructuredLW) IsWatchListSemanticsUnSupported() bool { return true }

// Status encodes the filter mode as its name, and decodes it back.
func TestFilterModeJSON(t *testing.T) {
	for _, m := range []shard.FilterMode{shard.FilterPending, shard.FilterServer, shard.FilterClient} {
		b, err := json.Marshal(shard.Status{Mode: m})
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Mode string }
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Mode != m.String() {
			t.Errorf("%s encodes as %s", m, b)
		}
		var back shard.Status
		if err := json.Unmarshal(b, &back); err != nil || back.Mode != m {
			t.Errorf("%s decodes as %s (%v)", b, back.Mode, err)
		}
	}
	var st shard.Status
	err := json.Unmarshal([]byte(`{"Mode":"sideways"}`), &st)
	if err == nil {
		t.Fatal("an unknown mode decodes without error")
	}
	if _, err := json.Marshal(shard.Status{Mode: shard.FilterMode(7)}); err == nil {
		t.Fatal("an unknown mode encodes without error")
	}
}
