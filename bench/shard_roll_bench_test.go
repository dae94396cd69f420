package bench

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/calllog"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

var (
	scaleMembers = flag.String("bench.shard.members", "", "BenchmarkShardedScaling: the member counts (default 1,2,3,4,6; without -bench.full 1,3)")
	memberLogs   = flag.String("bench.shard.logs", "", "BenchmarkShardedRollingUpdate: a directory each member's log is copied to")
	scalePods    = flag.Int("bench.shard.pods", 0, "the pods of BenchmarkShardedScaling (0: 20,000 with -bench.full, 2,000 without) and of BenchmarkShardedIdle (0: 200)")
	cpuProfiles  = flag.String("bench.shard.cpuprofiles", "", "a directory each process's CPU profile is written to: BenchmarkShardedScaling from its start to the measure, BenchmarkShardedIdle over the idle span")
	startRound   = flag.Bool("bench.shard.start", false, "BenchmarkShardedScaling: before each member count's round, start the same processes on an empty namespace to measure what a start costs (on with -bench.full)")
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

	mu     sync.Mutex
	writes []write // when record is set
	record bool
}

// write is one update as the API server answered it: the pod's key, its
// new resourceVersion, and when the answer came.
type write struct {
	key string
	rv  int64
	at  time.Time
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
				pod, err := cs.CoreV1().Pods(ns).Patch(context.Background(), fmt.Sprintf("p%d", rnd.Intn(pods)), types.MergePatchType,
					[]byte(fmt.Sprintf(`{"metadata":{"labels":{"roll":"%d"}}}`, i)), metav1.PatchOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				u.mu.Lock()
				if u.record {
					rv, _ := strconv.ParseInt(pod.ResourceVersion, 10, 64)
					u.writes = append(u.writes, write{key: ns + "/" + pod.Name, rv: rv, at: time.Now()})
				}
				u.mu.Unlock()
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
// member serving it (the members' state polled every 50 ms); and each
// update's latency, from the API server's answer to the first handler
// call with its version or a newer one (the members' call logs): the
// unserved time of a switch is how much longer than the median an update
// of a range waited while the range switched. 2,000 pods by default;
// -bench.full: 20,000. -bench.shard.logs DIR keeps the members' logs.
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

	// The settled group's lease writes a second, over a span with no
	// membership change (the renewals, with their positions).
	settledSpan := 3 * time.Second
	if benchSizes() == Full {
		settledSpan = 10 * time.Second
	}
	writes0 := leaseWrites(b, old)
	time.Sleep(settledSpan)
	settledWrites := float64(leaseWrites(b, old)-writes0) / settledSpan.Seconds()

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
	up.mu.Lock()
	up.record = true
	up.mu.Unlock()
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
	// leaseCalls: the members' lease requests during the update, by kind.
	leaseCalls := map[string]int64{}
	// unservedAll: each move's unserved time, as its new owner measured it.
	var unservedAll, claims, catchUps []time.Duration
	tally := func(st shardproc.State, before shardproc.State) {
		lists += st.ListRequests - before.ListRequests
		listBytes += st.ListBytes - before.ListBytes
		watchBytes += st.WatchBytes - before.WatchBytes
		warm += st.WarmStarts - before.WarmStarts
		fallbacks += st.WarmFallbacks - before.WarmFallbacks
		for k, n := range st.LeaseRequests {
			leaseCalls[k] += n - before.LeaseRequests[k]
		}
		for _, h := range st.Handovers {
			if h.Kind == "acquire" && h.From != "" && !h.Start.Before(rollStart) {
				unservedAll = append(unservedAll, h.Unserved)
				claims, catchUps = append(claims, h.Claim), append(catchUps, h.CatchUp)
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
	moves := len(unservedAll)
	lat := updateLatencies(b, up.writes, slices.Concat(old, live))
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
	fmt.Fprintf(&out, "| the members' lease requests: creates, updates (renewals, tokens, releases), deletes, gets, watches | %d, %d, %d, %d, %d | |\n",
		leaseCalls["create"], leaseCalls["update"], leaseCalls["delete"], leaseCalls["get"], leaseCalls["watch"])
	rollWrites := float64(leaseCalls["create"]+leaseCalls["update"]+leaseCalls["delete"]) / took.Seconds()
	fmt.Fprintf(&out, "| lease writes a second: settled (3 members, %v), during the update | %.2f, %.2f | |\n", settledSpan, settledWrites, rollWrites)
	fmt.Fprintf(&out, "| list bytes | %.1f kB | %.4f× |\n", float64(listBytes)/1e3, float64(listBytes)/float64(ast.ListBytes))
	fmt.Fprintf(&out, "| watch bytes (the update stream and the watches' resumption) | %.2f MB | %.3f× |\n", float64(watchBytes)/1e6, float64(watchBytes)/float64(ast.ListBytes))
	fmt.Fprintf(&out, "| ranges seen unserved (polled every 50 ms) | %d of %d | |\n", unserved, ranges)
	fmt.Fprintf(&out, "| longest a range went unserved, polled | %v | |\n", longest.Round(time.Millisecond))
	unservedMed, unservedMax := medMax(unservedAll)
	fmt.Fprintf(&out, "| a moved range's unserved time, as its new owner measured (record seen released → handlers given the range): median, max | %v, %v | |\n", unservedMed, unservedMax)
	claimMed, claimMax := medMax(claims)
	catchMed, catchMax := medMax(catchUps)
	fmt.Fprintf(&out, "| its parts: the claim (the token's lease write), median, max | %v, %v | |\n", claimMed, claimMax)
	fmt.Fprintf(&out, "| its parts: the catch-up with the record's version, median, max | %v, %v | |\n", catchMed, catchMax)
	fmt.Fprintf(&out, "| updates delivered (write answered → first handler call with that version or a newer one) | %d of %d | |\n", lat.delivered, len(up.writes))
	fmt.Fprintf(&out, "| their latency: p50, p99, max | %v, %v, %v | |\n", lat.p50.Round(time.Millisecond), lat.p99.Round(time.Millisecond), lat.max.Round(time.Millisecond))
	fmt.Fprintf(&out, "| max latency of updates written while their range switched (1 s before its old owner's release → its new owner's acquire): %d updates | %v | |\n", lat.switching, lat.maxSwitching.Round(time.Millisecond))
	fmt.Fprintf(&out, "| max latency of the other updates | %v | |\n", lat.maxOther.Round(time.Millisecond))
	fmt.Fprintf(&out, "| unserved: the longest an update of a switching range waited beyond the median (max − p50) | %v | |\n", (lat.maxSwitching - lat.p50).Round(time.Millisecond))
	b.Log(out.String())
	if lists > 0 {
		for _, p := range slices.Concat(old, live) {
			for _, line := range strings.Split(shardproc.Tail(p.Log, 1000), "\n") {
				if strings.Contains(line, "lists instead") || strings.Contains(line, "starts cold") && strings.Contains(line, "current=") {
					b.Logf("%s: %s", p.Name, line)
				}
			}
		}
	}
	if *memberLogs != "" {
		for _, p := range slices.Concat(old, live) {
			if lg, err := os.ReadFile(p.Log); err == nil {
				_ = os.WriteFile(filepath.Join(*memberLogs, p.Name+".log"), lg, 0o644)
			}
		}
	}
	b.ReportMetric(settledWrites, "settled-leasewrites/s")
	b.ReportMetric(rollWrites, "roll-leasewrites/s")
	b.ReportMetric(float64(moves), "moves")
	b.ReportMetric(float64(lists), "lists")
	b.ReportMetric(float64(listBytes)/float64(ast.ListBytes), "listbytes/fulllist")
	b.ReportMetric(longest.Seconds(), "unserved-s")
	b.ReportMetric((lat.maxSwitching - lat.p50).Seconds(), "switchwait-s")
	for _, p := range append([]*shardproc.Proc{a}, live...) {
		p.Stop(time.Minute)
	}
}

// leaseWrites is the lease writes (creates, updates, deletes) processes
// ps made so far.
func leaseWrites(b *testing.B, ps []*shardproc.Proc) int64 {
	var n int64
	for _, p := range ps {
		st, err := p.State(false)
		if err != nil {
			b.Fatal(err)
		}
		n += st.LeaseRequests["create"] + st.LeaseRequests["update"] + st.LeaseRequests["delete"]
	}
	return n
}

// BenchmarkShardedScaling compares, for 1, 2, 3, 4 and 6 members of a
// group (-bench.shard.members), side by side with one unsharded informer
// on the same stream (a real kube-apiserver with the ShardedListAndWatch
// gate on; 2,000 pods and 1 and 3 members, -bench.full 20,000 pods, then a
// quarter as many updates): the largest member's heap (after a collection) against the
// informer's, the members' CPU time together against the informer's, and
// the bytes they received together against the informer's. The CPU time is
// reported twice: over each process's whole life, up to the measure (the
// drain's last second of quiet included); and over the active window, from
// the processes' start (all of them list at once) to the first poll that saw
// every process's final byte count, read from that poll's state; of that
// window, apart, the part from the poll that found every process synced;
// and, after the measure, each process's CPU at rest over 10 s, and the
// window's CPU less that rest cost over the window. With -bench.full or
// -bench.shard.start, each round is preceded by the same processes
// started on an empty namespace, to take what a start costs off the
// window as well. Each process's log line gives its collector's work and
// its allocation (runtime/metrics).
// -bench.shard.cpuprofiles DIR writes every process's CPU profile, from
// its start to the measure; -bench.shard.heapprofiles DIR every process's
// heap profile, at the measure (after its collection).
//
//	go test ./bench -run '^$' -bench ShardedScaling -benchtime 1x -args -bench.full
func BenchmarkShardedScaling(b *testing.B) {
	pods := 2000
	if benchSizes() == Full {
		pods = 20000
	}
	if *scalePods > 0 {
		pods = *scalePods
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
		fmt.Fprintf(&out, "\n%d pods, %d updates, %d ranges\n\n"+
			"| members | heap, largest member | × (a) | CPU s, members together | (a) | × (a) | window s | of it to synced, s | CPU s in window, members | (a) | × (a) | of it from synced: × (a) | bytes, members together | × (a) | rest, ms/s, members | (a) | window less rest: × (a) | start, CPU s, members | (a) | window less rest and start: × (a) | lease writes/s at rest |\n"+
			"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", pods, pods/4, *shardRanges)
		for _, n := range counts {
			r := runScaling(b, c, cs, bin, ns, pods, n, i)
			startCols := "| | |"
			if r.startSpan > 0 {
				startCols = fmt.Sprintf("%.2f | %.2f | %.2f |", r.startCost(), r.aStartCost(), r.lessRestStart())
				b.ReportMetric(r.lessRestStart(), fmt.Sprintf("cpulessreststart%d/(a)", n))
			}
			fmt.Fprintf(&out, "| %d | %.1f MB | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f MB | %.2f | %.1f | %.1f | %.2f | %s %.2f |\n", n, r.heap/1e6, r.heap/r.aHeap,
				r.cpu, r.aCPU, r.cpu/r.aCPU, r.window.Seconds(), r.toSynced.Seconds(), r.winCPU, r.aWinCPU, r.winCPU/r.aWinCPU,
				(r.winCPU-r.syncCPU)/(r.aWinCPU-r.aSyncCPU), r.bytes/1e6, r.bytes/r.aBytes,
				r.rest*1000, r.aRest*1000, r.lessRest(), startCols, r.leaseWrites)
			b.ReportMetric(r.leaseWrites, fmt.Sprintf("leasewrites%d/s", n))
			b.ReportMetric(r.cpu/r.aCPU, fmt.Sprintf("cpu%d/(a)", n))
			b.ReportMetric(r.winCPU/r.aWinCPU, fmt.Sprintf("cpuwindow%d/(a)", n))
			b.ReportMetric(r.heap/r.aHeap, fmt.Sprintf("heap%d/(a)", n))
			b.ReportMetric(r.lessRest(), fmt.Sprintf("cpulessrest%d/(a)", n))
		}
		b.Log(out.String())
	}
}

// scaleRow is one member count's figures, (a)'s apart: the heap, the CPU
// seconds over the whole life, over the active window (its length window)
// and up to the poll that found every process synced (toSynced after the
// window's start), the bytes, and the CPU at rest.
type scaleRow struct {
	heap, aHeap       float64
	cpu, aCPU         float64
	winCPU, aWinCPU   float64
	syncCPU, aSyncCPU float64
	window, toSynced  time.Duration
	bytes, aBytes     float64
	// rest, aRest: CPU seconds a second at rest (the members' together);
	// leaseWrites: the members' lease writes a second then.
	rest, aRest float64
	leaseWrites float64
	// startCPU, aStartCPU: the CPU seconds the same processes used on an
	// empty namespace, from their start to the poll that found them
	// synced and every range served, startSpan after their start (0: not
	// measured).
	startCPU, aStartCPU float64
	startSpan           time.Duration
}

// startCost is what the members' start costs, less their rest over it:
// the processes' own start, the group's forming, its ranges' first empty
// lists and watches.
func (r scaleRow) startCost() float64 { return r.startCPU - r.rest*r.startSpan.Seconds() }

func (r scaleRow) aStartCost() float64 { return r.aStartCPU - r.aRest*r.startSpan.Seconds() }

// lessRestStart is the window's CPU less each side's rest over the window
// and its start: what the objects and updates cost, members against (a).
func (r scaleRow) lessRestStart() float64 {
	w := r.window.Seconds()
	return (r.winCPU - r.rest*w - r.startCost()) / (r.aWinCPU - r.aRest*w - r.aStartCost())
}

// lessRest is the window's CPU less what each side costs at rest over the
// window, members against (a): the work the stream made them do. An
// estimate: a member whose ranges move ticks more often than a settled one.
func (r scaleRow) lessRest() float64 {
	w := r.window.Seconds()
	return (r.winCPU - r.rest*w) / (r.aWinCPU - r.aRest*w)
}

// startRoundOn reports whether BenchmarkShardedScaling measures starts.
func startRoundOn() bool { return *startRound || benchSizes() == Full }

// measureStart starts (a) and n members on the empty namespace empty, as
// runScaling starts them, and returns their CPU seconds at the poll that
// found every process synced and every range served, (a)'s apart, and
// how long after their start that poll came.
func measureStart(b *testing.B, c *testcluster.Cluster, bin, empty string, n, run int) (members, a float64, span time.Duration) {
	ranges := *shardRanges
	prefix := fmt.Sprintf("/actorinformer-shard-start/%d-%d-%d", time.Now().UnixNano(), run, n)
	start := time.Now()
	pa := shardproc.Start(b, bin, "a-start", append(shardArgs(c, empty), "-mode", "unsharded")...)
	ms := make([]*shardproc.Proc, n)
	var wg sync.WaitGroup
	for i := range ms {
		wg.Go(func() {
			ms[i] = startMember(b, c, bin, empty, prefix, fmt.Sprintf("s%d", i), ranges, "-calls", "")
		})
	}
	wg.Wait()
	all := append([]*shardproc.Proc{pa}, ms...)
	cpu, at := waitServed(b, "every process synced on the empty namespace, each range served once", all, ms, ranges)
	span = at.Sub(start)
	for i, p := range all {
		if p == pa {
			a = cpu[i]
		} else {
			members += cpu[i]
		}
		p.Stop(time.Minute)
	}
	return members, a, span
}

// waitServed waits (what) until every process of all is synced and the
// members ms serve each range once, and returns the processes' CPU seconds as the
// poll that found them so read them, and when it did.
func waitServed(b *testing.B, what string, all, ms []*shardproc.Proc, ranges int) ([]float64, time.Time) {
	cpu := make([]float64, len(all))
	var at time.Time
	wait(b, 5*time.Minute, what, func() string {
		for i, p := range all {
			st, err := p.State(false)
			if err != nil || !st.Synced {
				return p.Name + " not synced"
			}
			cpu[i] = st.CPUSeconds
		}
		at = time.Now()
		return covered(ms, ranges)
	})
	return cpu, at
}

func runScaling(b *testing.B, c *testcluster.Cluster, cs kubernetes.Interface, bin, ns string, pods, n, run int) scaleRow {
	ranges := *shardRanges
	var startCPU, aStartCPU float64
	var startSpan time.Duration
	if startRoundOn() {
		empty := ns + "-empty"
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: empty}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		startCPU, aStartCPU, startSpan = measureStart(b, c, bin, empty, n, run)
	}
	prefix := fmt.Sprintf("/actorinformer-shard-scale/%d-%d-%d", time.Now().UnixNano(), run, n)
	profile := func(name string) []string {
		var args []string
		if *memProfileRate > 0 {
			args = append(args, "-memprofilerate", strconv.Itoa(*memProfileRate))
		}
		if *cpuProfiles == "" {
			return args
		}
		return append(args, "-cpuprofile", filepath.Join(*cpuProfiles, fmt.Sprintf("n%d-%s.pprof", n, name)))
	}
	// The active window starts here: every process starts listing at its
	// start, (a) at once, a member once it joined the group.
	start := time.Now()
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
	synced, syncedAt := waitServed(b, "every process synced, each range served once", all, ms, ranges)
	updates := pods / 4
	rnd := rand.New(rand.NewSource(int64(n)))
	parallel(8, updates, func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Patch(context.Background(), fmt.Sprintf("p%d", rnd.Intn(pods)), types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d-%d"}}}`, n, i)), metav1.PatchOptions{})
		return err
	}, b)
	// Drained: no process received a byte for a second. The active window
	// ends at the first poll that saw the final byte counts: its CPU
	// seconds (drained) and time (end).
	var (
		last    []int64
		drained []float64
		end     time.Time
	)
	wait(b, 2*time.Minute, "the streams drained", func() string {
		cur, cpu := make([]int64, len(all)), make([]float64, len(all))
		now := time.Now()
		for i, p := range all {
			st, _ := p.State(false)
			cur[i], cpu[i] = st.Bytes, st.CPUSeconds
		}
		if !slices.Equal(cur, last) {
			last, drained, end = cur, cpu, now
			return "bytes still growing"
		}
		if time.Since(end) < time.Second {
			return "no byte for less than a second"
		}
		return ""
	})
	r := scaleRow{window: end.Sub(start), toSynced: syncedAt.Sub(start), startCPU: startCPU, aStartCPU: aStartCPU, startSpan: startSpan}
	for i, p := range all {
		if p == a {
			r.aWinCPU, r.aSyncCPU = drained[i], synced[i]
			continue
		}
		r.winCPU += drained[i]
		r.syncCPU += synced[i]
	}
	for _, p := range all {
		q := "gc=1"
		if *cpuProfiles != "" {
			q += "&stopprofile=1"
		}
		st, err := p.StateQuery(q)
		if err != nil {
			b.Fatal(err)
		}
		if *shardHeapDump != "" {
			if err := saveHeapProfile(p.URL, filepath.Join(*shardHeapDump, fmt.Sprintf("n%d-%s.heap", n, p.Name))); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("%d members: %s caches %d objects, heap %.1f MB; %d list requests (%.1f MB), %d warm starts, %d handovers; CPU %.2f s, of it the collector's %.2f s (runtime's estimate; its marking in idle time %.2f s) in %d cycles; %.0f MB allocated",
			n, p.Name, st.Objects, float64(st.HeapNow)/1e6, st.ListRequests, float64(st.ListBytes)/1e6, st.WarmStarts, len(st.Handovers), st.CPUSeconds, st.GCCPUSeconds, st.GCIdleSeconds, st.GCCycles, float64(st.AllocBytes)/1e6)
		if p == a {
			r.aHeap, r.aCPU, r.aBytes = float64(st.HeapNow), st.CPUSeconds, float64(st.Bytes)
			continue
		}
		r.heap = max(r.heap, float64(st.HeapNow))
		r.cpu += st.CPUSeconds
		r.bytes += float64(st.Bytes)
	}
	// At rest, once measured: each process's CPU over 10 s (3 s in the
	// smoke run), per second, to set the rest cost apart from the window's
	// work.
	restSpan := 3 * time.Second // the smoke run's
	if benchSizes() == Full {
		restSpan = 10 * time.Second
	}
	restStart, w0, t0 := cpuSeconds(b, all), leaseWrites(b, all), time.Now()
	time.Sleep(restSpan)
	restEnd, w1, span := cpuSeconds(b, all), leaseWrites(b, all), time.Since(t0).Seconds()
	r.leaseWrites = float64(w1-w0) / span
	for i, p := range all {
		if p == a {
			r.aRest = (restEnd[i] - restStart[i]) / span
			continue
		}
		r.rest += (restEnd[i] - restStart[i]) / span
	}
	for _, p := range all {
		p.Stop(time.Minute)
	}
	return r
}

// latencies are the updates' delivery times during a rolling update.
type latencies struct {
	delivered, switching   int
	p50, p99, max          time.Duration
	maxSwitching, maxOther time.Duration
}

// updateLatencies matches each write with the first handler call, on any
// member, for its key with its resourceVersion or a newer one (an initial
// list may carry a newer version in its place), from the members' call
// logs. An update counts as written while its range switched when it was
// written between 1 s before the range's old owner's release call (after
// its handlers' last call) and its new owner's acquire call (before their
// first).
func updateLatencies(b *testing.B, writes []write, ps []*shardproc.Proc) latencies {
	type call struct {
		at int64
		rv int64
	}
	byKey := map[string][]call{}
	type change struct {
		at int64
		op calllog.Op
	}
	byRange := map[int][]change{}
	keyRange := map[string]int{}
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.Calls] {
			continue
		}
		seen[p.Calls] = true
		recs, _, err := calllog.Read(p.Calls)
		if err != nil {
			b.Fatalf("%s's call log: %v", p.Name, err)
		}
		for _, rc := range recs {
			switch {
			case rc.Op == calllog.OpAcquire || rc.Op == calllog.OpRelease:
				byRange[rc.Range] = append(byRange[rc.Range], change{rc.Start, rc.Op})
			case rc.Op == calllog.OpInitial || rc.Op == calllog.OpAdd || rc.Op == calllog.OpUpdate:
				rv, _ := strconv.ParseInt(rc.RV, 10, 64)
				byKey[rc.Key] = append(byKey[rc.Key], call{rc.Start, rv})
				keyRange[rc.Key] = rc.Range
			}
		}
	}
	for _, cs := range byKey {
		slices.SortFunc(cs, func(a, b call) int { return cmp.Compare(a.at, b.at) })
	}
	for _, cs := range byRange {
		slices.SortFunc(cs, func(a, b change) int { return cmp.Compare(a.at, b.at) })
	}
	// switching reports whether a write at t falls in a switch of range r:
	// from 1 s before a release (its old owner's last handler call) to the
	// next acquire (its new owner's first).
	switching := func(r int, t int64) bool {
		for i, c := range byRange[r] {
			if c.op != calllog.OpRelease || t < c.at-int64(time.Second) {
				continue
			}
			for _, d := range byRange[r][i+1:] {
				if d.op == calllog.OpAcquire {
					if t <= d.at {
						return true
					}
					break
				}
			}
		}
		return false
	}
	var out latencies
	var all []time.Duration
	for _, w := range writes {
		cs := byKey[w.key]
		t := w.at.UnixNano()
		found := false
		for _, c := range cs {
			if c.rv >= w.rv {
				d := time.Duration(c.at - t)
				all = append(all, d)
				out.max = max(out.max, d)
				if switching(keyRange[w.key], t) {
					out.switching++
					out.maxSwitching = max(out.maxSwitching, d)
				} else {
					out.maxOther = max(out.maxOther, d)
				}
				found = true
				break
			}
		}
		if found {
			out.delivered++
		}
	}
	if len(all) > 0 {
		slices.Sort(all)
		out.p50 = all[len(all)/2]
		out.p99 = all[len(all)*99/100]
	}
	return out
}

// medMax returns the median and the largest of ds, rounded to 0.1 ms.
func medMax(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2].Round(100 * time.Microsecond), s[len(s)-1].Round(100 * time.Microsecond)
}
