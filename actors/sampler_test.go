package actors_test

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

func info(typ cache.DeltaType, key, rv string, obj any) actors.DeltaInfo {
	return actors.DeltaInfo{Type: typ, Key: key, ResourceVersion: rv, Object: obj}
}

// TestSampleRatio: the fraction chosen over many deltas is close to the
// ratio; the decision depends only on the delta (same delta, same answer)
// and changes with its type, key and resource version.
func TestSampleRatio(t *testing.T) {
	const n = 200_000
	for _, r := range []float64{0.001, 0.01, 0.1, 0.5, 0.9} {
		s := actors.SampleRatio(r)
		chosen := 0
		for i := range n {
			// 1000 keys, 200 versions each, as a stream of updates does.
			if s.SampleDelta(info(cache.Updated, fmt.Sprintf("ns-%d/pod-%d", i%7, i%1000), fmt.Sprint(1000+i), nil)) {
				chosen++
			}
		}
		got := float64(chosen) / n
		// 5 standard deviations of a binomial draw: a hash that is not
		// uniform enough fails, a good one never does (it is deterministic).
		sd := 5 * math.Sqrt(r*(1-r)/n)
		if got < r-sd || got > r+sd {
			t.Errorf("SampleRatio(%v) chose %.5f of %d deltas, want %v ± %.5f", r, got, n, r, sd)
		}
	}
	for _, c := range []struct {
		r    float64
		want bool
	}{{0, false}, {-1, false}, {math.NaN(), false}, {1, true}, {2, true}, {math.Nextafter(1, 0), true}} {
		s := actors.SampleRatio(c.r)
		for i := range 1000 {
			if got := s.SampleDelta(info(cache.Added, fmt.Sprint("k", i), fmt.Sprint(i), nil)); got != c.want {
				t.Fatalf("SampleRatio(%v) chose %v, want %v", c.r, got, c.want)
			}
		}
	}
	// Same delta, same decision, from a sampler made separately.
	a, b := actors.SampleRatio(0.3), actors.SampleRatio(0.3)
	differs := map[string]int{}
	for i := range 10_000 {
		d := info(cache.Updated, fmt.Sprint("ns/p", i), "42", nil)
		x := a.SampleDelta(d)
		if b.SampleDelta(d) != x || a.SampleDelta(d) != x {
			t.Fatalf("%v: decision not stable", d)
		}
		for what, e := range map[string]actors.DeltaInfo{
			"type": info(cache.Sync, d.Key, d.ResourceVersion, nil),
			"rv":   info(d.Type, d.Key, "43", nil),
			"key":  info(d.Type, d.Key+"x", d.ResourceVersion, nil),
		} {
			if a.SampleDelta(e) != x {
				differs[what]++
			}
		}
	}
	for _, what := range []string{"type", "rv", "key"} {
		// Independent draws at 0.3 differ 42 % of the time.
		if differs[what] < 3000 {
			t.Errorf("changing the %s changed %d of 10000 decisions; the hash ignores it", what, differs[what])
		}
	}
}

// TestSampleKeys: the set decides; keys added and removed are followed.
func TestSampleKeys(t *testing.T) {
	k := actors.SampleKeys("ns/a", "b")
	check := func(want ...string) {
		t.Helper()
		var got []string
		for _, key := range []string{"ns/a", "b", "ns/c", "ns/b"} {
			if k.SampleDelta(info(cache.Updated, key, "1", nil)) {
				got = append(got, key)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("chosen %v, want %v", got, want)
		}
	}
	check("ns/a", "b")
	k.Add("ns/c")
	check("ns/a", "b", "ns/c")
	k.Remove("ns/a", "b", "nothing")
	check("ns/c")
	if got := k.Keys(); !slices.Equal(got, []string{"ns/c"}) {
		t.Fatalf("Keys() = %v", got)
	}
	k.Remove("ns/c")
	check()
	if got := k.Keys(); len(got) != 0 {
		t.Fatalf("Keys() = %v", got)
	}
	if actors.SampleKeys().SampleDelta(info(cache.Added, "", "", nil)) {
		t.Fatal("an empty key set chose a delta")
	}
}

// TestSampleKeysConcurrent: writers and readers at once (run with -race).
func TestSampleKeysConcurrent(t *testing.T) {
	k := actors.SampleKeys()
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				key := fmt.Sprintf("w%d/%d", w, i)
				k.Add(key)
				if i%2 == 0 {
					k.Remove(key)
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				k.SampleDelta(info(cache.Updated, fmt.Sprintf("w0/%d", i%500), "1", nil))
			}
		}()
	}
	wg.Wait()
	if got := len(k.Keys()); got != 500 {
		t.Fatalf("%d keys left, want 500 (the odd ones of both writers)", got)
	}
	for i := range 500 {
		if got, want := k.SampleDelta(info(cache.Updated, fmt.Sprintf("w1/%d", i), "1", nil)), i%2 == 1; got != want {
			t.Fatalf("w1/%d chosen %v, want %v", i, got, want)
		}
	}
}

