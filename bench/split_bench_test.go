package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// BenchmarkSplitStages asks whether the same events cost more through many
// informers than through one, in one process: the pods are split by index
// over 1, 6 or 16 of our informers (a shard member runs one per range it
// owns: 5 or 6 of 16 at 3 members, 16 in all), each with its own synthetic
// source, a handler each. Every run lists the pods, then takes the updates
// paced at one rate in all (split evenly over the sources); the CPU of the
// list (from the start to every informer synced) and of the updates (until
// every handler had its share) is reported per split, as a median over the
// runs (-benchtime Nx: N runs of each split, alternated), and against one
// informer's. No network, no decoding, no cluster: only the stages.
//
//	go test ./bench -run '^$' -bench SplitStages -benchtime 5x -args -bench.full
func BenchmarkSplitStages(b *testing.B) {
	pods, updates, rate := 2000, 500, 2000.0
	if *fullFlag {
		pods, updates, rate = 20000, 5000, 1000
	}
	splits := []int{1, 6, 16}
	list := map[int][]time.Duration{}
	upd := map[int][]time.Duration{}
	for run := range b.N {
		for i := range splits {
			n := splits[(i+run)%len(splits)]
			l, u, err := splitRun(n, pods, updates, rate)
			if err != nil {
				b.Fatal(err)
			}
			list[n] = append(list[n], l)
			upd[n] = append(upd[n], u)
		}
	}
	med := func(d []time.Duration) float64 {
		m, _ := medMax(d)
		return float64(m) / float64(time.Millisecond)
	}
	for _, n := range splits {
		b.ReportMetric(med(list[n]), fmt.Sprintf("list-cpu-ms:%d", n))
		b.ReportMetric(med(upd[n]), fmt.Sprintf("updates-cpu-ms:%d", n))
		if n != 1 {
			b.ReportMetric(med(list[n])/med(list[1]), fmt.Sprintf("list-ratio:%d", n))
			b.ReportMetric(med(upd[n])/med(upd[1]), fmt.Sprintf("updates-ratio:%d", n))
		}
	}
}

// splitRun runs one split: n informers over pods split by index, then the
// updates at rate a second in all. It returns the CPU of the list and of
// the updates.
func splitRun(n, pods, updates int, rate float64) (list, upd time.Duration, err error) {
	p := NewPods(pods)
	all := p.Modified(updates, uint64(pods))
	full := p.List(pods)
	srcs := make([]*Source, n)
	total := 0
	for k := range srcs {
		l := *full
		l.Items = nil
		for i := range full.Items {
			if i%n == k {
				l.Items = append(l.Items, full.Items[i])
			}
		}
		var evs []watch.Event
		for j := range all {
			if (j%pods)%n == k {
				evs = append(evs, all[j])
			}
		}
		total += len(evs)
		s := &Source{Lists: []*corev1.PodList{&l}, Watches: [][]watch.Event{evs}}
		s.Pace(time.Duration(float64(time.Second) * float64(n) / rate))
		s.Gate()
		srcs[k] = s
	}
	var got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	sys := actors.NewActorSystem()
	infs := make([]*actors.SharedIndexInformer, n)
	done := make(chan struct{}, n)
	c0 := cpuTime()
	for k, s := range srcs {
		inf := actors.NewSharedIndexInformer(s, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, actors.WithActorSystem(sys))
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, _ any) { got.Add(1) },
		}); err != nil {
			cancel()
			return 0, 0, err
		}
		infs[k] = inf
		go func() {
			inf.RunWithContext(ctx)
			done <- struct{}{}
		}()
	}
	defer func() {
		cancel()
		for range infs {
			<-done
		}
		for _, s := range srcs {
			s.Wait()
		}
		sys.Shutdown()
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for _, inf := range infs {
		for !inf.HasSynced() {
			if time.Now().After(deadline) {
				return 0, 0, fmt.Errorf("%d informers: not synced in 5 minutes", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	c1 := cpuTime()
	for _, s := range srcs {
		s.Release()
	}
	for got.Load() < int64(total) {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%d informers: %d of %d updates in 5 minutes", n, got.Load(), total)
		}
		time.Sleep(time.Millisecond)
	}
	return c1 - c0, cpuTime() - c1, nil
}
