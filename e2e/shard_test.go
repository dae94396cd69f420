//go:build !race

// Member processes, built without -race (buildMember): under -race the
// detector would check only this test's harness, not our code, so
// hack/test.sh runs these tests in its step without -race, beside the
// nemesis.

package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/calllog"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// Sharded informers as separate OS processes (internal/shardmember, built
// without -race: buildMember), joined through protoactor's etcd
// provider on the test etcd under a key prefix of their own, over a real
// kube-apiserver: with the ShardedListAndWatch gate on (the server filters)
// and off (the members filter). During churn one member is killed with
// SIGKILL and another joins; then every member's cache and handler view
// must equal the server's objects of its ranges, each object cached once,
// and no two members' handler calls on a range may overlap in time.

// buildMember builds the member program without -race, whatever this test's
// build: a protoactor cluster member beside the etcd provider's gRPC client
// races in protoactor's remote.Start (it sets gRPC's global logger), which
// the race detector reports in every member. Package shard's own code runs
// under -race in its tests.
func buildMember(t *testing.T) string {
	t.Helper()
	bin, err := shardproc.Build(false)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// shardRun is one real-cluster run of the promises.
type shardRun struct {
	t       *testing.T
	c       *testcluster.Cluster
	cs      kubernetes.Interface
	bin     string
	ns      string
	prefix  string
	ranges  int
	members []*shardproc.Proc
	all     []*shardproc.Proc // the killed ones too
	n       int
	// start starts member name; nil: a member joined through the etcd
	// provider on the test etcd, with extra flags.
	start func(name string) *shardproc.Proc
	extra []string
}

func (r *shardRun) join() *shardproc.Proc {
	r.n++
	name := fmt.Sprintf("m%d", r.n)
	var m *shardproc.Proc
	if r.start != nil {
		m = r.start(name)
	} else {
		m = shardproc.Start(r.t, r.bin, name, append([]string{"-host", r.c.Host(), "-token", r.c.AdminToken(),
			"-namespace", r.ns, "-mode", "sharded", "-etcd", r.c.EtcdURL(), "-etcd-prefix", r.prefix,
			"-etcd-ttl", "2s", "-ranges", strconv.Itoa(r.ranges)}, r.extra...)...)
	}
	r.members = append(r.members, m)
	r.all = append(r.all, m)
	return m
}

func (r *shardRun) drop(m *shardproc.Proc) {
	r.members = slices.DeleteFunc(r.members, func(x *shardproc.Proc) bool { return x == m })
}

// settled is "" once every live member has synced, they agree on the view,
// each range is delivered by one member, and their caches and handler views
// equal the server's objects.
func (r *shardRun) settled() string {
	ctx := context.Background()
	list, err := r.cs.CoreV1().ConfigMaps(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	server := map[string]string{}
	for _, cm := range list.Items {
		server[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	union := map[string]string{}
	owner := map[int]string{}
	var view []string
	for _, m := range r.members {
		st, err := m.State(true)
		if err != nil {
			return m.Name + ": " + err.Error()
		}
		if !st.Synced {
			return m.Name + " not synced"
		}
		if view == nil {
			view = st.View
		} else if !slices.Equal(view, st.View) {
			return fmt.Sprintf("views differ: %v, %s's %v", view, m.Name, st.View)
		}
		for _, rg := range st.Ranges {
			if o, dup := owner[rg]; dup {
				return fmt.Sprintf("range %d delivered by %s and %s", rg, o, m.Name)
			}
			owner[rg] = m.Name
		}
		for k, rv := range st.Cache {
			if _, dup := union[k]; dup {
				return k + " cached twice"
			}
			union[k] = rv
		}
		if d := mapDiff(st.Cache, st.Handler); d != "" {
			return m.Name + "'s handler view differs from its cache: " + d
		}
		if len(st.HandlerErrors) > 0 {
			return fmt.Sprintf("%s's handler: %v", m.Name, st.HandlerErrors)
		}
	}
	if len(owner) != r.ranges {
		return fmt.Sprintf("%d of %d ranges delivered", len(owner), r.ranges)
	}
	if d := mapDiff(server, union); d != "" {
		return "the caches differ from the server: " + d
	}
	return ""
}

func mapDiff(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+k)
		} else if g != v {
			out = append(out, fmt.Sprintf("%s at %s, want %s", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}

// overlaps reads every member's call log and returns the calls of
// different members on one range that overlap in time.
func (r *shardRun) overlaps() (int, []string) {
	type call struct {
		member     string
		start, end int64
		what       string
	}
	byRange := map[int][]call{}
	total := 0
	for _, m := range r.all {
		recs, _, err := calllog.Read(m.Calls) // a record a kill cut short is skipped
		if err != nil {
			r.t.Errorf("%s's call log: %v", m.Name, err)
			continue
		}
		for _, c := range recs {
			if !c.Op.Object() {
				continue
			}
			byRange[c.Range] = append(byRange[c.Range], call{m.Name, c.Start, c.End, string(c.Op) + " " + c.Key})
			total++
		}
	}
	var errs []string
	for rg, cs := range byRange {
		sort.Slice(cs, func(i, j int) bool { return cs[i].start < cs[j].start })
		var last call
		for i, c := range cs {
			if i > 0 && last.member != c.member && last.end > c.start {
				errs = append(errs, fmt.Sprintf("range %d: %s's %s overlaps %s's %s", rg, last.member, last.what, c.member, c.what))
			}
			if i == 0 || c.end > last.end {
				last = c
			}
		}
	}
	return total, errs
}

// waitFor waits until cond returns ""; on timeout it fails with the
// members' last log lines.
func (r *shardRun) waitFor(timeout time.Duration, what string, cond func() string) time.Duration {
	r.t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		if last = cond(); last == "" {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var logs strings.Builder
	for _, m := range r.all {
		fmt.Fprintf(&logs, "--- %s:\n%s\n", m.Name, shardproc.Tail(m.Log, 40))
	}
	r.t.Fatalf("%s: not within %v: %s\n%s", what, timeout, last, logs.String())
	return 0
}

func TestShardedMembersRealCluster(t *testing.T) {
	for _, gate := range []bool{true, false} {
		t.Run(fmt.Sprintf("gate=%v", gate), func(t *testing.T) { testShardedMembers(t, gate) })
	}
}

func testShardedMembers(t *testing.T, gate bool) {
	opts := testcluster.Options{}
	if gate {
		opts.FeatureGates = "ShardedListAndWatch=true"
	}
	c := startCluster(t, opts)
	r := &shardRun{t: t, c: c, cs: clientFor(t, c.Config()), bin: buildMember(t), ns: "shards",
		prefix: fmt.Sprintf("/actorinformer-shard-test/%d", time.Now().UnixNano()), ranges: 16}
	ctx := context.Background()
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("o%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.join()
	r.join()
	r.join()
	took := r.waitFor(90*time.Second, "three members settled", r.settled)
	t.Logf("three members settled %v after the third started", took.Round(time.Millisecond))
	wantMode := "client"
	if gate {
		wantMode = "server"
	}
	for _, m := range r.members {
		st, _ := m.State(false)
		if st.FilterMode != wantMode {
			t.Errorf("%s: filter mode %q, want %q", m.Name, st.FilterMode, wantMode)
		}
		if st.Objects < 30 || st.Objects > 200 {
			t.Errorf("%s caches %d of 300", m.Name, st.Objects)
		}
	}

	// Churn: at least 2,000 writes, while one member is killed and another
	// joins.
	ops, waitOps, stop, wg := r.churn()
	waitOps(500)
	victim := r.members[1]
	killedAt := time.Now()
	victim.Kill()
	r.drop(victim)
	waitOps(1000)
	joined := r.join()
	waitOps(2000)
	close(stop)
	wg.Wait()
	t.Logf("%d writes during churn; %s killed at %v, %s started at %v", ops.Load(), victim.Name,
		killedAt.Sub(r.all[0].Start).Round(time.Millisecond), joined.Name, joined.Start.Sub(r.all[0].Start).Round(time.Millisecond))

	took = r.waitFor(120*time.Second, "members settled after churn", r.settled)
	t.Logf("settled %v after the churn stopped", took.Round(time.Millisecond))
	total, errs := r.overlaps()
	if len(errs) > 0 {
		t.Errorf("%d overlapping handler calls of %d, first: %s", len(errs), total, strings.Join(errs[:min(5, len(errs))], "\n"))
	}
	if total == 0 {
		t.Error("no handler call in the members' call logs: the overlap check checked nothing")
	}
	t.Logf("%d handler calls checked for overlaps", total)
	for _, m := range r.members {
		if !m.Stop(60 * time.Second) {
			t.Errorf("%s did not leave within 60s:\n%s", m.Name, shardproc.Tail(m.Log, 30))
		}
	}
	r.checkLogs()
}

// churn starts 4 writers creating, updating and deleting the run's
// ConfigMaps (o0 to o399, and new ones) until stop is closed; waitOps
// waits until they have made n writes, wg until they have stopped.
func (r *shardRun) churn() (ops *atomic.Int64, waitOps func(n int64), stop chan struct{}, wg *sync.WaitGroup) {
	ops, stop, wg = &atomic.Int64{}, make(chan struct{}), &sync.WaitGroup{}
	ctx := context.Background()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(w)))
			n := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				name := fmt.Sprintf("o%d", rnd.Intn(400))
				switch k := rnd.Intn(10); {
				case k < 3:
					n++
					_, err = r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d-%d", w, n)}}, metav1.CreateOptions{})
				case k < 8:
					_, err = r.cs.CoreV1().ConfigMaps(r.ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": strconv.Itoa(n)}}, metav1.UpdateOptions{})
				default:
					err = r.cs.CoreV1().ConfigMaps(r.ns).Delete(ctx, name, metav1.DeleteOptions{})
				}
				if err == nil {
					ops.Add(1)
				}
			}
		}()
	}
	waitOps = func(n int64) {
		for ops.Load() < n {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return ops, waitOps, stop, wg
}

// checkLogs fails on a race report or a panic in any member's log.
func (r *shardRun) checkLogs() {
	for _, m := range r.all {
		b, _ := os.ReadFile(m.Log)
		for _, bad := range []string{"WARNING: DATA RACE", "panic:"} {
			if strings.Contains(string(b), bad) {
				r.t.Errorf("%s's log has %q:\n%s", m.Name, bad, shardproc.Tail(m.Log, 60))
			}
		}
	}
}

// TestShardTakeoverTimes measures, without churn, how long a SIGKILLed
// member's ranges stay unserved and how long a joining member takes to
// serve its share.
func TestShardTakeoverTimes(t *testing.T) {
	c := startCluster(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	r := &shardRun{t: t, c: c, cs: clientFor(t, c.Config()), bin: buildMember(t), ns: "shards",
		prefix: fmt.Sprintf("/actorinformer-shard-times/%d", time.Now().UnixNano()), ranges: 16}
	ctx := context.Background()
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if _, err := r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("o%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.join()
	r.join()
	r.waitFor(90*time.Second, "two members settled", r.settled)
	m3 := r.join()
	r.waitFor(90*time.Second, "the third member settled", r.settled)
	join := time.Since(m3.Start)
	t.Logf("join: %v from the third member's process start until every range was delivered once", join.Round(time.Millisecond))
	victim := r.members[0]
	victim.Kill()
	r.drop(victim)
	kill := r.waitFor(90*time.Second, "the survivors settled", r.settled)
	t.Logf("SIGKILL: the killed member's ranges were served again %v after the kill (provider TTL 2s)", kill.Round(time.Millisecond))
	m4 := r.join()
	r.waitFor(90*time.Second, "a fourth member settled", r.settled)
	leaver := r.members[0]
	left := time.Now()
	leaver.Terminate()
	r.drop(leaver)
	r.waitFor(90*time.Second, "the others settled after the leave", r.settled)
	moved := time.Since(left)
	if !leaver.Stop(60 * time.Second) {
		t.Fatalf("%s did not exit", leaver.Name)
	}
	t.Logf("graceful leave: the others served its ranges %v after its SIGTERM; the process exited after %v",
		moved.Round(time.Millisecond), leaver.Exited().Sub(left).Round(time.Millisecond))
	_ = m4
	for _, m := range r.members {
		if !m.Stop(60 * time.Second) {
			t.Errorf("%s did not leave within 60s:\n%s", m.Name, shardproc.Tail(m.Log, 30))
		}
	}
	r.checkLogs()
}
