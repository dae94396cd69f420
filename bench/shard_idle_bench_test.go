package bench

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/internal/shardproc"
)

var (
	idleSpan    = flag.Duration("bench.shard.idle", 0, "BenchmarkShardedIdle's span (0: 30 s with -bench.full, 10 s without)")
	compareArgs = flag.String("bench.shard.compare", "", "BenchmarkShardedIdle: run a second group of 3 members side by side, with these more arguments (internal/shardmember's flags, separated by spaces)")
)

// BenchmarkShardedIdle measures what a settled group costs when nothing
// changes: 3 members (16 ranges, -bench.shard.ranges) and one unsharded
// informer beside them on a real kube-apiserver with the
// ShardedListAndWatch gate on, 200 pods; once every process has synced
// and a few seconds passed, the CPU time each uses over 30 s (-bench.full;
// 10 s without; -bench.shard.idle), per second. -bench.shard.cpuprofiles DIR writes each
// process's CPU profile over that span. -bench.shard.compare ARGS runs a
// second group of 3 members side by side (members d0–d2, each started
// after its c twin, before it on odd runs), with those more arguments, and
// reports its CPU against the first group's: the same machine's swings
// fall on both.
// A member's lease renewals, the group's heartbeats, the protocol's clock,
// protoactor's gossip and the etcd provider's keep-alive run all the time;
// an unsharded informer waits on its watch.
//
//	go test ./bench -run '^$' -bench ShardedIdle -benchtime 1x -args -bench.full
//	go test ./bench -run '^$' -bench ShardedIdle -benchtime 1x -args -bench.full -bench.shard.compare '-tick 1s'
func BenchmarkShardedIdle(b *testing.B) {
	pods := 200
	if *scalePods > 0 {
		pods = *scalePods
	}
	c, _, bin, ns := startShardBench(b, pods)
	ranges := *shardRanges
	groups := [][]string{nil}
	if *compareArgs != "" {
		groups = append(groups, strings.Fields(*compareArgs))
	}
	b.ResetTimer()
	for run := range b.N {
		a := shardproc.Start(b, bin, "a", append(shardArgs(c, ns), "-mode", "unsharded")...)
		all := []*shardproc.Proc{a}
		members := make([][]*shardproc.Proc, len(groups))
		group := map[*shardproc.Proc]int{}
		prefixes := make([]string, len(groups))
		for g := range groups {
			prefixes[g] = fmt.Sprintf("/actorinformer-shard-idle/%d-%d-%d", time.Now().UnixNano(), run, g)
		}
		// The groups' members start in turn (c0 d0 c1 d1 …, the second
		// group first on odd runs), so that neither group is the one
		// that starts while the other has settled.
		for i := range 3 {
			for k := range groups {
				g := k
				if run%2 == 1 {
					g = len(groups) - 1 - k
				}
				args := append([]string{"-calls", "", "-group", fmt.Sprintf("idle%d", g)}, groups[g]...)
				p := startMember(b, c, bin, ns, prefixes[g], fmt.Sprintf("%c%d", 'c'+g, i), ranges, args...)
				members[g] = append(members[g], p)
				group[p] = g
				all = append(all, p)
			}
		}
		wait(b, 2*time.Minute, "every process synced, each range served once", func() string {
			for _, p := range all {
				if st, err := p.State(false); err != nil || !st.Synced {
					return p.Name + " not synced"
				}
			}
			for _, ms := range members {
				if msg := covered(ms, ranges); msg != "" {
					return msg
				}
			}
			return ""
		})
		time.Sleep(5 * time.Second)
		span := 10 * time.Second // the smoke run's
		if benchSizes() == Full {
			span = 30 * time.Second
		}
		if *idleSpan > 0 {
			span = *idleSpan
		}
		before := cpuSeconds(b, all)
		var profiles sync.WaitGroup
		if *cpuProfiles != "" {
			for _, p := range all {
				profiles.Go(func() { idleProfile(b, p, span, filepath.Join(*cpuProfiles, "idle-"+p.Name+".pprof")) })
			}
		}
		time.Sleep(span)
		after := cpuSeconds(b, all)
		profiles.Wait()
		var out strings.Builder
		sums := make([]float64, len(groups))
		for i, p := range all {
			perS := (after[i] - before[i]) * 1000 / span.Seconds()
			fmt.Fprintf(&out, "%s %.1f ms/s  ", p.Name, perS)
			if i > 0 {
				sums[group[p]] += perS
			}
		}
		b.Logf("idle CPU, per second: %s", out.String())
		b.ReportMetric(sums[0]/3, "ms/s-member")
		if len(groups) > 1 {
			b.ReportMetric(sums[1]/3, "ms/s-compared")
			b.Logf("the compared group (%s) uses %.2f× the first's CPU", *compareArgs, sums[1]/sums[0])
		}
		b.ReportMetric((after[0]-before[0])*1000/span.Seconds(), "ms/s-(a)")
		for _, p := range all {
			p.Stop(time.Minute)
		}
	}
}

// cpuSeconds is the CPU time each process has used so far.
func cpuSeconds(b *testing.B, ps []*shardproc.Proc) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		st, err := p.State(false)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = st.CPUSeconds
	}
	return out
}

// idleProfile writes p's CPU profile over the next span to file.
func idleProfile(b *testing.B, p *shardproc.Proc, span time.Duration, file string) {
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.URL, int(span.Seconds())))
	if err != nil {
		b.Errorf("%s's profile: %v", p.Name, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, data)
	}
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		b.Errorf("%s's profile: %v", p.Name, err)
	}
}
