package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// BenchmarkShardedMembers compares, on a real kube-apiserver with the
// ShardedListAndWatch gate on, side by side on one stream of pods:
//
//	(a) one unsharded informer;
//	(b) three informers that each keep a third of the pods, filtering on
//	    the client (kube-state-metrics' --shard/--total-shards);
//	(c) three members of a shard group (package shard), whose ranges the
//	    server filters.
//
// Each is a process of its own (internal/shardmember). It reports the
// bytes all of a setup's processes received from the API server (counted
// at their HTTP transport) against (a)'s, the largest heap after sync of a
// setup's process against (a)'s, their CPU time, and for (c) how long a
// SIGKILLed member's ranges went unserved and how long a joining member
// took to serve its share. 2,000 pods by default; -bench.full: 20,000;
// -bench.shard.ranges sets the group's range count (16).
//
//	go test ./bench -run '^$' -bench ShardedMembers -benchtime 1x -args -bench.full
var (
	shardRanges    = flag.Int("bench.shard.ranges", 16, "BenchmarkShardedMembers and BenchmarkShardedScaling: the group's number of ranges")
	shardHeapDump  = flag.String("bench.shard.heapprofiles", "", "a directory each process's heap profile is written to: BenchmarkShardedMembers after the stream drained, BenchmarkShardedScaling at the heap's measure")
	memProfileRate = flag.Int("bench.shard.memprofilerate", 0, "BenchmarkShardedScaling: the processes' runtime.MemProfileRate (0: the runtime's default); a low rate makes their heap profiles exact and costs CPU")
)

func BenchmarkShardedMembers(b *testing.B) {
	pods := 2000
	if benchSizes() == Full {
		pods = 20000
	}
	c, cs, bin, ns := startShardBench(b, pods)
	b.ResetTimer()
	for i := range b.N {
		runShardBench(b, c, cs, bin, ns, pods, i)
	}
}

// startShardBench starts a kube-apiserver with the ShardedListAndWatch gate
// on, creates pods pods in namespace "bench" and builds
// internal/shardmember.
func startShardBench(b *testing.B, pods int) (*testcluster.Cluster, kubernetes.Interface, string, string) {
	c := testcluster.Start(b, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		b.Fatal(err)
	}
	ns := "bench"
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	parallel(16, pods, func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: map[string]string{"app": "bench", "gen": "0"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
		}, metav1.CreateOptions{})
		return err
	}, b)
	b.Logf("%d pods created in %v", pods, time.Since(start).Round(time.Millisecond))
	bin, err := shardproc.Build(false)
	if err != nil {
		b.Fatal(err)
	}
	return c, cs, bin, ns
}

