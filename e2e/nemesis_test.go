package e2e

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/internal/nemesis"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

var (
	nemesisOn       = flag.Bool("nemesis", false, "run TestNemesis (or set "+nemesisEnv+"=1)")
	nemesisDuration = flag.Duration("nemesis.duration", 0, "0: the short run, every fault once, each in a group of its own; more: a long run of random faults in one group, for this long")
	nemesisFaults   = flag.String("nemesis.faults", "", "the faults to inject, comma-separated (default: all of "+kindList()+")")
	nemesisBin      = flag.String("nemesis.member-bin", "", "the member program to run (default: internal/shardmember, built now)")
	nemesisArgs     = flag.String("nemesis.member-args", "", "flags added to every member's command line, space-separated")
	nemesisMembers  = flag.Int("nemesis.members", 3, "members")
	nemesisRanges   = flag.Int("nemesis.ranges", 16, "ranges")
	nemesisRepeat   = flag.Int("nemesis.repeat", 1, "short run: how many times each fault is injected, each time in a group of its own")
	nemesisTTL      = flag.Duration("nemesis.ttl", 2*time.Second, "the etcd provider's keep-alive TTL")
	nemesisHold     = flag.Duration("nemesis.hold", 8*time.Second, "how long a pause, a partition, a cut from etcd or the API server and etcd's downtime last")
	nemesisRecover  = flag.Duration("nemesis.recover", 30*time.Second, "how long to wait at most for the members to settle after a fault")
	nemesisRate     = flag.Int("nemesis.rate", 100, "writes per second")
	nemesisDelay    = flag.Duration("nemesis.handler-delay", time.Millisecond, "how long each handler call takes")
	nemesisSeed     = flag.Int64("nemesis.seed", 0, "seed of the workload and of the long run's choices (0: the time)")
	nemesisReport   = flag.String("nemesis.report", "", "a file to write the report to, as JSON")
	nemesisUpgrade  = flag.String("nemesis.upgrade-from", "", "a git revision: the members start as the member program was there, and a rolling update replaces them with this one's (the only fault unless -nemesis.faults says otherwise)")
	nemesisKinds    = flag.Int("nemesis.kinds", 1, "1: the members' group carries ConfigMaps of one namespace; 2: hashed by namespace, ConfigMaps and Secrets (AddKind) spread over 3 namespaces per range, checked per kind and for a range's kinds delivered together (kinds-apart)")
	nemesisRollback = flag.String("nemesis.rollback-to", "", "a git revision: a rolling update replaces this version's members with the member program as it was there (the only fault unless -nemesis.faults says otherwise)")
)

const nemesisEnv = "ACTORINFORMER_NEMESIS"

func kindList() string {
	var s []string
	for _, k := range nemesis.Kinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}

