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

// BenchmarkShardedIdle measures what a settled group costs when nothing
// changes: 3 members (16 ranges, -bench.shard.ranges) and one unsharded
// informer beside them on a real kube-apiserver with the
// ShardedListAndWatch gate on, 200 pods; once every process has synced
// and a few seconds passed, the CPU time each uses over 30 s (-bench.full;
// 10 s without; -bench.shard.idle), per second. -bench.shard.cpuprofiles DIR writes each
// process's CPU profile over that span.
// A member's lease renewals, the group's heartbeats, the protocol's clock,
// protoactor's gossip and the etcd provider's keep-alive run all the time;
// an unsharded informer waits on its watch.
//
//	go test ./bench -run '^$' -bench ShardedIdle -benchtime 1x -args -bench.full
var idleSpan = flag.Duration("bench.shard.idle", 0, "BenchmarkShardedIdle's span (0: 30 s with -bench.full, 10 s without)")

func BenchmarkShardedIdle(b *testing.B) {
	pods := 200
	if *scalePods > 0 {
		pods = *scalePods
	}
	c, _, bin, ns := startShardBench(b, pods)
	ranges := *shardRanges
	b.ResetTimer()
	for run := range b.N {
		a := shardproc.Start(b, bin, "a", append(shardArgs(c, ns), "-mode", "unsharded")...)
		ms := make([]*shardproc.Proc, 3)
		prefix := fmt.Sprintf("/actorinformer-shard-idle/%d-%d", time.Now().UnixNano(), run)
		for i := range ms {
			ms[i] = startMember(b, c, bin, ns, prefix, fmt.Sprintf("c%d", i), ranges, "-calls", "")
		}
		all := append([]*shardproc.Proc{a}, ms...)
		wait(b, 2*time.Minute, "every process synced, each range served once", func() string {
			for _, p := range all {
				if st, err := p.State(false); err != nil || !st.Synced {
					return p.Name + " not synced"
				}
			}
			return covered(ms, ranges)
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
		var sum float64
		for i, p := range all {
			perS := (after[i] - before[i]) * 1000 / span.Seconds()
			fmt.Fprintf(&out, "%s %.1f ms/s  ", p.Name, perS)
			if i > 0 {
				sum += perS
			}
		}
		b.Logf("idle CPU, per second: %s", out.String())
		b.ReportMetric(sum/3, "ms/s-member")
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
