//go:build !race

package main

import (
	"context"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/internal/testcluster"
)

var (
	scaleReplicas = flag.String("scale.replicas", "", "TestScale: the replica counts to measure, comma-separated (e.g. 1,2,3,6); empty: the test skips")
	scaleBundles  = flag.Int("scale.bundles", 20000, "TestScale: Bundles (each with its ConfigMap), in namespaces of 100")
	scaleWait     = flag.Duration("scale.wait", 20*time.Minute, "TestScale: how long N replicas may take to reconcile every Bundle")
)

// TestScale measures the example with N replicas (local processes, the
// etcd provider, -v=2) on Bundles that all have their ConfigMap already:
// from the replicas' start, the time until every Bundle was reconciled,
// the reconciles per second from the first reconcile's start to the last
// one's end, and per member its CPU (process_cpu_seconds_total) and heap
// in use (go_memstats_heap_inuse_bytes) from its /metrics then. A
// measurement, not run by hack/test.sh:
//
//	go test -run TestScale -v -timeout 30m . -args -scale.replicas 1,2,3,6 -scale.wait 5m
func TestScale(t *testing.T) {
	if *scaleReplicas == "" {
		t.Skip("a measurement: -scale.replicas 1,2,3,6 runs it")
	}
	ns := (*scaleBundles + 99) / 100
	// The API server's watch cache on, as in a cluster: without it (the
	// other tests' setting) a WatchList stream never ends its initial
	// events, and each range informer lists only after its 10 s wait.
	p := startPodsOn(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true", WatchCache: true}, 0, 0)
	ctx := context.Background()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range ns {
		name := fmt.Sprintf("team-%d-apps", i)
		if err := p.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		for j := range min(100, *scaleBundles-100*i) {
			p.keys = append(p.keys, fmt.Sprintf("%s/b%d", name, j))
			g.Go(func() error {
				b := &Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: fmt.Sprintf("b%d", j)},
					Spec: BundleSpec{Data: map[string]string{"v": "0"}}}
				if err := p.cl.Create(gctx, b); err != nil {
					return err
				}
				yes := true
				return p.cl.Create(gctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: b.Name,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: GroupVersion.String(), Kind: "Bundle", Name: b.Name, UID: b.UID,
						Controller: &yes, BlockOwnerDeletion: &yes}}}, Data: b.Spec.Data})
			})
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Bundles and their ConfigMaps in %d namespaces, made in %v", len(p.keys), ns, time.Since(start).Round(time.Second))

	t.Logf("| replicas | all reconciled after | reconciles | reconciles/s | CPU s per member (mean, max) | heap in use per member, MiB (mean, max) |")
	for _, f := range strings.Split(*scaleReplicas, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		var rs []*replica
		started := time.Now()
		for i := range n {
			rs = append(rs, p.startLocal(fmt.Sprintf("scale-%d-%d", n, i), "127.0.0.1", "--ranges=24", "--workers=8"))
		}
		p.eventually(*scaleWait, fmt.Sprintf("%d replicas: every Bundle reconciled", n), func() string { return p.reconciledBy(rs...) })
		took := time.Since(started)
		var cpu, heap []float64
		for _, r := range rs {
			m := body(t, r.metrics, "/metrics")
			cpu = append(cpu, metricValue(t, m, "process_cpu_seconds_total"))
			heap = append(heap, metricValue(t, m, "go_memstats_heap_inuse_bytes")/(1<<20))
		}
		count, first, last := reconcileSpan(rs...)
		t.Logf("| %d | %v | %d | %.0f | %.1f, %.1f | %.0f, %.0f |", n, took.Round(100*time.Millisecond), count,
			float64(count)/time.Duration(last-first).Seconds(), mean(cpu), maxOf(cpu), mean(heap), maxOf(heap))
		var wg sync.WaitGroup
		for _, r := range rs {
			if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { <-r.done })
		}
		wg.Wait()
	}
}

// reconcileSpan counts the replicas' ended reconciles and returns the
// first one's start and the last one's end (Unix ns).
func reconcileSpan(rs ...*replica) (count int, first, last int64) {
	for _, r := range rs {
		r.eachReconcile(func(start bool, _ string, at int64) {
			switch {
			case !start:
				count++
				last = max(last, at)
			case first == 0 || at < first:
				first = at
			}
		})
	}
	return count, first, last
}

func metricValue(t *testing.T, metrics, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` ([0-9.e+]+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