// TestNemesis runs sharded members as processes (internal/shardmember) on
// kube-apiserver v1.37.2 with the ShardedListAndWatch gate, joined through
// protoactor's etcd provider, under creates, updates and deletes, injects
// faults and checks the shard package's promises from every process's
// handler calls (package internal/nemesis): no two members' calls on a
// range overlap or interleave without a handover, no key's resourceVersion
// goes back, every deleted object a handler saw reaches an OnDelete (but
// for the deletes in the ownerless gap after a fault that stopped the
// range's deliverer without a handover, counted apart), the caches equal
// the server's at the end, and a member a fault may have fenced serves
// again.
//
// It is opt-in (-nemesis, or ACTORINFORMER_NEMESIS=1): it takes minutes,
// and hack/test.sh runs the short run on its own, outside the -race suite.
// Without the opt-in it skips, whatever ACTORINFORMER_REQUIRE_CLUSTER says.
//
// The short run (the default) injects every fault once, each in a group of
// its own (three members, a namespace and an etcd prefix of their own) on
// one cluster, a partition with a member joining during it: about four
// minutes on 2 cores. -nemesis.duration 10m is a
// long run: random faults, one after the other, in one group, for that
// long. -nemesis.upgrade-from REV and -nemesis.rollback-to REV run a
// rolling update between the member program as it was at the git
// revision REV and this one's, in either direction. -nemesis.kinds 2 runs
// each group hashed by namespace with two kinds, ConfigMaps and Secrets,
// over 48 namespaces, and checks also that a range's kinds are delivered
// by one member at a time (nemesis.VKindsApart).
func TestNemesis(t *testing.T) {
	if !*nemesisOn && os.Getenv(nemesisEnv) == "" {
		t.Skip("opt-in: go test ./e2e -run TestNemesis -nemesis (or " + nemesisEnv + "=1); hack/test.sh runs it")
	}
	kinds := nemesis.Kinds
	if *nemesisFaults != "" {
		kinds = nil
		for _, k := range strings.Split(*nemesisFaults, ",") {
			k := nemesis.Kind(strings.TrimSpace(k))
			if !slices.Contains(nemesis.Kinds, k) {
				t.Fatalf("-nemesis.faults: unknown fault %q (known: %s)", k, kindList())
			}
			kinds = append(kinds, k)
		}
	}
	seed := *nemesisSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	bin := *nemesisBin
	if bin == "" {
		var err error
		if bin, err = shardproc.Build(false); err != nil {
			t.Fatal(err)
		}
	}
	// A rolling update from one version of the member program to another.
	var upgradeBin string
	crossVersion := false
	if *nemesisUpgrade != "" && *nemesisRollback != "" {
		t.Fatal("-nemesis.upgrade-from and -nemesis.rollback-to: one or the other")
	}
	if rev := *nemesisUpgrade + *nemesisRollback; rev != "" {
		other, err := shardproc.BuildAt(rev)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(other)) })
		theirs, err1 := shardproc.ProtocolAt(rev)
		ours, err2 := shardproc.ProtocolAt("")
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		crossVersion = theirs != ours
		t.Logf("nemesis: protocol %d at %s, %d here", theirs, rev, ours)
		if *nemesisUpgrade != "" {
			bin, upgradeBin = other, bin
			t.Logf("nemesis: members start as at %s; a rolling update brings this version's", rev)
		} else {
			upgradeBin = other
			t.Logf("nemesis: members start as this version's; a rolling update brings those of %s", rev)
		}
		if *nemesisFaults == "" {
			kinds = []nemesis.Kind{nemesis.Rolling}
		}
	}
	o := nemesis.Options{Bin: bin, UpgradeBin: upgradeBin, CrossVersion: crossVersion, MemberArgs: strings.Fields(*nemesisArgs), Members: *nemesisMembers, Ranges: *nemesisRanges, TTL: *nemesisTTL,
		Hold: *nemesisHold, Recover: *nemesisRecover, Rate: *nemesisRate, HandlerDelay: *nemesisDelay, Seed: seed, Kinds: *nemesisKinds}
	if o.Kinds != 1 && o.Kinds != 2 {
		t.Fatalf("-nemesis.kinds %d: 1 or 2", o.Kinds)
	}
	if o.Kinds > 1 && upgradeBin != "" {
		t.Fatal("-nemesis.kinds 2 runs this version's members alone: not with -nemesis.upgrade-from or -nemesis.rollback-to")
	}
	t.Logf("nemesis: seed %d, faults %v, %d members, TTL %v, hold %v, handler calls of %v, %d kinds, member args %q",
		seed, kinds, o.Members, o.TTL, o.Hold, o.HandlerDelay, o.Kinds, o.MemberArgs)
	c := startCluster(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true", WatchCache: true})

	var results []*nemesis.Result
	if *nemesisDuration > 0 {
		results = append(results, longNemesis(t, c, o, kinds, *nemesisDuration, rand.New(rand.NewSource(seed))))
	} else {
		n := 0
		for range max(*nemesisRepeat, 1) {
			for _, k := range kinds {
				n++
				t.Run(string(k), func(t *testing.T) {
					results = append(results, shortNemesis(t, c, o, k, fmt.Sprintf("nemesis-%d-%s", n, k)))
				})
			}
		}
	}
	if *nemesisReport != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*nemesisReport, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// shortNemesis injects one fault into a group of its own.
func shortNemesis(t *testing.T, c *testcluster.Cluster, o nemesis.Options, k nemesis.Kind, ns string) *nemesis.Result {
	r := nemesis.NewRun(t, c, ns, o)
	for range o.Members {
		r.Join()
	}
	r.Begin()
	r.StartWorkload()
	time.Sleep(2 * time.Second)
	var target *nemesis.Member
	if !k.Targetless() {
		target = r.Live()[1]
	}
	inject(r, o, k, target, true)
	r.Recover()
	res := r.Check()
	r.Stop()
	report(t, res, r)
	return res
}

// longNemesis injects random faults, one after the other, into one group
// for d, keeping o.Members members (a killed or departed member is
// replaced by a join).
func longNemesis(t *testing.T, c *testcluster.Cluster, o nemesis.Options, kinds []nemesis.Kind, d time.Duration, rnd *rand.Rand) *nemesis.Result {
	r := nemesis.NewRun(t, c, "nemesis", o)
	for range o.Members {
		r.Join()
	}
	r.Begin()
	deadline := time.Now().Add(d)
	for n := 1; time.Now().Before(deadline); n++ {
		r.StartWorkload()
		time.Sleep(time.Second + time.Duration(rnd.Int63n(int64(3*time.Second))))
		k := kinds[rnd.Intn(len(kinds))]
		live := r.Live()
		var target *nemesis.Member
		if !k.Targetless() {
			target = live[rnd.Intn(len(live))]
		}
		t.Logf("nemesis: fault %d, %v left", n, time.Until(deadline).Round(time.Second))
		inject(r, o, k, target, len(live) <= o.Members && rnd.Intn(2) == 0)
		r.Recover()
		for len(r.Live()) < o.Members {
			r.StartWorkload()
			r.Inject(nemesis.Join, nil)
			r.Recover()
		}
	}
	res := r.Check()
	r.Stop()
	report(t, res, r)
	return res
}

// inject injects fault k; a partition, with join, has a member join a
// quarter into it, so that ranges move while the target is cut off.
func inject(r *nemesis.Run, o nemesis.Options, k nemesis.Kind, target *nemesis.Member, join bool) {
	if !join || (k != nemesis.Partition && k != nemesis.PartitionReject) {
		r.Inject(k, target)
		return
	}
	f := r.Start(k, target)
	time.Sleep(o.Hold / 4)
	r.Inject(nemesis.Join, nil)
	f.Wait()
}

func report(t *testing.T, res *nemesis.Result, r *nemesis.Run) {
	t.Helper()
	t.Logf("nemesis report:\n%s", res.Table())
	if res.ExemptCount(nemesis.EResumeGap) > 0 {
		t.Logf("the members' log lines on resumes cut short:\n%s", r.LogsMatching("could not all be replayed", 20))
	}
	if n := res.Count(""); n > 0 {
		var kinds []string
		for _, k := range []string{nemesis.VOverlap, nemesis.VInterleave, nemesis.VKindsApart, nemesis.VRVBack, nemesis.VMissedDelete, nemesis.VDeleteOfLive, nemesis.VTokenBack, nemesis.VNotServing, nemesis.VBystanderFenced, nemesis.VEndState, nemesis.VNoCalls} {
			if c := res.Count(k); c > 0 {
				kinds = append(kinds, fmt.Sprintf("%d %s", c, k))
			}
		}
		t.Errorf("%d violations: %s\nthe members' last log lines:\n%s", n, strings.Join(kinds, ", "), r.Logs())
		if rs := violatedRanges(res); len(rs) > 0 {
			t.Logf("the members' log lines about ranges %v:\n%s", rs, r.LogsAbout(rs, 60))
		}
	}
}

// violatedRanges are the ranges the violations name ("range N").
func violatedRanges(res *nemesis.Result) []int {
	seen := map[int]bool{}
	var out []int
	for _, v := range res.Violations {
		for _, m := range rangeRE.FindAllStringSubmatch(v.Detail, -1) {
			if i, err := strconv.Atoi(m[1]); err == nil && !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	return out
}

var rangeRE = regexp.MustCompile(`range (\d+)\b`)
