package shard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/telemetry"
)

// panicOn panics on the add of one object and counts the others.
type panicOn struct{ name string }

func (p panicOn) OnAdd(obj any, _ bool) {
	if obj.(*corev1.ConfigMap).Name == p.name {
		panic("panicOn: " + p.name)
	}
}
func (panicOn) OnUpdate(_, _ any) {}
func (panicOn) OnDelete(any)      {}

// Stats sums the range informers' counters, keeps them once the ranges
// stop, and counts each handler's calls on every range; the handover spans
// name the group and the member.
func TestStatsAndHandoverSpans(t *testing.T) {
	src := newMemServer()
	for i := range 60 {
		src.create(fmt.Sprintf("o%d", i))
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	inf, stop := runOne(t, src, nil, shard.WithRanges(4), shard.WithInformerOptions(actors.WithTracerProvider(tp)))
	if _, err := inf.AddEventHandler(actors.NamedHandler("first", cache.ResourceEventHandlerFuncs{})); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(actors.NamedHandler("panicky", panicOn{"o7"})); err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		t.Fatal("not synced")
	}
	var st actors.Stats
	eventually(t, 10*time.Second, "every object handled", func() string {
		st = inf.Stats()
		if len(st.Handlers) != 2 || st.Handlers[0].Delivered != 60 || st.Handlers[1].Delivered != 60 {
			return fmt.Sprintf("handlers %+v", st.Handlers)
		}
		return ""
	})
	if st.Handlers[0].Name != "first" || st.Handlers[1].Name != "panicky" || st.Handlers[0].Panics != 0 || st.Handlers[1].Panics != 1 {
		t.Errorf("handlers %+v; want first with no panic, then panicky with 1", st.Handlers)
	}
	// Each range's informer gets only its range's objects (the member
	// filters): 60 in all.
	if st.CacheSize != 60 || st.ReflectorEvents != 60 || st.IndexerEvents < 60 {
		t.Errorf("cache %d, reflector %d, indexer %d; want 60 each", st.CacheSize, st.ReflectorEvents, st.IndexerEvents)
	}
	member := inf.Member()
	stop()
	after := inf.Stats()
	if after.ReflectorEvents < st.ReflectorEvents || after.IndexerEvents < st.IndexerEvents || after.CacheSize != 0 {
		t.Errorf("after the ranges stopped: reflector %d (was %d), indexer %d (was %d), cache %d; want the counters kept, no cache",
			after.ReflectorEvents, st.ReflectorEvents, after.IndexerEvents, st.IndexerEvents, after.CacheSize)
	}

	if telemetry.CompiledOut {
		return // the range informers make no span; the handover spans are the shard's own
	}
	kinds := map[string]int{}
	for _, s := range rec.Ended() {
		if s.Name() != "shard.acquire" && s.Name() != "shard.release" {
			continue
		}
		kinds[s.Name()]++
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs[string(shard.AttrGroup)] != "configmaps" || attrs[string(shard.AttrMember)] != member || attrs[string(shard.AttrRange)] == "" {
			t.Errorf("%s span attributes %v; want group configmaps, member %s and a range", s.Name(), attrs, member)
		}
	}
	if kinds["shard.acquire"] != 4 || kinds["shard.release"] != 4 {
		t.Errorf("handover spans %v; want 4 acquires and 4 releases", kinds)
	}
}