func parallel(workers, n int, f func(i int) error, b testing.TB) {
	var wg sync.WaitGroup
	next := make(chan int)
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

func runShardBench(b *testing.B, c *testcluster.Cluster, cs kubernetes.Interface, bin, ns string, pods, run int) {
	common := []string{"-host", c.Host(), "-token", c.AdminToken(), "-resource", "pods", "-namespace", ns}
	prefix := fmt.Sprintf("/actorinformer-shard-bench/%d-%d", time.Now().UnixNano(), run)
	const n = 3
	ranges := *shardRanges
	a := []*shardproc.Proc{shardproc.Start(b, bin, "a", append(common, "-mode", "unsharded")...)}
	var bb, cc []*shardproc.Proc
	for i := range n {
		bb = append(bb, shardproc.Start(b, bin, fmt.Sprintf("b%d", i), append(common, "-mode", "client", "-shard", strconv.Itoa(i), "-total", strconv.Itoa(n))...))
	}
	member := func(name string) *shardproc.Proc {
		return shardproc.Start(b, bin, name, append(common, "-mode", "sharded", "-etcd", c.EtcdURL(), "-etcd-prefix", prefix,
			"-etcd-ttl", "2s", "-ranges", strconv.Itoa(ranges), "-group", fmt.Sprintf("members-%d", run))...)
	}
	// The members start together, as a deployment's replicas do.
	cc = make([]*shardproc.Proc, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); cc[i] = member(fmt.Sprintf("c%d", i)) }()
	}
	wg.Wait()
	all := slices.Concat(a, bb, cc)
	wait(b, 5*time.Minute, "every process synced, each range served once", func() string {
		for _, p := range all {
			if st, err := p.State(false); err != nil || !st.Synced {
				return p.Name + " not synced"
			}
		}
		return covered(cc, ranges)
	})

	synced := map[string]int64{}
	for _, p := range all {
		st, _ := p.State(false)
		synced[p.Name] = st.Bytes
	}

	// The update stream.
	updates := pods / 4
	ctx := context.Background()
	rnd := rand.New(rand.NewSource(int64(run)))
	names := make([]string, updates)
	for i := range names {
		names[i] = fmt.Sprintf("p%d", rnd.Intn(pods))
	}
	start := time.Now()
	parallel(8, updates, func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, names[i], types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, i+1)), metav1.PatchOptions{})
		return err
	}, b)
	b.Logf("%d updates in %v", updates, time.Since(start).Round(time.Millisecond))
	drainStreams(b, all)

	type row struct {
		name                       string
		syncBytes, streamBytes     int64
		heapMax                    int64
		cpu                        float64
		objects, objMax, processes int
	}
	sum := func(name string, ps []*shardproc.Proc) row {
		r := row{name: name, processes: len(ps)}
		for _, p := range ps {
			st, err := p.StateQuery("gc=1")
			if err != nil {
				b.Fatal(err)
			}
			if *shardHeapDump != "" {
				if err := saveHeapProfile(p.URL, filepath.Join(*shardHeapDump, p.Name+".heap")); err != nil {
					b.Fatal(err)
				}
			}
			r.syncBytes += synced[p.Name]
			r.streamBytes += st.Bytes - synced[p.Name]
			r.heapMax = max(r.heapMax, int64(st.HeapNow))
			r.cpu += st.CPUSeconds
			r.objects += st.Objects
			r.objMax = max(r.objMax, st.Objects)
		}
		return r
	}
	rows := []row{sum("(a) one unsharded informer", a), sum("(b) 3 informers, client-side filter", bb), sum("(c) 3 shard members, server-side ranges", cc)}
	var out strings.Builder
	fmt.Fprintf(&out, "\n| setup | objects cached (sum / largest process) | bytes to sync (sum) | × (a) | bytes of the update stream (sum) | × (a) | heap, largest process | × (a) | CPU s (sum) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "| %s | %d / %d | %.2f MB | %.2f | %.2f MB | %.2f | %.1f MB | %.2f | %.2f |\n", r.name, r.objects, r.objMax,
			float64(r.syncBytes)/1e6, float64(r.syncBytes)/float64(rows[0].syncBytes),
			float64(r.streamBytes)/1e6, float64(r.streamBytes)/float64(rows[0].streamBytes),
			float64(r.heapMax)/1e6, float64(r.heapMax)/float64(rows[0].heapMax), r.cpu)
	}
	b.Log(out.String())
	total := func(r row) float64 { return float64(r.syncBytes + r.streamBytes) }
	b.ReportMetric(total(rows[2])/total(rows[0]), "bytes(c)/(a)")
	b.ReportMetric(total(rows[1])/total(rows[0]), "bytes(b)/(a)")
	b.ReportMetric(float64(rows[2].heapMax)/float64(rows[0].heapMax), "heap(c)/(a)")

	// A SIGKILLed member's ranges, then a join.
	victim := cc[0]
	killed := time.Now()
	victim.Kill()
	cc = cc[1:]
	wait(b, 2*time.Minute, "the survivors serve every range", func() string { return covered(cc, ranges) })
	takeover := time.Since(killed)
	joiner := member("c3")
	cc = append(cc, joiner)
	wait(b, 2*time.Minute, "the joiner serves its share", func() string {
		st, err := joiner.State(false)
		if err != nil || len(st.Ranges) == 0 {
			return "the joiner serves no range yet"
		}
		return covered(cc, ranges)
	})
	join := time.Since(joiner.Start)
	b.Logf("SIGKILL: ranges served again after %v (etcd provider TTL 2s); join: %v from process start to serving its share", takeover.Round(time.Millisecond), join.Round(time.Millisecond))
	b.ReportMetric(takeover.Seconds(), "takeover-s")
	b.ReportMetric(join.Seconds(), "join-s")
	for _, p := range slices.Concat(a, bb, cc) {
		p.Stop(time.Minute)
	}
}

// drainStreams lets the streams drain: every process's byte count stays put for
// a second.
func drainStreams(b testing.TB, all []*shardproc.Proc) {
	var last []int64
	wait(b, 2*time.Minute, "the streams drained", func() string {
		cur := make([]int64, len(all))
		for i, p := range all {
			st, _ := p.State(false)
			cur[i] = st.Bytes
		}
		same := slices.Equal(cur, last)
		last = cur
		if !same {
			time.Sleep(time.Second)
			return "bytes still growing"
		}
		return ""
	})
}

// covered is "" when the members together serve each range exactly once.
func covered(ms []*shardproc.Proc, ranges int) string {
	seen := map[int]string{}
	for _, p := range ms {
		st, err := p.State(false)
		if err != nil {
			return err.Error()
		}
		for _, r := range st.Ranges {
			if o, dup := seen[r]; dup {
				return fmt.Sprintf("range %d served by %s and %s", r, o, p.Name)
			}
			seen[r] = p.Name
		}
	}
	if len(seen) != ranges {
		return fmt.Sprintf("%d of %d ranges served", len(seen), ranges)
	}
	return ""
}

func wait(b testing.TB, timeout time.Duration, what string, cond func() string) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("%s: not within %v: %s", what, timeout, last)
}

// saveHeapProfile writes a process's heap profile (after a collection).
func saveHeapProfile(url, path string) error {
	resp, err := http.Get(url + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