// TestSampleObjects: the predicate gets the object, a tombstone's unwrapped.
func TestSampleObjects(t *testing.T) {
	var seen []any
	s := actors.SampleObjects(func(obj any) bool {
		seen = append(seen, obj)
		p, ok := obj.(*corev1.Pod)
		return ok && p.Labels["trace"] == "yes"
	})
	yes, no := pod("ns", "yes", 1), pod("ns", "no", 1)
	yes.Labels["trace"] = "yes"
	for _, c := range []struct {
		obj  any
		want bool
	}{
		{yes, true},
		{no, false},
		{cache.DeletedFinalStateUnknown{Key: "ns/yes", Obj: yes}, true},
		{cache.DeletedFinalStateUnknown{Key: "ns/no", Obj: no}, false},
		{cache.DeletedFinalStateUnknown{Key: "ns/gone"}, false},
	} {
		if got := s.SampleDelta(info(cache.Deleted, "k", "1", c.obj)); got != c.want {
			t.Errorf("%#v: chosen %v, want %v", c.obj, got, c.want)
		}
	}
	if want := []any{yes, no, yes, no}; !slices.Equal(seen, want) {
		t.Errorf("predicate saw %v, want %v (the tombstone without an object is not asked)", seen, want)
	}
}

// TestSampleAny: any yes wins; nil samplers are skipped; none chooses none.
func TestSampleAny(t *testing.T) {
	var asked []string
	named := func(name string, yes bool) actors.DeltaSampler {
		return actors.DeltaSamplerFunc(func(actors.DeltaInfo) bool { asked = append(asked, name); return yes })
	}
	d := info(cache.Added, "ns/a", "1", nil)
	if !actors.SampleAny(named("a", false), nil, named("b", true), named("c", true)).SampleDelta(d) {
		t.Fatal("SampleAny did not choose the delta one sampler chose")
	}
	if !slices.Equal(asked, []string{"a", "b"}) {
		t.Fatalf("asked %v, want [a b]: in order, stopping at the first yes", asked)
	}
	if actors.SampleAny(named("x", false), actors.SampleRatio(0)).SampleDelta(d) {
		t.Fatal("SampleAny chose a delta no sampler chose")
	}
	if actors.SampleAny().SampleDelta(d) || actors.SampleAny(nil).SampleDelta(d) {
		t.Fatal("SampleAny without samplers chose a delta")
	}
	if !actors.SampleAny(actors.SampleKeys("ns/a"), actors.SampleRatio(0)).SampleDelta(d) {
		t.Fatal("SampleAny(keys, ratio 0) did not choose a followed key")
	}
}

// BenchmarkDeltaSampler measures the decision for a delta that is not
// chosen, the hot-path cost the samplers add per delta.
func BenchmarkDeltaSampler(b *testing.B) {
	d := info(cache.Updated, "default/pod-000123", "123456789", pod("default", "pod-000123", 1))
	keys := actors.SampleKeys("default/pod-000001", "default/pod-000002")
	for _, c := range []struct {
		name string
		s    actors.DeltaSampler
	}{
		{"Ratio0.01", actors.SampleRatio(0.01)},
		{"Ratio0", actors.SampleRatio(0)},
		{"Keys", keys},
		{"KeysEmpty", actors.SampleKeys()},
		{"Objects", actors.SampleObjects(func(obj any) bool { return obj.(*corev1.Pod).Labels["trace"] == "yes" })},
		{"AnyKeysRatio0.01", actors.SampleAny(keys, actors.SampleRatio(0.01))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			chosen := 0
			for i := 0; b.Loop(); i++ {
				if c.s.SampleDelta(d) {
					chosen++
				}
			}
			if chosen != 0 {
				b.Fatalf("the benchmark's delta was chosen %d times", chosen)
			}
		})
	}
}
