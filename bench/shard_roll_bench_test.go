package bench

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

var (
	scaleMembers = flag.String("bench.shard.members", "", "BenchmarkShardedScaling: the member counts (default 1,2,3,4,6; without -bench.full 1,3)")
	cpuProfiles  = flag.String("bench.shard.cpuprofiles", "", "BenchmarkShardedScaling: a directory each process's CPU profile (from its start to the measure) is written to")
)

// shardArgs are a shardmember's arguments against cluster c.
func shardArgs(c *testcluster.Cluster, ns string) []string {
	return []string{"-host", c.Host(), "-token", c.AdminToken(), "-resource", "pods", "-namespace", ns}
}

// startMember starts a member of the group under etcd prefix.
func startMember(b testing.TB, c *testcluster.Cluster, bin, ns, prefix, name string, ranges int, extra ...string) *shardproc.Proc {
	return shardproc.Start(b, bin, name, append(append(shardArgs(c, ns), "-mode", "sharded", "-etcd", c.EtcdURL(), "-etcd-prefix", prefix,
		"-etcd-ttl", "2s", "-ranges", strconv.Itoa(ranges)), extra...)...)
}

// updater patches random pods from 4 workers, paced to about rate a
// second, until stopped.
type updater struct {
	n    atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

func startUpdates(b testing.TB, cs kubernetes.Interface, ns string, pods, rate int) *updater {
	u := &updater{stop: make(chan struct{})}
	for w := range 4 {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			rnd := rand.New(rand.NewSource(int64(w)))
			tick := time.NewTicker(time.Second * 4 / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-u.stop:
					return
				case <-tick.C:
				}
				i := u.n.Add(1)
				_, err := cs.CoreV1().Pods(ns).Patch(context.Background(), fmt.Sprintf("p%d", rnd.Intn(pods)), types.MergePatchType,
					[]byte(fmt.Sprintf(`{"metadata":{"labels":{"roll":"%d"}}}`, i)), metav1.PatchOptions{})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	return u
}

func (u *updater) Stop() int64 { close(u.stop); u.wg.Wait(); return u.n.Load() }

// balanced is "" when the members serve each range once and their shares
// differ by one at most.
func balanced(ms []*shardproc.Proc, ranges int) string {
	if why := covered(ms, ranges); why != "" {
		return why
	}
	lo, hi := ranges, 0
	for _, p := range ms {
		st, err := p.State(false)
		if err != nil {
			return err.Error()
		}
		lo, hi = min(lo, len(st.Ranges)), max(hi, len(st.Ranges))
	}
	if hi-lo > 1 {
		return fmt.Sprintf("shares from %d to %d ranges", lo, hi)
	}
	return ""
}

// BenchmarkShardedRollingUpdate measures a rolling update of a group of 3
// members (16 ranges) on a real kube-apiserver with the ShardedListAndWatch
// gate on, under a stream of updates: a new member starts, and once the
// group is balanced again an old one leaves gracefully (SIGTERM), three
// times. Beside it runs one unsharded informer, whose initial list is the
// yardstick: the lists (requests and bytes) the members made during the
// update, against that list; the watches' bytes; the ranges moved (the
// members' acquires from another member); the longest time a range had no
// member serving it (the members' state polled every 50 ms). 2,000 pods by
// default; -bench.full: 20,000.
//
//	go test ./bench -run '^$' -bench ShardedRollingUpdate -benchtime 1x -args -bench.full
func BenchmarkShardedRollingUpdate(b *testing.B) {
	pods := 2000
	if benchSizes() == Full {
		pods = 20000
	}
	c, cs, bin, ns := startShardBench(b, pods)
	b.ResetTimer()
	for i := range b.N {
		runRollingUpdate(b, c, cs, bin, ns, pods, i)
	}
}

func runRollingUpdate(b *testing.B, c *testcluster.Cluster, cs kubernetes.Interface, bin, ns string, pods, run int) {
	ranges := *shardRanges
	prefix := fmt.Sprintf("/actorinformer-shard-roll/%d-%d", time.Now().UnixNano(), run)
	a := shardproc.Start(b, bin, "a", append(shardArgs(c, ns), "-mode", "unsharded")...)
	old := make([]*shardproc.Proc, 3)
	var wg sync.WaitGroup
	for i := range old {
		wg.Go(func() { old[i] = startMember(b, c, bin, ns, prefix, fmt.Sprintf("c%d", i), ranges) })
	}
	wg.Wait()
	wait(b, 5*time.Minute, "every process synced, the ranges balanced", func() string {
		for _, p := range append([]*shardproc.Proc{a}, old...) {
			if st, err := p.State(false); err != nil || !st.Synced {
				return p.Name + " not synced"
			}
		}
		return balanced(old, ranges)
	})
	ast, err := a.State(false)
	if err != nil {
		b.Fatal(err)
	}

	var (
		mu      sync.Mutex
		live    = slices.Clone(old)
		counted = map[string]shardproc.State{} // each member's counters: at the start, or when it left
		gone    = map[string]shardproc.State{}
	)
	for _, p := range old {
		st, _ := p.State(false)
		counted[p.Name] = st
	}
	// The poller: for each range, the longest time no member served it.
	lastServed := make([]time.Time, ranges)
	gap := make([]time.Duration, ranges)
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		now := time.Now()
		for r := range lastServed {
			lastServed[r] = now
		}
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
			mu.Lock()
			ps := slices.Clone(live)
			mu.Unlock()
			served := make([]bool, ranges)
			for _, p := range ps {
				if st, err := p.State(false); err == nil {
					for _, r := range st.Ranges {
						served[r] = true
					}
				}
			}
			now := time.Now()
			for r := range served {
				if served[r] {
					lastServed[r] = now
				} else {
					gap[r] = max(gap[r], now.Sub(lastServed[r]))
				}
			}
		}
	}()

	up := startUpdates(b, cs, ns, pods, 200)
	rollStart := time.Now()
	for k := range old {
		n := startMember(b, c, bin, ns, prefix, fmt.Sprintf("n%d", k), ranges)
		mu.Lock()
		live = append(live, n)
		ps := slices.Clone(live)
		mu.Unlock()
		wait(b, 5*time.Minute, n.Name+" joined, the ranges balanced", func() string {
			if st, err := n.State(false); err != nil || len(st.Ranges) == 0 {
				return n.Name + " serves nothing yet"
			}
			return balanced(ps, ranges)
		})
		leaver := old[k]
		st, _ := leaver.State(false)
		gone[leaver.Name] = st // its counters before it leaves (it lists nothing then)
		// It serves its ranges until it has handed them over: the poller
		// reads it until it exits.
		if !leaver.Stop(time.Minute) {
			b.Fatalf("%s did not exit within a minute of SIGTERM", leaver.Name)
		}
		mu.Lock()
		live = slices.DeleteFunc(live, func(p *shardproc.Proc) bool { return p == leaver })
		ps = slices.Clone(live)
		mu.Unlock()
		wait(b, 5*time.Minute, leaver.Name+" left, the ranges balanced", func() string { return balanced(ps, ranges) })
	}
	took := time.Since(rollStart)
	updates := up.Stop()
	close(stopPoll)
	<-polled
	wait(b, 2*time.Minute, "the members cache every pod once", func() string {
		n := 0
		for _, p := range live {
			st, err := p.State(false)
			if err != nil {
				return err.Error()
			}
			n += st.Objects
		}
		if n != pods {
			return fmt.Sprintf("%d objects cached, want %d", n, pods)
		}
		return ""
	})

	var lists, listBytes, watchBytes, warm, fallbacks int64
	moves := 0
	var unservedMax time.Duration // as the members measured it
	tally := func(st shardproc.State, before shardproc.State) {
		lists += st.ListRequests - before.ListRequests
		listBytes += st.ListBytes - before.ListBytes
		watchBytes += st.WatchBytes - before.WatchBytes
		warm += st.WarmStarts - before.WarmStarts
		fallbacks += st.WarmFallbacks - before.WarmFallbacks
		for _, h := range st.Handovers {
			if h.Kind == "acquire" && h.From != "" && !h.Start.Before(rollStart) {
				moves++
				unservedMax = max(unservedMax, h.Unserved)
			}
		}
	}
	for name, st := range gone {
		tally(st, counted[name])
	}
	for _, p := range live {
		st, err := p.State(false)
		if err != nil {
			b.Fatal(err)
		}
		tally(st, counted[p.Name])
	}
	longest, unserved := time.Duration(0), 0
	for _, g := range gap {
		longest = max(longest, g)
		if g > 0 {
			unserved++
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nrolling update of 3 members, %d ranges, %d pods, %d updates during it (%v)\n\n", ranges, pods, updates, took.Round(time.Millisecond))
	fmt.Fprintf(&out, "| | value | against (a)'s initial list |\n|---|---:|---:|\n")
	fmt.Fprintf(&out, "| ranges moved (acquires from a member) | %d | |\n", moves)
	fmt.Fprintf(&out, "| warm starts / fallbacks to a list | %d / %d | |\n", warm, fallbacks)
	fmt.Fprintf(&out, "| list requests | %d | %d requests |\n", lists, ast.ListRequests)
	fmt.Fprintf(&out, "| list bytes | %.1f kB | %.4f× |\n", float64(listBytes)/1e3, float64(listBytes)/float64(ast.ListBytes))
	fmt.Fprintf(&out, "| watch bytes (the update stream and the watches' resumption) | %.2f MB | %.3f× |\n", float64(watchBytes)/1e6, float64(watchBytes)/float64(ast.ListBytes))
	fmt.Fprintf(&out, "| ranges seen unserved (polled every 50 ms) | %d of %d | |\n", unserved, ranges)
	fmt.Fprintf(&out, "| longest a range went unserved, polled | %v | |\n", longest.Round(time.Millisecond))
	fmt.Fprintf(&out, "| longest a moved range went unserved, as its new owner measured (handoff received → handlers given the range) | %v | |\n", unservedMax.Round(time.Millisecond))
	b.Log(out.String())
	if lists > 0 {
		for _, p := range slices.Concat(old, live) {
			for _, line := range strings.Split(shardproc.Tail(p.Log, 1000), "\n") {
				if strings.Contains(line, "lists instead") {
					b.Logf("%s: %s", p.Name, line)
				}
			}
		}
	}
	b.ReportMetric(float64(moves), "moves")
	b.ReportMetric(float64(lists), "lists")
	b.ReportMetric(float64(listBytes)/float64(ast.ListBytes), "listbytes/fulllist")
	b.ReportMetric(longest.Seconds(), "unserved-s")
	for _, p := range append([]*shardproc.Proc{a}, live...) {
		p.Stop(time.Minute)
	}
}

// BenchmarkShardedScaling compares, for 1, 2, 3, 4 and 6 members of a
// group (-bench.shard.members), side by side with one unsharded informer
// on the same stream (a real kube-apiserver with the ShardedListAndWatch
// gate on; 2,000 pods and 1 and 3 members, -bench.full 20,000 pods, then a
// quarter as many updates): the largest member's heap (after a collection) against the
// informer's, the members' CPU time together against the informer's, and
// the bytes they received together against the informer's.
// -bench.shard.cpuprofiles DIR writes every process's CPU profile, from
// its start to the measure.
//
//	go test ./bench -run '^$' -bench ShardedScaling -benchtime 1x -args -bench.full
func BenchmarkShardedScaling(b *testing.B) {
	pods := 2000
	if benchSizes() == Full {
		pods = 20000
	}
	members := *scaleMembers
	if members == "" {
		members = "1,3" // the smoke run's
		if benchSizes() == Full {
			members = "1,2,3,4,6"
		}
	}
	var counts []int
	for _, f := range strings.Split(members, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-bench.shard.members %q: want member counts", members)
		}
		counts = append(counts, n)
	}
	c, cs, bin, ns := startShardBench(b, pods)
	b.ResetTimer()
	for i := range b.N {
		var out strings.Builder
		fmt.Fprintf(&out, "\n%d pods, %d updates, %d ranges\n\n| members | heap, largest member | × (a) | CPU s, members together | (a) | × (a) | bytes, members together | × (a) |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n", pods, pods/4, *shardRanges)
		for _, n := range counts {
			r := runScaling(b, c, cs, bin, ns, pods, n, i)
			fmt.Fprintf(&out, "| %d | %.1f MB | %.2f | %.2f | %.2f | %.2f | %.2f MB | %.2f |\n", n, r.heap/1e6, r.heap/r.aHeap, r.cpu, r.aCPU, r.cpu/r.aCPU, r.bytes/1e6, r.bytes/r.aBytes)
			b.ReportMetric(r.cpu/r.aCPU, fmt.Sprintf("cpu%d/(a)", n))
			b.ReportMetric(r.heap/r.aHeap, fmt.Sprintf("heap%d/(a)", n))
		}
		b.Log(out.String())
	}
}

type scaleRow struct{ heap, aHeap, cpu, aCPU, bytes, aBytes float64 }

func runScaling(b *testing.B, c *testcluster.Cluster, cs kubernetes.Interface, bin, ns string, pods, n, run int) scaleRow {
	ranges := *shardRanges
	prefix := fmt.Sprintf("/actorinformer-shard-scale/%d-%d-%d", time.Now().UnixNano(), run, n)
	profile := func(name string) []string {
		if *cpuProfiles == "" {
			return nil
		}
		return []string{"-cpuprofile", filepath.Join(*cpuProfiles, fmt.Sprintf("n%d-%s.pprof", n, name))}
	}
	a := shardproc.Start(b, bin, "a", append(append(shardArgs(c, ns), "-mode", "unsharded"), profile("a")...)...)
	ms := make([]*shardproc.Proc, n)
	var wg sync.WaitGroup
	for i := range ms {
		name := fmt.Sprintf("c%d", i)
		// No call log: the unsharded informer's handler writes none.
		wg.Go(func() {
			ms[i] = startMember(b, c, bin, ns, prefix, name, ranges, append(profile(name), "-calls", "")...)
		})
	}
	wg.Wait()
	all := append([]*shardproc.Proc{a}, ms...)
	wait(b, 5*time.Minute, "every process synced, each range served once", func() string {
		for _, p := range all {
			if st, err := p.State(false); err != nil || !st.Synced {
				return p.Name + " not synced"
			}
		}
		return covered(ms, ranges)
	})
	updates := pods / 4
	rnd := rand.New(rand.NewSource(int64(n)))
	parallel(8, updates, func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Patch(context.Background(), fmt.Sprintf("p%d", rnd.Intn(pods)), types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d-%d"}}}`, n, i)), metav1.PatchOptions{})
		return err
	}, b)
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
	var r scaleRow
	for _, p := range all {
		q := "gc=1"
		if *cpuProfiles != "" {
			q += "&stopprofile=1"
		}
		st, err := p.StateQuery(q)
		if err != nil {
			b.Fatal(err)
		}
		if p == a {
			r.aHeap, r.aCPU, r.aBytes = float64(st.HeapNow), st.CPUSeconds, float64(st.Bytes)
			continue
		}
		r.heap = max(r.heap, float64(st.HeapNow))
		r.cpu += st.CPUSeconds
		r.bytes += float64(st.Bytes)
	}
	for _, p := range all {
		p.Stop(time.Minute)
	}
	return r
}
